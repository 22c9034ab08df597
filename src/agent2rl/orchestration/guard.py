"""The run's guard: a small process that kills what a dead harness leaves behind.

A harness killed by SIGKILL (the OOM killer, ``kill -9``, a scheduler past its grace period)
runs no cleanup. The kernel's parent-death signal (:func:`agent2rl.child_process.
die_with_parent`) stops the harness's direct children, but not what they started: an
evaluation worker, the agent's daemons (``setsid``, double forks), a process tree in a
cgroup. The guard is started first, in a session of its own and with no parent-death
signal, holding the read end of a pipe whose only writer is the harness. The harness tells
it, one JSON line at a time, how to recognise the run's processes:

- ``{"harness_mark": M}``: every process the harness starts inherits ``AGENT2RL_HARNESS_MARK=M``
  (set in the harness's environment for the run), the services and their workers included;
- ``{"mark": M}``: the agent's marker (:data:`AGENT_MARK_ENV`);
- ``{"cgroup": [DIR, ...]}``: the agent's cgroup directories;
- ``{"pids": [[PID, START], ...]}``: agent processes the harness saw, with their start time
  (clock ticks since boot, ``/proc/PID/stat`` field 22) so that a reused pid is never hit.

When the pipe reaches end of file (the harness exited, whichever way: the kernel closes a
dead process's descriptors), the guard sweeps: SIGTERM to every process it recognises, a
short grace, then SIGKILL until none is left (bounded), the cgroup directories removed; then
it exits. The harness's own stop path closes the pipe last, once it has stopped everything
itself, so on a clean end the sweep finds nothing.

Standard library only (and :mod:`agent2rl.files`), so it starts in tens of milliseconds:
``python -m agent2rl.orchestration.guard RUN_DIR --harness-pid PID``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from agent2rl.files import json_object

HARNESS_MARK_ENV = "AGENT2RL_HARNESS_MARK"
AGENT_MARK_ENV = "AGENT2RL_AGENT_MARK"  # every process the agent starts inherits it

#: seconds the processes get between SIGTERM and SIGKILL in a sweep
SWEEP_GRACE_S = 2.0
#: at most this long SIGKILLing what keeps appearing (a fork loop in the agent's tree)
SWEEP_KILL_S = 5.0


def _stat(pid: int) -> list[str]:
    """The fields of ``/proc/PID/stat`` after the command name (field 3 on); [] when ``pid``
    does not exist."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return []


def start_ticks(pid: int) -> int | None:
    """``pid``'s start time in clock ticks since boot (None when it does not exist): with
    the pid, an identity that survives pid reuse."""
    try:
        return int(_stat(pid)[19])
    except (IndexError, ValueError):
        return None


def marked_pids(marks: set[bytes]) -> set[int]:
    """Processes whose environment holds one of ``marks`` (``NAME=VALUE``), read from
    ``/proc`` (none without it: not Linux)."""
    out: set[int] = set()
    try:
        names = os.listdir("/proc") if marks else []
    except OSError:  # no /proc: the harness's own stop path only
        names = []
    for name in filter(str.isdigit, names):
        try:
            with open(f"/proc/{name}/environ", "rb") as fh:
                env = fh.read()
        except OSError:
            continue
        if any(m + b"\0" in env or env.endswith(m) for m in marks):
            out.add(int(name))
    return out


class RunGuard:
    """The harness's side: start the guard, tell it what belongs to the run, close it.

    Every method is safe to call after the guard died (its messages are then dropped: the
    harness still stops everything itself on any path that runs Python code).
    """

    def __init__(self, proc: subprocess.Popen, harness_mark: str) -> None:
        self.proc = proc
        self.harness_mark = harness_mark
        self._sent_pids: set[tuple[int, int]] = set()

    @classmethod
    def start(cls, run_dir: Path, log_path: Path) -> RunGuard:
        """Start the guard for ``run_dir`` (its output appended to ``log_path``) and a fresh
        harness mark, which the caller puts in the environment its children inherit."""
        # Imported here: the guard process itself runs on the standard library only.
        from agent2rl.child_process import spawn_child

        mark = secrets.token_hex(12)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "ab") as log:
            proc = spawn_child(
                [sys.executable, "-m", __name__, str(run_dir), "--harness-pid", str(os.getpid())],
                env={k: v for k, v in os.environ.items() if k != HARNESS_MARK_ENV},
                stdin=subprocess.PIPE,
                stdout=log,
                # Its own session: a terminal's Ctrl-C reaches the harness, whose own stop
                # path runs; the guard must outlive the harness, so no parent-death signal.
                death_signal=None,
            )
        guard = cls(proc, mark)
        guard._send({"harness_mark": mark})
        return guard

    def watch_mark(self, mark: str) -> None:
        """The agent's marker: every process with it in its environment is the agent's."""
        self._send({"mark": mark})

    def watch_cgroup(self, dirs: Iterable[Path]) -> None:
        """The agent's cgroup directories: every process in them is the agent's."""
        self._send({"cgroup": [str(d) for d in dirs]})

    def watch_pids(self, pids: Iterable[int]) -> None:
        """Processes of the agent's tree (e.g. what the resource sampler saw); only new ones
        are sent."""
        fresh = []
        for pid in pids:
            ticks = start_ticks(pid)
            if ticks is not None and (pid, ticks) not in self._sent_pids:
                self._sent_pids.add((pid, ticks))
                fresh.append([pid, ticks])
        if fresh:
            self._send({"pids": fresh})

    def close(self, timeout: float = SWEEP_GRACE_S + SWEEP_KILL_S + 5.0) -> None:
        """Close the pipe (the guard sweeps whatever is left) and wait for it; idempotent."""
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()
        from agent2rl.child_process import kill_group

        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            kill_group(self.proc)

    def _send(self, message: dict[str, Any]) -> None:
        stdin = self.proc.stdin
        if stdin is None or stdin.closed:
            return
        with contextlib.suppress(OSError):  # the guard died: the harness's stop path applies
            stdin.write(json.dumps(message).encode() + b"\n")
            stdin.flush()


