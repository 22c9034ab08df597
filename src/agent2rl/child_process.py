"""The harness's own long-lived child processes (grading service, metering proxy, rollout
service, egress proxy): each is a loopback HTTP server in its own session, with a
parent-death signal, that announces its port in a ready file. :func:`start_announcing` is
the parent's side of that handshake, :func:`serve_on_free_port` the child's,
:func:`stop_child` the end of it."""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent2rl.files import read_json

_PR_SET_PDEATHSIG = 1


def die_with_parent(sig: int = signal.SIGTERM) -> None:
    """``preexec_fn``: the kernel sends ``sig`` to this child when the thread that started it
    exits (Linux ``PR_SET_PDEATHSIG``), so a harness killed by SIGKILL leaves no child behind.

    Also unblocks SIGINT and SIGTERM, which a Ray worker blocks (a signal mask survives fork and
    exec, and the child's own children would inherit it). Off glibc Linux it does nothing more:
    the parent's own stop path still applies. Edge case: the signal follows the *thread* that
    forked, so start children from a thread that lives as long as they should.
    """
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, sig)
    except OSError:
        pass


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
) -> tuple[subprocess.Popen, int]:
    """Start ``cmd`` in its own session with output appended to ``log_file`` and wait until
    it writes ``{"port": ...}`` to ``ready_file``; returns (process, port).

    The child gets SIGTERM from the kernel when the calling *thread* exits
    (:func:`die_with_parent`), so a harness killed by SIGKILL leaves no service behind: call
    this from a thread that lives as long as the service should (the run's main thread).

    A stale ``ready_file`` is removed first. Raises RuntimeError naming ``name`` and the log
    when the child exits early or is not ready within ``ready_timeout`` seconds. Whatever
    ends the wait early (that error, ``KeyboardInterrupt``) stops the child first.
    """
    ready_file.unlink(missing_ok=True)
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with open(log_file, "ab") as log:
        proc = subprocess.Popen(
            cmd,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=env,
            preexec_fn=die_with_parent,
        )
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


def serve_on_free_port(
    app: Any, on_ready: Callable[[int], None], *, host: str = "127.0.0.1"
) -> None:
    """Serve ``app`` with uvicorn on a free port of ``host``; call ``on_ready(port)`` once it
    accepts connections. Returns when the server stops (SIGTERM / SIGINT)."""
    import asyncio

    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, 0))
    sock.listen(128)
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
    child must have been started with ``start_new_session=True`` so its group is its own."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
