"""The harness's service children: a child the caller never got a handle to must not outlive
the call that started it (a study's Ctrl-C once landed while a run waited for its grading
service to announce its port, and left that service running)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from agent2rl.child_process import kill_group, spawn_child, spawner, start_announcing

NEVER_READY = [sys.executable, "-c", "import time; time.sleep(120)"]


def _children_running(cmdline_part: str) -> list[int]:
    me = psutil.Process()
    return [
        p.pid
        for p in psutil.process_iter(["cmdline", "ppid", "status"])
        if p.info["ppid"] == me.pid
        and p.info["status"] != psutil.STATUS_ZOMBIE
        and cmdline_part in " ".join(p.info["cmdline"] or [])
    ]


def test_a_child_that_never_announces_is_stopped(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="did not start in 1s; see"):
        start_announcing(
            NEVER_READY,
            env={},
            ready_file=tmp_path / "ready.json",
            log_file=tmp_path / "svc.log",
            name="svc",
            ready_timeout=1.0,
        )
    assert _children_running("time.sleep(120)") == []


def test_an_interrupt_while_waiting_stops_the_child(tmp_path: Path) -> None:
    def interrupt(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, 1.0)
    try:
        with pytest.raises(KeyboardInterrupt):
            start_announcing(
                NEVER_READY,
                env={},
                ready_file=tmp_path / "ready.json",
                log_file=tmp_path / "svc.log",
                name="svc",
                ready_timeout=60.0,
            )
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert _children_running("time.sleep(120)") == []


def test_kill_group_kills_what_the_child_started_in_its_group(tmp_path: Path) -> None:
    """The evaluation workers and the services are started by spawn_child and killed by
    kill_group: a grandchild in the child's group dies with it."""
    marker = f"{time.time_ns() % 10**8}"
    code = f"import subprocess, time; subprocess.Popen(['sleep', '300.{marker}']); time.sleep(300)"
    argv = [sys.executable, "-c", code]
    proc = spawn_child(argv, env=dict(os.environ), stdout=subprocess.DEVNULL)
    assert os.getpgid(proc.pid) == proc.pid  # a session, so a group, of its own
    deadline = time.time() + 30
    while not _sleepers(marker) and time.time() < deadline:
        time.sleep(0.05)
    assert _sleepers(marker)
    assert kill_group(proc) == -signal.SIGKILL
    deadline = time.time() + 5
    while _sleepers(marker) and time.time() < deadline:
        time.sleep(0.05)
    assert _sleepers(marker) == []
    assert kill_group(proc) == -signal.SIGKILL  # idempotent: already reaped


def _sleepers(marker: str) -> list[int]:
    return [
        p.pid
        for p in psutil.process_iter(["cmdline", "status"])
        if p.info["status"] != psutil.STATUS_ZOMBIE
        and f"300.{marker}" in " ".join(p.info["cmdline"] or [])
    ]


def test_a_forked_child_gets_its_own_spawner_thread() -> None:
    """Children that must outlive their caller's thread are started from one long-lived
    thread per process; a child forked after the parent made its own gets a new one (the
    parent's thread does not exist there: a task handed to the parent's would never run)."""
    parent = spawner()
    assert parent.submit(lambda: 1).result(timeout=10) == 1
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report, then leave without running the parent's cleanup
        try:
            mine = spawner()
            ok = mine is not parent and mine.submit(lambda: 7).result(timeout=10) == 7
        except BaseException:  # noqa: BLE001 (reported as a failure to the parent)
            ok = False
        os.write(write, b"1" if ok else b"0")
        os._exit(0)
    os.close(write)
    _, status = os.waitpid(pid, 0)
    assert os.read(read, 1) == b"1" and status == 0
    os.close(read)
