"""Killing the harness mid-run (issue #23, item 5): after SIGTERM, SIGHUP or SIGKILL of
``agent2rl run`` no process of the run survives; SIGTERM ends the run ``interrupted`` with its
report, and ``agent2rl report`` closes a run whose harness was SIGKILLed.

The agent (``holdout``) is as hard to stop as an agent gets without leaving its sandbox: a
daemon in a session of its own and an orphan, all ignoring SIGTERM, and a submission being
graded when the harness is killed. Real CLI, real grading service, real processes.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from support import AGENTS
from support.cli import agent2rl_cmd, run_cli

from agent2rl.grading.ledger import Ledger
from agent2rl.rundir import RunInfo, RunPaths
from agent2rl.sandbox import bwrap_available

START_TIMEOUT_S = 120.0  # the first run of a session measures the baseline
GONE_TIMEOUT_S = 10.0


def _run_processes(root: Path) -> list[tuple[int, str]]:
    """Live processes of the run in ``root``: its path in their command line, working
    directory or environment (the agent's has WORKSPACE=<root>/workspace)."""
    needle = str(root).encode()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            state = Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()[0]
            cmd = Path(f"/proc/{name}/cmdline").read_bytes()
            env = Path(f"/proc/{name}/environ").read_bytes()
            try:
                cwd = os.readlink(f"/proc/{name}/cwd").encode()
            except OSError:
                cwd = b""
        except (OSError, IndexError):
            continue
        if state != "Z" and (needle in cmd or needle in env or needle in cwd):
            found.append((int(name), cmd.replace(b"\0", b" ").decode(errors="replace")[:200]))
    return found


def _cgroups_left(paths: RunPaths) -> list[Path]:
    """The agent's cgroup directories still there (cgroup v2 or v1's memory and pids)."""
    name = f"agent2rl-{paths.root.name}"
    root = Path("/sys/fs/cgroup")
    candidates = [root / name, root / "unified" / name, root / "memory" / name]
    return [d for d in candidates + [root / "pids" / name] if d.exists()]


def _wait_gone(root: Path, timeout: float = GONE_TIMEOUT_S) -> list[tuple[int, str]]:
    end = time.time() + timeout
    while (left := _run_processes(root)) and time.time() < end:
        time.sleep(0.2)
    return left


def _kill_leftovers(root: Path) -> None:
    """Leave nothing behind whatever failed (a leak fails later tests' process checks)."""
    for pid, _ in _run_processes(root):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _start(runs: Path, sandbox: str, log: Path) -> subprocess.Popen:
    cmd = agent2rl_cmd() + ["run", "--task", "arith-lite", "--agent"]
    cmd += [str(AGENTS / "holdout.toml"), "--budget", "5m", "--runs-dir", str(runs)]
    cmd += ["--sandbox", sandbox]
    with open(log, "wb") as out:
        # Its own session, as under `timeout` or a scheduler: only our signals reach it. Its
        # stop signals start at their defaults even when the suite runs under `nohup` or as a
        # background job (the run rightly keeps a signal that starts ignored ignored).
        return subprocess.Popen(
            cmd,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_default_stop_signals,
        )


def _default_stop_signals() -> None:
    for sig in (signal.SIGHUP, signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_DFL)


def _wait_for_agent(runs: Path, proc: subprocess.Popen, log: Path) -> RunPaths:
    """The run once its agent has started its children and its submission is in the
    ledger (being graded, most likely)."""
    end = time.time() + START_TIMEOUT_S
    while time.time() < end:
        assert proc.poll() is None, log.read_text()
        dirs = [d for d in runs.iterdir() if d.is_dir()] if runs.exists() else []
        if dirs:
            paths = RunPaths(dirs[0])
            agent_log = paths.agent_log.read_text() if paths.agent_log.exists() else ""
            if "started children" in agent_log and paths.ledger.exists():
                with Ledger(paths.ledger) as ledger:
                    if ledger.submissions():
                        return paths
        time.sleep(0.1)
    raise AssertionError(f"the agent did not start in time:\n{log.read_text()}")


def _in_flight(paths: RunPaths) -> set[int]:
    with Ledger(paths.ledger) as ledger:
        return {s.id for s in ledger.submissions() if s.status == "evaluating"}


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_ends_the_run_interrupted_with_its_report(tmp_path, sig) -> None:
    runs, log = tmp_path / "runs", tmp_path / "console.log"
    proc = _start(runs, "none", log)
    paths = None
    try:
        paths = _wait_for_agent(runs, proc, log)
        assert len(_run_processes(paths.root)) >= 4  # service, agent, daemon, orphan (+ guard)
        proc.send_signal(sig)
        code = proc.wait(timeout=60)
        assert code == 128 + sig, log.read_text()
        assert _wait_gone(paths.root) == [], "no process of the run survives it"
        assert _cgroups_left(paths) == []
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
            _kill_leftovers(paths.root)


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
    proc = _start(runs, sandbox, log)
    paths = None
    try:
        paths = _wait_for_agent(runs, proc, log)
        in_flight = _in_flight(paths)
        proc.kill()
        proc.wait()
        left = _wait_gone(paths.root)
        assert left == [], f"processes of the run survived the harness's SIGKILL: {left}"
        assert _cgroups_left(paths) == []  # the guard removed the agent's cgroup
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
        for sub_id in in_flight:  # cut by the kill: the harness's fault, never the model's
            assert subs[sub_id].status in ("graded", "failed")
            if subs[sub_id].status == "failed":
                assert subs[sub_id].failure_kind == "harness"
    finally:
        if proc.poll() is None:
            proc.kill()
        if paths is not None:
            _kill_leftovers(paths.root)


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
