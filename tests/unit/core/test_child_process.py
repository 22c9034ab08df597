"""The harness's service children: a child the caller never got a handle to must not outlive
the call that started it (a study's Ctrl-C once landed while a run waited for its grading
service to announce its port, and left that service running)."""

from __future__ import annotations

import ast
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

import agent2rl
from agent2rl.child_process import kill_group, spawn_child, spawner, start_announcing

SRC = Path(agent2rl.__file__).resolve().parent
#: the only files that may call Popen: the helper itself, and the stage runner that runs
#: inside the sandbox on the standard library alone
POPEN_ALLOWED = {"child_process.py", "agents/pipelines/stages.py"}

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


def test_spawn_child_takes_cwd_fds_and_preexec_without_a_death_signal(tmp_path: Path) -> None:
    """What the agent and the sandboxed programs need: a working directory, a descriptor
    kept open, a preexec step, and (for a program) no parent-death signal."""
    read, write = os.pipe()
    code = "import os, sys; os.write(int(sys.argv[1]), f'{os.getcwd()} {os.umask(0):o}'.encode())"
    try:
        proc = spawn_child(
            [sys.executable, "-c", code, str(write)],
            env={},
            cwd=tmp_path,
            pass_fds=(write,),
            preexec=lambda: os.umask(0o027),  # a step the child can show us
            death_signal=None,
        )
    finally:
        os.close(write)
    assert proc.wait(timeout=30) == 0
    assert os.read(read, 4096).decode() == f"{tmp_path} 27"
    os.close(read)


def _popen_calls(source: str) -> list[int]:
    """Lines of ``source`` that call Popen: ``x.Popen(...)`` whatever ``x`` is, or a name
    bound by ``from subprocess import Popen [as P]``. Annotations (``Popen[bytes]``) are no
    calls."""
    tree = ast.parse(source)
    names = {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module == "subprocess"
        for alias in node.names
        if alias.name == "Popen"
    }
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and (
            (isinstance(node.func, ast.Attribute) and node.func.attr == "Popen")
            or (isinstance(node.func, ast.Name) and node.func.id in names)
        )
    ]


def test_every_child_process_starts_through_spawn_child() -> None:
    """One way to start a process (issue #41): a Popen of its own elsewhere in src/ is how a
    child once escaped the process-group kill and the parent-death signal."""
    forms = (
        "import subprocess\nsubprocess.Popen(['x'])\n"
        "import subprocess as sp\nsp.Popen(['x'])\n"
        "from subprocess import Popen as P\nP(['x'])\n"
        "p: subprocess.Popen[bytes] | None = None\n"
    )
    assert _popen_calls(forms) == [2, 4, 6]  # the check itself sees every form
    found = [
        f"{path.relative_to(SRC)}:{line}"
        for path in sorted(SRC.rglob("*.py"))
        if path.relative_to(SRC).as_posix() not in POPEN_ALLOWED
        for line in _popen_calls(path.read_text())
    ]
    assert found == [], f"start these through agent2rl.child_process.spawn_child: {found}"
