"""A whole run through the real CLI, under bubblewrap: an agent that hides graded items in
``/tmp`` (a hard-coded path, not its TMPDIR) is flagged as contaminated. Before, the
sandbox's ``/tmp`` was a tmpfs that ended with the agent, and the check never saw it."""

from __future__ import annotations

import json

import pytest
from support.cli import only_run, run_cli

from agent2rl.integrity.contamination import CONTAMINATION_FILE
from agent2rl.sandbox import bwrap_available
from agent2rl.settings import load_settings
from agent2rl.tasks import get_task, prepare_task

#: The scripted agent: the test plants the items it "found" in the script; it writes them to
#: /tmp, leaves the workspace clean, and stops without submitting.
AGENT = """import json
STOLEN = json.loads({stolen!r})
with open("/tmp/notes.jsonl", "w") as fh:
    fh.write("\\n".join(json.dumps(r) for r in STOLEN) + "\\n")
"""


@pytest.mark.slow
@pytest.mark.skipif(not bwrap_available(), reason="needs bubblewrap (the sandbox's /tmp)")
def test_graded_items_hidden_in_tmp_are_flagged(tmp_path) -> None:
    task = get_task("arith-lite")
    prepared = prepare_task(task, load_settings().task_store)
    private = task.samples(prepared, "private")[:10]
    stolen = [{"question": s.input["question"], "answer": s.target} for s in private]
    # The script stays out of the workspace (a `files` entry would copy it into code/, and
    # the scan would find the items there): the agent runs it from the read-only data dir.
    (tmp_path / "hider.toml").write_text(
        'name = "hider"\ndescription = "Test agent: hides private items in /tmp"\n'
        f'command = ["{{python}}", "-c", {json.dumps(AGENT.format(stolen=json.dumps(stolen)))}]\n'
    )
    runs = tmp_path / "runs"
    r = run_cli(
        ["run", "--task", "arith-lite", "--agent", str(tmp_path / "hider.toml"),
         "--budget", "60s", "--sandbox", "bwrap", "--runs-dir", str(runs)]
    )  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    paths = only_run(runs)
    found = json.loads((paths.record / CONTAMINATION_FILE).read_text())
    assert found["flagged"] and found["matched_items"] == 10, found
    assert {m["item_id"] for m in found["matches"]} == {s.id for s in private}
    # (and, after it, in the run's code snapshots, which recorded the file)
    assert all(
        m["files"][0] == ".tmp/notes.jsonl"
        and all(f.startswith("record/code.git") for f in m["files"][1:])
        for m in found["matches"]
    )
