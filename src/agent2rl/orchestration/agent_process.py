"""The agent's process tree: launch it in its own process group, and kill all of it.

"All of it" includes processes that left the group (``setsid``, double forks). Three nets
catch them: the process group; every pid the resource sampler ever saw in the tree; and a
marker environment variable (``AGENT2RL_AGENT_MARK``) that every process the agent starts
inherits, found by scanning ``/proc``. Under bubblewrap the pid namespace dies with the
sandbox as well, which catches even a process that scrubbed its environment.

If the harness itself is killed (SIGKILL: no code of it runs), the agent's top process gets
SIGKILL from the kernel (a parent-death signal); under bubblewrap that ends the sandbox and
its pid namespace, everything in it included. The rest of a tree outside a sandbox is the
run's guard's to kill (:mod:`agent2rl.orchestration.guard`, told the marker and the cgroup).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import subprocess
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import psutil

from agent2rl.child_process import signal_group, spawn_child
from agent2rl.orchestration.guard import AGENT_MARK_ENV as MARK_ENV
from agent2rl.orchestration.guard import marked_pids


class AgentProcess:
    """One launched agent: ``argv`` runs with ``cwd`` and exactly ``env`` (plus the marker).
    ``preexec``, when given, runs in the child before it executes ``argv`` (joining the run's
    cgroup, setting a process limit), so the agent is confined from its first instruction."""

    def __init__(
        self,
        argv: list[str],
        env: dict[str, str],
        cwd: Path,
        log_path: Path,
        preexec: Callable[[], None] | None = None,
    ) -> None:
        self.argv, self.cwd, self.log_path = argv, cwd, log_path
        self.mark = secrets.token_hex(12)
        self.env = {**env, MARK_ENV: self.mark}
        self.preexec = preexec
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        """Start the agent. Call it from a thread that lives as long as the agent should (the
        parent-death signal follows the thread that forks)."""
        with open(self.log_path, "ab") as log:
            self.proc = spawn_child(
                self.argv,
                env=self.env,
                cwd=self.cwd,
                stdout=log,
                stdin=subprocess.DEVNULL,
                # SIGKILL, not SIGTERM: with the harness gone nobody waits for a graceful end.
                death_signal=signal.SIGKILL,
                preexec=self.preexec,
            )

    @property
    def pid(self) -> int:
        assert self.proc is not None, "agent not started"
        return self.proc.pid

    def poll(self) -> int | None:
        return self.proc.poll() if self.proc else None

    def survivors(self, seen: Iterable[psutil.Process] = ()) -> list[psutil.Process]:
        """Live processes of this agent: its group, the marked, and ``seen`` (sampler)."""
        found: dict[int, psutil.Process] = {}
        me = os.getpid()
        for p in list(seen) + _marked(self.mark) + self._group():
            if p.pid != me and _alive(p):
                found[p.pid] = p
        return list(found.values())

    def terminate_tree(self, seen: Iterable[psutil.Process] = (), grace_s: float = 10.0) -> int:
        """SIGTERM every survivor, wait up to ``grace_s``, SIGKILL the rest; returns how
        many needed SIGKILL. Safe to call after the agent already exited."""
        seen = list(seen)
        if self.proc is not None:
            signal_group(self.proc, signal.SIGTERM)
        for p in self.survivors(seen):
            _send(p, signal.SIGTERM)
        end = time.time() + grace_s
        while time.time() < end:
            if not self.survivors(seen) and (self.proc is None or self.proc.poll() is not None):
                return 0
            time.sleep(0.1)
        left = self.survivors(seen)
        if self.proc is not None:
            signal_group(self.proc, signal.SIGKILL)
        for p in left:
            _send(p, signal.SIGKILL)
        psutil.wait_procs(left, timeout=5)
        if self.proc is not None:
            self.proc.wait()
        return len(left)

    def _group(self) -> list[psutil.Process]:
        if self.proc is None:
            return []
        out = []
        for p in psutil.process_iter(["pid"]):
            try:
                if os.getpgid(p.pid) == self.proc.pid:
                    out.append(p)
            except (ProcessLookupError, PermissionError):
                continue
        return out


def _marked(mark: str) -> list[psutil.Process]:
    """Processes whose environment carries ``MARK_ENV=mark`` (read from /proc)."""
    out = []
    for pid in marked_pids({f"{MARK_ENV}={mark}".encode()}):
        with contextlib.suppress(psutil.NoSuchProcess):
            out.append(psutil.Process(pid))
    return out


def _alive(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _send(p: psutil.Process, sig: int) -> None:
    with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
        p.send_signal(sig)
