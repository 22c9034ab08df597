"""The harness's own child processes, started and killed one way.

:func:`spawn_child` starts one in its own session (so its whole group can be killed as one)
with a parent-death signal (so a harness killed by SIGKILL leaves none behind);
:func:`kill_group` kills such a child's group. The long-lived services (grading service,
metering proxy, rollout service, egress proxy) are loopback HTTP servers started so, that
announce their port in a ready file: :func:`start_announcing` is the parent's side of that
handshake, :func:`serve_on_free_port` the child's, :func:`stop_child` the end of it. The
grader's evaluation workers (:mod:`agent2rl.grading.evaluator`) are started and killed with
the same two functions."""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from agent2rl.files import read_json

_PR_SET_PDEATHSIG = 1


def die_with_parent(sig: int = signal.SIGTERM) -> None:
    """``preexec_fn``: the kernel sends ``sig`` to this child when the thread that started it
    exits (Linux ``PR_SET_PDEATHSIG``), so a harness killed by SIGKILL leaves no child behind.

    Also unblocks SIGINT and SIGTERM, which a Ray worker blocks (a signal mask survives fork and
    exec, and the child's own children would inherit it). Off glibc Linux it does nothing more:
    the parent's own stop path still applies.
    """
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
    with contextlib.suppress(OSError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, sig)


#: this process's spawner thread, by process id (a forked child has none of its parent's
#: threads: it gets its own), and the lock that makes one
_SPAWNERS: dict[int, ThreadPoolExecutor] = {}
_SPAWNERS_LOCK = threading.Lock()


def spawner() -> ThreadPoolExecutor:
    """One thread per process that lives as long as the process: start from it
    (``spawner().submit(start).result()``) any child that must outlive the thread asking
    for it, since the parent-death signal follows the thread that started the child
    (:func:`die_with_parent`), and request or solver threads come and go."""
    with _SPAWNERS_LOCK:
        pid = os.getpid()
        if pid not in _SPAWNERS:
            _SPAWNERS[pid] = ThreadPoolExecutor(1, thread_name_prefix="spawner")
        return _SPAWNERS[pid]


def spawn_child(
    cmd: Sequence[str],
    *,
    env: dict[str, str],
    stdout: IO[bytes] | int | None = None,
    stderr: IO[bytes] | int | None = subprocess.STDOUT,
    stdin: IO[bytes] | int | None = None,
    death_signal: int | None = signal.SIGTERM,
    preexec: Callable[[], None] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    pass_fds: Sequence[int] = (),
    new_session: bool = True,
) -> subprocess.Popen[bytes]:
    """Start ``cmd`` in a session of its own (its process group is its pid, so
    :func:`kill_group` reaches everything it forks that stays in the group) with
    ``death_signal`` as its parent-death signal (:func:`die_with_parent`). The streams,
    ``cwd`` and ``pass_fds`` are :class:`subprocess.Popen`'s (stderr goes into stdout by
    default). ``new_session=False`` leaves it in our process group, for a helper that must
    die when our group is killed (then stop it with ``proc.kill()``: :func:`kill_group`
    would signal a group it does not lead).

    ``death_signal`` is SIGTERM for a service that should finish what it is doing, SIGKILL
    for a worker that may be stuck in a call that ignores SIGTERM (a CUDA kernel), None for
    a child that must outlive us (the run's guard) or is started from threads that come and
    go (sandboxed programs, which bwrap's ``--die-with-parent`` or a deadline ends instead).
    ``preexec`` runs in the child after the parent-death signal is set, before ``cmd``
    (joining a cgroup); it runs in a fork of a possibly threaded parent, so it must take
    no lock. With neither, no Python code runs between fork and exec (quicker, and safe in
    a threaded parent). Raises what :class:`subprocess.Popen` raises (``OSError`` for a
    missing program or ``cwd``).
    """
    setup = None
    if death_signal is not None or preexec is not None:
        setup = functools.partial(_child_setup, death_signal, preexec)
    return subprocess.Popen(
        cmd,
        stdin=stdin,
        stdout=stdout,
        stderr=stderr,
        cwd=cwd,
        start_new_session=new_session,
        env=env,
        pass_fds=tuple(pass_fds),
        preexec_fn=setup,
    )


