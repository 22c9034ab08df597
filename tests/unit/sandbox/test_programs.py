"""Sandboxed code execution, with real subprocesses, real bwrap and real sockets.

Every hostile program must fail (or time out) as one item, leave the caller running, and leave
the next program to be graded correctly.
"""

from __future__ import annotations

import select
import socket
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from agent2rl.sandbox.bwrap import bwrap_available
from agent2rl.sandbox.programs import (
    ExecLimits,
    ExecResult,
    isolation,
    run_program,
    run_programs,
)

needs_bwrap = pytest.mark.skipif(
    not bwrap_available(),
    reason="bwrap is not on PATH or cannot create namespaces here (e.g. an unprivileged "
    "container): programs run with rlimits only, which isolate neither files nor network",
)

FAST = ExecLimits(timeout_s=2)
GOOD = "def inc(x):\n    return x + 1\n\nassert inc(1) == 2\n"


def _next_passes() -> None:
    """A correct program right after a hostile one is still graded correctly."""
    result = run_program(GOOD, FAST)
    assert result.passed and result.status == "passed", result


def _leftover_programs() -> list[psutil.Process]:
    """Live processes of sandboxed programs (every one carries the bootstrap in its argv)."""
    out = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        try:
            cmd = " ".join(proc.info["cmdline"] or [])
            if "def _boot()" in cmd and proc.info["status"] != psutil.STATUS_ZOMBIE:
                out.append(proc)
        except psutil.Error:
            pass
    return out


def _wait_no_leftovers(seconds: float = 10.0) -> list[psutil.Process]:
    deadline = time.monotonic() + seconds
    while (left := _leftover_programs()) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


def test_bwrap_is_used_where_available() -> None:
    # A sandbox that silently degraded to rlimits would make every bwrap test below vacuous.
    assert isolation() == ("bwrap" if bwrap_available() else "rlimits")


@pytest.mark.parametrize(
    ("source", "status", "reason"),
    [
        (GOOD, "passed", ""),
        ("assert 1 == 2, 'wrong answer'\n", "failed", "AssertionError: wrong answer"),
        ("def f(:\n", "failed", "SyntaxError"),
        ("import sys\nsys.exit(0)\n", "failed", "SystemExit: 0"),
        ("import os\nos._exit(0)\n", "failed", "before its tests finished"),
        ("raise KeyboardInterrupt\n", "failed", "KeyboardInterrupt"),
        ("import ctypes\nctypes.string_at(0)\n", "failed", "SIGSEGV"),
        ("x = input()\n", "failed", "ValueError"),
    ],
)
def test_outcomes(source: str, status: str, reason: str) -> None:
    result = run_program(source, FAST)
    assert result.status == status, result
    assert result.passed == (status == "passed")
    assert reason in result.reason
    assert 0 < result.seconds < FAST.timeout_s


def test_output_is_captured_but_bounded() -> None:
    result = run_program("print('hello from the program')\nassert False\n", FAST)
    assert result.status == "failed" and "hello from the program" in result.output
    spam = run_program("while True:\n    print('spam' * 1000)\n", FAST)
    assert spam.status == "failed" and "File too large" in spam.reason, spam
    assert len(spam.output) <= 4096
    _next_passes()


@pytest.mark.timing  # asserts on wall-clock time (generous margin)
def test_infinite_loop_times_out() -> None:
    started = time.monotonic()
    result = run_program("while True:\n    pass\n", ExecLimits(timeout_s=1))
    assert result.status == "timed out" and not result.passed, result
    assert "1 s" in result.reason
    assert time.monotonic() - started < 5
    sleeper = run_program("import time\ntime.sleep(60)\n", ExecLimits(timeout_s=1))
    assert sleeper.status == "timed out", sleeper
    _next_passes()


def test_memory_bomb_fails() -> None:
    for bomb in ("x = bytearray(8 * 2**30)\n", "x = []\nwhile True:\n    x.append(' ' * 2**20)\n"):
        result = run_program(bomb, ExecLimits(timeout_s=10, memory_mb=256))
        assert result.status == "failed" and "MemoryError" in result.reason, result
    _next_passes()


