"""A service child (grading, rollout, metering, egress: all start through
:func:`start_announcing`) dies with the harness, even when the harness is SIGKILLed and runs
no cleanup: the kernel's parent-death signal stops it."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

#: a service that announces itself, then serves forever (until SIGTERM)
SERVICE = (
    "import json, sys, time; from pathlib import Path; "
    "Path(sys.argv[1]).write_text(json.dumps({'port': 1})); time.sleep(600)"
)

#: a stand-in harness: starts the service, prints its pid, waits to be killed
HARNESS = f"""
import sys
from pathlib import Path
from agent2rl.child_process import start_announcing
d = Path(sys.argv[1])
proc, port = start_announcing(
    [sys.executable, "-c", {SERVICE!r}, str(d / "ready.json")],
    env={{}}, ready_file=d / "ready.json", log_file=d / "svc.log", name="svc",
)
print(proc.pid, flush=True)
import time; time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def test_a_service_dies_with_a_sigkilled_harness(tmp_path) -> None:
    harness = subprocess.Popen(
        [sys.executable, "-c", HARNESS, str(tmp_path)], stdout=subprocess.PIPE, text=True
    )
    pid = None
    try:
        assert harness.stdout is not None
        pid = int(harness.stdout.readline())
        assert _alive(pid)
        harness.kill()
        harness.wait()
        end = time.time() + 10
        while _alive(pid) and time.time() < end:
            time.sleep(0.05)
        assert not _alive(pid), "the service outlived the harness"
    finally:
        harness.kill()
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
