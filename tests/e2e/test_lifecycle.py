"""Killing the harness mid-run (issue #23, item 5): after SIGTERM, SIGHUP or SIGKILL of
``agent2rl run`` no process of the run survives; SIGTERM ends the run ``interrupted`` with its
report, and ``agent2rl report`` closes a run whose harness was SIGKILLed.

The agent (``holdout``) is as hard to stop as an agent gets without leaving its sandbox: a
daemon in a session of its own and an orphan, all ignoring SIGTERM, and a submission being
graded when the harness is killed. Real CLI, real grading service, real processes.
"""

from __future__ import annotations

import signal

import pytest
from support.cli import run_cli
from support.lifecycle import (
    cgroups_left,
    in_flight,
    kill_leftovers,
    run_processes,
    start_run,
    wait_for_agent,
    wait_gone,
)

from agent2rl.grading.ledger import Ledger
from agent2rl.rundir import RunInfo
from agent2rl.sandbox import bwrap_available


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_ends_the_run_interrupted_with_its_report(tmp_path, sig) -> None:
    runs, log = tmp_path / "runs", tmp_path / "console.log"
    proc = start_run(runs, "none", log)
    paths = None
    try:
        paths = wait_for_agent(runs, proc, log)
        assert len(run_processes(paths.root)) >= 4  # service, agent, daemon, orphan (+ guard)
        proc.send_signal(sig)
        code = proc.wait(timeout=60)
        assert code == 128 + sig, log.read_text()
        assert wait_gone(paths.root) == [], "no process of the run survives it"
        assert cgroups_left(paths) == []
        info = RunInfo.load(paths)
        assert info.status == "interrupted" and signal.Signals(sig).name in (info.error or "")
        assert info.ended_at is not None
        assert (paths.report / "report.md").is_file()
        assert (paths.report / "metrics.json").is_file()
        assert (runs / "results.db").is_file()
        with Ledger(paths.ledger) as ledger:
            assert all(s.status in ("graded", "failed") for s in ledger.submissions())
    finally:
        if proc.poll() is None:
            proc.kill()
        if paths is not None:
            kill_leftovers(paths.root)


@pytest.mark.slow
@pytest.mark.parametrize(
    "sandbox",
    [
        "none",
        pytest.param(
            "bwrap",
            marks=pytest.mark.skipif(not bwrap_available(), reason="bubblewrap is not usable"),
        ),
    ],
)
def test_sigkill_leaves_no_process_and_report_closes_the_run(tmp_path, sandbox) -> None:
    runs, log = tmp_path / "runs", tmp_path / "console.log"
    proc = start_run(runs, sandbox, log)
    paths = None
    try:
        paths = wait_for_agent(runs, proc, log)
        cut = in_flight(paths)
        proc.kill()
        proc.wait()
        left = wait_gone(paths.root)
        assert left == [], f"processes of the run survived the harness's SIGKILL: {left}"
        assert cgroups_left(paths) == []  # the guard removed the agent's cgroup
        assert RunInfo.load(paths).status == "running"  # nobody could write otherwise

        r = run_cli(["report", str(paths.root)], timeout=120)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "marked the run interrupted" in r.stderr
        info = RunInfo.load(paths)
        assert info.status == "interrupted" and "harness" in (info.error or "")
        assert info.ended_at is not None and info.ended_at >= (info.start or 0)
        assert (paths.report / "report.md").is_file()
        with Ledger(paths.ledger) as ledger:
            subs = {s.id: s for s in ledger.submissions()}
        assert all(s.status in ("graded", "failed") for s in subs.values())
        for sub_id in cut:  # cut by the kill: the harness's fault, never the model's
            assert subs[sub_id].status in ("graded", "failed")
            if subs[sub_id].status == "failed":
                assert subs[sub_id].failure_kind == "harness"
    finally:
        if proc.poll() is None:
            proc.kill()
        if paths is not None:
            kill_leftovers(paths.root)


def test_a_missing_agent_file_writes_nothing(tmp_path) -> None:
    """Issue #23 item 12: the agent's files are checked before the run directory exists."""
    spec = tmp_path / "broken.toml"
    spec.write_text(
        'name = "broken"\ndescription = "a spec whose file is missing"\n'
        'command = ["{python}", "code/nope.py"]\nfiles = ["nope.py"]\n'
    )
    runs = tmp_path / "runs"
    r = run_cli(
        ["run", "--task", "arith-lite", "--agent", str(spec), "--runs-dir", str(runs)],
        timeout=120,
    )
    assert r.returncode == 2, r.stdout + r.stderr
    assert "file nope.py not found" in r.stderr and "Traceback" not in r.stderr + r.stdout
    assert not runs.exists() or not any(runs.iterdir())