@needs_bwrap
def test_fork_bomb_is_contained() -> None:
    # Children that stay alive, counted: RLIMIT_NPROC must stop them at the cap.
    counting = textwrap.dedent(
        """
        import os, time
        n = 0
        for _ in range(500):
            try:
                pid = os.fork()
            except OSError:
                continue
            if pid == 0:
                time.sleep(30)
                os._exit(0)
            n += 1
        print("forked", n)
        assert False
        """
    )
    limits = ExecLimits(timeout_s=5, max_processes=16)
    result = run_program(counting, limits)
    assert result.status == "failed", result
    forked = int(result.output.split("forked")[1].split()[0])
    assert 0 < forked < limits.max_processes
    # A bomb that never gives up runs to the timeout, and all of it dies with the sandbox.
    before = len(psutil.pids())
    bomb = (
        "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    )
    result = run_program(bomb, ExecLimits(timeout_s=2, max_processes=16))
    assert result.status == "timed out", result
    assert _wait_no_leftovers() == []
    assert len(psutil.pids()) < before + 16
    _next_passes()


@needs_bwrap
def test_file_write_outside_tmp_does_not_reach_the_host(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.mkdir()
    victim.chmod(0o777)  # only the sandbox, not file permissions, may protect it
    (victim / "keep.txt").write_text("original")
    program = textwrap.dedent(
        f"""
        import os
        victim = {str(victim)!r}
        open(os.path.join(victim, "keep.txt"), "w").write("overwritten")
        """
    )
    result = run_program(program, FAST)
    assert result.status == "failed", result
    assert "No such file" in result.reason or "Permission" in result.reason
    planted = run_program(f"open({str(victim / 'planted.txt')!r}, 'w').write('x')\n", FAST)
    assert planted.status == "failed", planted
    assert sorted(p.name for p in victim.iterdir()) == ["keep.txt"]
    assert (victim / "keep.txt").read_text() == "original"
    # Its own /tmp is writable, private, and gone afterwards.
    scratch = "open('/tmp/scratch.txt', 'w').write('x')\nassert open('/tmp/scratch.txt').read()\n"
    assert run_program(scratch, FAST).passed
    assert run_program("import os\nassert not os.path.exists('/tmp/scratch.txt')\n", FAST).passed
    _next_passes()


@needs_bwrap
def test_network_is_unreachable() -> None:
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    port = listener.getsockname()[1]
    try:
        # The same connection from here succeeds, so the listener really is reachable.
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass
        conn, _ = listener.accept()
        conn.close()
        program = f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=3)\n"
        result = run_program(program, ExecLimits(timeout_s=10))
        assert result.status == "failed", result
        assert "ConnectionRefused" in result.reason or "unreachable" in result.reason
        ready, _, _ = select.select([listener], [], [], 0.5)
        assert ready == [], "the listener saw a connection from the sandbox"
    finally:
        listener.close()
    _next_passes()


@needs_bwrap
def test_environment_is_minimal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENT2RL_SECRET_FOR_TEST", "must-not-leak")
    program = textwrap.dedent(
        """
        import os
        assert "AGENT2RL_SECRET_FOR_TEST" not in os.environ, sorted(os.environ)
        assert os.getcwd() == "/tmp"
        assert not os.path.exists(os.path.expanduser("~/.ssh"))
        """
    )
    result = run_program(program, FAST)
    assert result.passed, result


def test_rlimits_fallback_still_grades() -> None:
    # Without bwrap there is no file or network isolation, but grading must stay correct.
    assert run_program(GOOD, FAST, mode="rlimits").passed
    assert run_program("assert False\n", FAST, mode="rlimits").status == "failed"
    looping = run_program("while True:\n    pass\n", ExecLimits(timeout_s=1), mode="rlimits")
    assert looping.status == "timed out"
    exit0 = run_program("import os\nos._exit(0)\n", FAST, mode="rlimits")
    assert exit0.status == "failed"


@pytest.mark.timing  # asserts on wall-clock time (generous margin)
def test_run_programs_keeps_order_and_runs_in_parallel() -> None:
    sources = [f"import time\ntime.sleep(1)\nassert {i} % 2 == 0\n" for i in range(4)]
    done: list[int] = []
    started = time.monotonic()
    results = run_programs(sources, FAST, workers=4, on_done=lambda i, _r: done.append(i))
    elapsed = time.monotonic() - started
    assert [r.passed for r in results] == [True, False, True, False]
    assert sorted(done) == [0, 1, 2, 3]
    assert elapsed < 3.5  # four 1 s sleeps, not in series
    assert run_programs([], FAST) == []


def test_limits_are_validated() -> None:
    with pytest.raises(ValueError, match="timeout_s"):
        ExecLimits(timeout_s=0)
    with pytest.raises(ValueError, match="memory_mb"):
        ExecLimits(memory_mb=0)
    assert isinstance(run_program(GOOD), ExecResult)
