"""The contamination check on real tasks' splits and real workspaces: private items the agent
copied are found (and only those), the public data the harness gave it never is, and what the
egress log shows it fetched is judged by address."""

from __future__ import annotations

import json
import shutil

import pytest
from support.rundirs import run_stub

from agent2rl.integrity.contamination import (
    CONTAMINATION_FILE,
    check_run,
    read_contamination,
    read_egress,
    scan_workspace,
)
from agent2rl.integrity.ngrams import PrivateIndex
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


def test_egress_log_is_judged_by_address(tmp_path) -> None:
    log = tmp_path / "egress.jsonl"
    rows = [
        {"host": "pypi.org", "port": 443, "allowed": True},
        {"host": "raw.githubusercontent.com", "path": "/openai/grade-school-math/test.jsonl"},
        {"host": "huggingface.co", "path": "/datasets/openai/gsm8k/resolve/main/x.parquet"},
        {"host": "huggingface.co", "path": "/datasets/other/data", "allowed": True},
        {"host": "github.com", "path": "/openai/gsm8k", "allowed": False},
    ]
    log.write_text("".join(json.dumps(r) + "\n" for r in rows) + "{torn")
    summary = read_egress(log, ("gsm8k", "grade-school-math"))
    assert summary.requests == 5
    assert summary.flagged_urls == [
        "http://raw.githubusercontent.com/openai/grade-school-math/test.jsonl",
        "http://huggingface.co/datasets/openai/gsm8k/resolve/main/x.parquet",
    ]  # the refused github.com request fetched nothing
    assert len(summary.dataset_urls) == 2 and "pypi.org" in summary.hosts

    index = PrivateIndex.build({"a": "one two three four five six seven"}, [])
    ws = tmp_path / "ws"
    ws.mkdir()
    report = scan_workspace(ws, index, log, task="gsm8k")
    assert report.flagged and report.matched_items == 0 and len(report.egress.flagged_urls) == 2
    assert not scan_workspace(ws, index, log, task="arith-lite").flagged


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
