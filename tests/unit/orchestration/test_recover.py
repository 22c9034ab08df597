"""``agent2rl report`` on a run whose harness died: the run is closed ``interrupted`` and its
in-flight submissions failed as the harness's fault; a live or finished run is left alone."""

from __future__ import annotations

import os
import subprocess
import time

import pytest
from support.cli import run_cli
from support.rundirs import write_run

from agent2rl.grading.ledger import Ledger
from agent2rl.orchestration.guard import start_ticks
from agent2rl.orchestration.recover import close_dead_run, harness_alive, harness_record
from agent2rl.rundir import RunInfo, RunPaths


def _run(tmp_path, harness: dict | None, status: str = "running") -> RunPaths:
    now = time.time()
    paths = write_run(
        tmp_path / "run",
        run_id="run",
        budget_s=60,
        created_at=now - 30,
        start=now - 20,
        deadline=now + 40,
        status=status,
        harness=harness,
    )
    with Ledger(paths.ledger) as ledger:
        done = ledger.add_submission("output/v1", "h1", "e")
        ledger.update_submission(done, status="graded", score=1.0, finished_at=now - 10)
        ledger.add_submission("output/v2", "h2", "e")
    return paths


def _dead_harness() -> dict:
    proc = subprocess.Popen(["true"])
    rec = {"pid": proc.pid, "start_ticks": start_ticks(proc.pid), "host": harness_record()["host"]}
    proc.wait()
    return rec


def test_a_dead_harness_closes_the_run(tmp_path) -> None:
    paths = _run(tmp_path, _dead_harness())
    note = close_dead_run(paths)
    assert note is not None and "1 submission(s) in flight" in note
    info = RunInfo.load(paths)
    assert info.status == "interrupted" and "harness process died" in (info.error or "")
    assert info.ended_at is not None and info.ended_at <= time.time()
    with Ledger(paths.ledger) as ledger:
        first, second = ledger.submissions()
    assert first.status == "graded" and first.score == 1.0
    assert second.status == "failed" and second.failure_kind == "harness" and second.error
    assert close_dead_run(paths) is None  # closed once


def test_a_reused_pid_counts_as_dead(tmp_path) -> None:
    rec = harness_record()
    rec["start_ticks"] = int(rec["start_ticks"]) + 1  # our pid, but not the same process
    paths = _run(tmp_path, rec)
    assert harness_alive(RunInfo.load(paths)) is False
    assert close_dead_run(paths) is not None


@pytest.mark.parametrize(
    "harness,status",
    [
        (harness_record(), "running"),  # this process: alive
        ({"pid": os.getpid(), "start_ticks": 1, "host": "elsewhere"}, "running"),  # can't tell
        (None, "running"),  # an older run.json
        ("dead", "deadline"),  # finished: nothing to close
    ],
)
def test_a_live_unknown_or_finished_run_is_left_alone(tmp_path, harness, status) -> None:
    paths = _run(tmp_path, _dead_harness() if harness == "dead" else harness, status)
    before = paths.run_json.read_text()
    assert close_dead_run(paths) is None
    assert paths.run_json.read_text() == before
    with Ledger(paths.ledger) as ledger:
        assert ledger.submissions()[1].status == "evaluating"


def test_report_command_on_a_live_run_says_so(tmp_path) -> None:
    paths = _run(tmp_path, harness_record())
    r = run_cli(["report", str(paths.root)], timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "still running" in r.stderr
    assert RunInfo.load(paths).status == "running"


def test_report_command_closes_a_dead_run(tmp_path) -> None:
    paths = _run(tmp_path, _dead_harness())
    r = run_cli(["report", str(paths.root)], timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "marked the run interrupted" in r.stderr
    assert RunInfo.load(paths).status == "interrupted"
    assert (paths.report / "report.md").is_file()
