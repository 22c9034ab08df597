"""Stopping the harness's own long-lived child processes (grading service, metering proxy)."""

from __future__ import annotations

import os
import signal
import subprocess


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