# --- the guard process ----------------------------------------------------------------------


class _Watch:
    """What the guard knows of the run."""

    def __init__(self, exclude: set[int]) -> None:
        self.marks: set[bytes] = set()
        self.cgroups: list[Path] = []
        self.pids: set[tuple[int, int]] = set()
        self.exclude = exclude

    def take(self, message: dict[str, Any]) -> None:
        if "harness_mark" in message:
            self.marks.add(f"{HARNESS_MARK_ENV}={message['harness_mark']}".encode())
        if "mark" in message:
            self.marks.add(f"{AGENT_MARK_ENV}={message['mark']}".encode())
        self.cgroups += [Path(d) for d in message.get("cgroup", ())]
        self.pids |= {(int(pid), int(ticks)) for pid, ticks in message.get("pids", ())}

    def found(self) -> set[int]:
        """Live, non-zombie processes of the run (never the guard or the harness)."""
        out: set[int] = set()
        for pid, ticks in self.pids:
            if start_ticks(pid) == ticks:
                out.add(pid)
        for d in self.cgroups:
            with contextlib.suppress(OSError, ValueError):
                out.update(int(p) for p in (d / "cgroup.procs").read_text().split())
        out |= marked_pids(self.marks)
        return {p for p in out if p not in self.exclude and not _zombie(p)}


def _zombie(pid: int) -> bool:
    fields = _stat(pid)
    return not fields or fields[0] in "ZX"


def _signal_all(pids: Iterable[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def sweep(watch: _Watch, grace_s: float = SWEEP_GRACE_S, kill_s: float = SWEEP_KILL_S) -> int:
    """SIGTERM every process of the run, wait up to ``grace_s`` for them to go, then SIGKILL
    what is left (again and again for up to ``kill_s``, as a forking tree refills); remove
    the cgroup directories. Returns how many processes were found at first."""
    first = watch.found()
    if first:
        # cgroup v2 kills a whole cgroup at once, forks in flight included
        for d in watch.cgroups:
            if (d / "cgroup.kill").exists():
                with contextlib.suppress(OSError):
                    (d / "cgroup.kill").write_text("1")
        _signal_all(first, signal.SIGTERM)
        end = time.monotonic() + grace_s
        while time.monotonic() < end and watch.found():
            time.sleep(0.05)
        end = time.monotonic() + kill_s
        while (left := watch.found()) and time.monotonic() < end:
            _signal_all(left, signal.SIGKILL)
            time.sleep(0.05)
    for d in watch.cgroups:
        for _ in range(20):  # the kernel empties a cgroup a moment after its last exit
            try:
                d.rmdir()
                break
            except FileNotFoundError:
                break
            except OSError:
                time.sleep(0.05)
    return len(first)


def _still_alive(pid: int, settle_s: float = 1.0) -> bool:
    """Whether the harness outlived the end of its pipe. A killed process closes its files
    before it becomes a zombie, so a dying harness gets ``settle_s`` to finish exiting."""
    end = time.monotonic() + settle_s
    while start_ticks(pid) is not None and not _zombie(pid):
        if time.monotonic() > end:
            return True
        time.sleep(0.05)
    return False


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m agent2rl.orchestration.guard")
    ap.add_argument("run_dir", type=Path, help="the run's directory (for the log)")
    ap.add_argument("--harness-pid", type=int, required=True)
    args = ap.parse_args(argv)
    # Only the end of the pipe ends the guard: a signal meant for the harness is not for it.
    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    watch = _Watch(exclude={os.getpid(), args.harness_pid})
    for line in sys.stdin.buffer:  # a line that is not a JSON object is skipped
        if (message := json_object(line)) is not None:
            watch.take(message)
    found = sweep(watch)
    if found:  # only then does it matter how the harness ended (a normal end waits on us)
        who = "the harness stopped" if _still_alive(args.harness_pid) else "the harness died"
        print(
            f"guard: {who}, leaving {found} process(es) of {args.run_dir.name}; killed",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
