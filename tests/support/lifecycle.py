"""Killing the harness mid-run (issue #23 item 5; with vLLM, issue #37 item 4): start a run
of the ``holdout`` agent, wait for its submission, find every process of the run from
/proc. Shared by tests/e2e/test_lifecycle.py and tests/vllm/test_vllm_lifecycle.py."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

from agent2rl.grading.ledger import Ledger
from agent2rl.rundir import RunPaths
from support import AGENTS
from support.cli import agent2rl_cmd

START_TIMEOUT_S = 120.0  # the first run of a session measures the baseline
GONE_TIMEOUT_S = 10.0


def run_processes(root: Path) -> list[tuple[int, str]]:
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


def cgroups_left(paths: RunPaths) -> list[Path]:
    """The agent's cgroup directories still there (cgroup v2 or v1's memory and pids)."""
    name = f"agent2rl-{paths.root.name}"
    root = Path("/sys/fs/cgroup")
    candidates = [root / name, root / "unified" / name, root / "memory" / name]
    return [d for d in candidates + [root / "pids" / name] if d.exists()]


def wait_gone(root: Path, timeout: float = GONE_TIMEOUT_S) -> list[tuple[int, str]]:
    end = time.time() + timeout
    while (left := run_processes(root)) and time.time() < end:
        time.sleep(0.2)
    return left


def kill_leftovers(root: Path) -> None:
    """Leave nothing behind whatever failed (a leak fails later tests' process checks)."""
    for pid, _ in run_processes(root):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def start_run(runs: Path, sandbox: str, log: Path, extra: tuple[str, ...] = ()) -> subprocess.Popen:
    """``agent2rl run`` of the ``holdout`` agent on arith-lite, with ``extra`` options (a
    grading backend), in a session of its own, its output into ``log``."""
    cmd = agent2rl_cmd() + ["run", "--task", "arith-lite", "--agent"]
    cmd += [str(AGENTS / "holdout.toml"), "--budget", "5m", "--runs-dir", str(runs)]
    cmd += ["--sandbox", sandbox, *extra]
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


def wait_for_agent(
    runs: Path, proc: subprocess.Popen, log: Path, timeout: float = START_TIMEOUT_S
) -> RunPaths:
    """The run once its agent has started its children and its submission is in the
    ledger (being graded, most likely)."""
    end = time.time() + timeout
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


def in_flight(paths: RunPaths) -> set[int]:
    with Ledger(paths.ledger) as ledger:
        return {s.id for s in ledger.submissions() if s.status == "evaluating"}
