"""The run's guard kills what a SIGKILLed harness leaves behind (processes that inherited the
harness's mark, the agent's marked tree, pids it was told of), and nothing else."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from agent2rl.orchestration.guard import HARNESS_MARK_ENV, RunGuard, _Watch, start_ticks

SLEEPER = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"

#: a stand-in harness: a guard, then three children that ignore SIGTERM in sessions of their
#: own (found by the harness mark, by the agent's mark, by pid), then it waits to be killed
HARNESS = f"""
import json, os, subprocess, sys, time
from pathlib import Path
from agent2rl.orchestration.guard import HARNESS_MARK_ENV, RunGuard
run = Path(sys.argv[1])
guard = RunGuard.start(run, run / "guard.log")
os.environ[HARNESS_MARK_ENV] = guard.harness_mark
sleeper = [sys.executable, "-c", {SLEEPER!r}]
service = subprocess.Popen(sleeper, start_new_session=True)
agent = subprocess.Popen(sleeper, start_new_session=True, env={{"AGENT2RL_AGENT_MARK": "m1"}})
scrubbed = subprocess.Popen(sleeper, start_new_session=True, env={{}})
guard.watch_mark("m1")
guard.watch_pids([scrubbed.pid])
print(json.dumps([service.pid, agent.pid, scrubbed.pid, guard.proc.pid]), flush=True)
time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def _wait_dead(pids: list[int], timeout: float = 15.0) -> list[int]:
    end = time.time() + timeout
    while (left := [p for p in pids if _alive(p)]) and time.time() < end:
        time.sleep(0.05)
    return left


def _kill(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def test_a_sigkilled_harness_leaves_nothing_behind(tmp_path) -> None:
    bystander = subprocess.Popen([sys.executable, "-c", SLEEPER], start_new_session=True)
    harness = subprocess.Popen(
        [sys.executable, "-c", HARNESS, str(tmp_path)], stdout=subprocess.PIPE, text=True
    )
    pids: list[int] = []
    try:
        assert harness.stdout is not None
        pids = json.loads(harness.stdout.readline())
        assert all(_alive(p) for p in pids)
        harness.kill()
        harness.wait()
        assert _wait_dead(pids) == [], (tmp_path / "guard.log").read_text()
        assert "the harness died" in (tmp_path / "guard.log").read_text()
        assert bystander.poll() is None, "an unrelated process is left alone"
    finally:
        harness.kill()
        _kill(pids)
        bystander.kill()
        bystander.wait()


def test_close_sweeps_leftovers_and_spares_the_harness(tmp_path) -> None:
    guard = RunGuard.start(tmp_path, tmp_path / "guard.log")
    left = subprocess.Popen(
        [sys.executable, "-c", SLEEPER],
        start_new_session=True,
        env={**os.environ, HARNESS_MARK_ENV: guard.harness_mark},
    )
    try:
        time.sleep(0.2)  # let it exec (its environment is read from /proc)
        guard.close()
        assert guard.proc.returncode == 0
        assert left.wait(timeout=5) is not None
        assert "the harness stopped" in (tmp_path / "guard.log").read_text()
    finally:
        left.kill()
        left.wait()


def test_a_reused_pid_is_not_a_target() -> None:
    other = subprocess.Popen([sys.executable, "-c", SLEEPER])
    try:
        ticks = start_ticks(other.pid)
        assert ticks is not None
        watch = _Watch(exclude=set())
        watch.take({"pids": [[other.pid, ticks + 1]]})  # the same pid, another process
        assert watch.found() == set()
        watch.take({"pids": [[other.pid, ticks]]})
        assert watch.found() == {other.pid}
    finally:
        other.kill()
        other.wait()