def _child_setup(death_signal: int | None, preexec: Callable[[], None] | None) -> None:
    # The death signal first: ``preexec`` may block (a cgroup write), and a harness that dies
    # meanwhile must still take the child with it.
    if death_signal is not None:
        die_with_parent(death_signal)
    if preexec is not None:
        preexec()


def signal_group(proc: subprocess.Popen, sig: int = signal.SIGKILL) -> None:
    """Send ``sig`` to the process group of ``proc`` (started by :func:`spawn_child`), without
    waiting. A group already gone is left alone, and so is one we may not signal (its pid was
    reused by someone else's process). Safe in a signal handler: no locks, no waiting."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


def kill_group(proc: subprocess.Popen) -> int:
    """SIGKILL the process group of ``proc`` and reap ``proc``; returns its exit status.
    Idempotent: a child that already exited (reaped or not) is only reaped."""
    if proc.poll() is None:
        signal_group(proc, signal.SIGKILL)
    return proc.wait()


@dataclass
class ServiceHandle:
    """A running loopback service child: its process and port."""

    proc: subprocess.Popen
    port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM, then SIGKILL after ``timeout``; idempotent."""
        stop_child(self.proc, timeout)


def start_announcing(
    cmd: list[str],
    *,
    env: dict[str, str],
    ready_file: Path,
    log_file: Path,
    name: str,
    ready_timeout: float = 60.0,
    stdin: int | None = None,
) -> tuple[subprocess.Popen, int]:
    """Start ``cmd`` in its own session with output appended to ``log_file`` and wait until
    it writes ``{"port": ...}`` to ``ready_file``; returns (process, port). Call it from a
    thread that lives as long as the service should (:func:`die_with_parent`).

    A stale ``ready_file`` is removed first. Raises RuntimeError naming ``name`` and the log
    when the child exits early or is not ready within ``ready_timeout`` seconds. Whatever
    ends the wait early (that error, ``KeyboardInterrupt``) stops the child first. ``stdin``:
    as :func:`spawn_child` takes it (``subprocess.PIPE``: a channel only the caller holds).
    """
    ready_file.unlink(missing_ok=True)
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with open(log_file, "ab") as log:
        proc = spawn_child(cmd, env=env, stdout=log, stdin=stdin)
    deadline = time.time() + ready_timeout
    try:
        while time.time() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited with code {proc.returncode}; see {log_file}")
            if ready_file.exists():
                return proc, int(read_json(ready_file)["port"])
            time.sleep(0.05)
        raise RuntimeError(f"{name} did not start in {ready_timeout:.0f}s; see {log_file}")
    except BaseException:
        # Not ready, or interrupted while waiting (Ctrl-C, a study's SIGTERM): the caller never
        # gets a handle to stop this child, so it must not outlive this call.
        stop_child(proc, timeout=5.0)
        raise


def serve_on_free_port(app: Any, on_ready: Callable[[int], None]) -> None:
    """Serve ``app`` with uvicorn on a free port of 127.0.0.1; call ``on_ready(port)`` once
    it accepts connections. Returns when the server stops (SIGTERM / SIGINT)."""
    import asyncio

    import uvicorn

    sock = socket.create_server(("127.0.0.1", 0), backlog=128)  # SO_REUSEADDR on POSIX
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        app, log_level="warning", timeout_keep_alive=30, timeout_graceful_shutdown=5
    )
    server = uvicorn.Server(config)

    async def serve() -> None:
        async def announce() -> None:
            while not server.started:
                await asyncio.sleep(0.02)
            on_ready(port)

        task = asyncio.create_task(announce())
        await server.serve(sockets=[sock])
        task.cancel()

    asyncio.run(serve())


def stop_child(proc: subprocess.Popen, timeout: float = 10.0) -> None:
    """SIGTERM ``proc`` (it gets ``timeout`` seconds to finish in-flight work), then SIGKILL
    its whole process group. Idempotent: a process that already exited is left alone. The
    child must have been started by :func:`spawn_child` so its group is its own."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_group(proc)
