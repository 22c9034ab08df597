"""The two-process test runner, with real sandboxes and real pipes: what each outcome looks
like, that failures of the candidate stay failures whatever the tests catch, and that the
candidate's process cannot see or touch the test process.

The attack corpus on real HumanEval problems is in ``tests/unit/scoring/test_forged_verdicts.py``.
"""

from __future__ import annotations

import re
import textwrap
import time

import psutil
import pytest

from agent2rl.sandbox import two_process
from agent2rl.sandbox.bwrap import bwrap_available
from agent2rl.sandbox.programs import Ended as _Ended
from agent2rl.sandbox.programs import ExecLimits, Mode, boot_source
from agent2rl.sandbox.two_process import (
    FunctionUnderTest,
    _judge,
    check_function,
    check_functions,
)

needs_bwrap = pytest.mark.skipif(
    not bwrap_available(),
    reason="bwrap is not on PATH or cannot create namespaces here: the two processes then run "
    "with rlimits only, as the caller's user, and could reach each other through /proc",
)

FAST = ExecLimits(timeout_s=3)
INC = "def inc(x):\n    return x + 1\n"


def _item(code: str, test: str, setup: str = "", entry: str = "inc") -> FunctionUnderTest:
    return FunctionUnderTest(textwrap.dedent(code), entry, textwrap.dedent(test), setup)


def _check(code: str, test: str, limits: ExecLimits = FAST, **kw: str):
    return check_function(_item(code, test, **kw), limits)


def _sandboxed_processes() -> list[psutil.Process]:
    """Live processes of either side, the test server included (each runs the stub)."""
    out = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        try:
            cmd = " ".join(proc.info["cmdline"] or [])
            if "exec(marshal.loads(" in cmd and proc.info["status"] != psutil.STATUS_ZOMBIE:
                out.append(proc)
        except psutil.Error:
            pass
    return out


def test_a_correct_function_passes() -> None:
    result = _check(INC, "def check(candidate):\n    assert candidate(1) == 2\n")
    assert result.passed and result.status == "passed" and result.reason == "", result
    assert 0 < result.seconds < FAST.timeout_s


@pytest.mark.parametrize(
    ("code", "test", "reason"),
    [
        (INC, "def check(c):\n    assert c(1) == 3, 'off by one'\n", "AssertionError: off by one"),
        ("def inc(x):\n    raise ValueError('bad x')\n", "def check(c):\n    c(1)\n",
         "inc() raised ValueError: bad x"),
        ("class E(Exception):\n    pass\ndef inc(x):\n    raise E('mine')\n",
         "def check(c):\n    c(1)\n", "inc() raised CandidateError: E: mine"),
        ("def inc(x):\n    return (i for i in range(x))\n", "def check(c):\n    c(1)\n",
         "inc() returned a value the tests cannot receive: a value of type generator"),
        ("def inc(:\n", "def check(c):\n    c(1)\n", "the program raised SyntaxError"),
        ("x = 1 / 0\n" + INC, "def check(c):\n    c(1)\n",
         "the program raised ZeroDivisionError"),
        ("def other(x):\n    return x\n", "def check(c):\n    c(1)\n",
         "the program defines no function inc()"),
        ("def inc(x):\n    import os\n    os._exit(3)\n", "def check(c):\n    c(1)\n",
         "stopped answering: it exited with status 3"),
        ("import ctypes\ndef inc(x):\n    ctypes.string_at(0)\n", "def check(c):\n    c(1)\n",
         "stopped answering: killed by SIGSEGV"),
        ("while True:\n    print('spam' * 1000)\n", "def check(c):\n    c(1)\n",
         "File too large"),
    ],
    ids=["assert", "raised", "raised-own-class", "not-plain", "syntax", "import-error",
         "no-function", "exit-3", "segfault", "file-size"],
)  # fmt: skip
def test_failures_say_why(code: str, test: str, reason: str) -> None:
    result = _check(code, test)
    assert result.status == "failed" and not result.passed, result
    assert reason in result.reason, result.reason


def test_the_candidates_exceptions_reach_the_tests_as_builtin_ones() -> None:
    # Tests that expect an exception behave as in one process.
    code = "def inc(x):\n    if x < 0:\n        raise ValueError('negative')\n    return x + 1\n"
    test = """
    def check(candidate):
        try:
            candidate(-1)
        except ValueError as err:
            assert str(err) == "negative"
        else:
            assert False, "no ValueError"
        assert candidate(1) == 2  # and the function is still there
    """
    assert _check(code, test).passed


@pytest.mark.parametrize("exc", ["SystemExit(0)", "KeyboardInterrupt", "GeneratorExit"])
def test_a_fatal_failure_sticks_even_when_the_tests_catch_it(exc: str) -> None:
    code = f"def inc(x):\n    if x == 0:\n        raise {exc}\n    return x + 1\n"
    test = """
    def check(candidate):
        try:
            candidate(0)
        except:  # a bare except catches the harness's exception too
            pass
        assert candidate(1) == 2
    """
    result = _check(code, test)
    assert result.status == "failed", result
    assert f"inc() raised {exc.split('(')[0]}" in result.reason


def test_arguments_are_copies() -> None:
    # A function that mutates its arguments no longer mutates the tests' objects.
    code = "def inc(xs):\n    xs.append(1)\n    return len(xs)\n"
    test = """
    def check(candidate):
        xs = [0]
        assert candidate(xs) == 2
        assert candidate(xs) == 2
        assert xs == [0]
    """
    assert _check(code, test).passed


def test_state_persists_between_calls_and_prompt_helpers_are_the_datasets() -> None:
    setup = "def helper(x):\n    return 10 * x\n\ndef inc(x):\n    '''the prompt's stub'''\n"
    code = setup + "calls = []\ndef inc(x):\n    calls.append(x)\n    return len(calls)\n"
    code += "def helper(x):\n    return 0\n"  # the model's redefinition stays on its side
    test = """
    def check(candidate):
        assert [candidate(5), candidate(5)] == [1, 2]
        assert helper(2) == 20
        assert inc is candidate and candidate.__name__ == "inc"
    """
    result = check_function(_item(code, test, setup=setup), FAST)
    assert result.passed, result


@pytest.mark.parametrize(
    ("setup", "test", "reason"),
    [
        ("raise RuntimeError('broken prompt')\n", "def check(c):\n    pass\n",
         "the tests could not be loaded: RuntimeError: broken prompt"),
        ("", "def check(c):\n    assert c(\n", "the tests could not be loaded: SyntaxError"),
        ("", "def test(c):\n    pass\n", "the tests could not be loaded: KeyError: 'check'"),
        ("", "def check(c):\n    c(lambda: 1)\n",
         "the tests pass inc() a value that cannot be sent"),
    ],
    ids=["setup-raises", "test-syntax", "no-check", "unsendable-argument"],
)  # fmt: skip
def test_dataset_faults_are_errors_not_failures(setup: str, test: str, reason: str) -> None:
    result = check_function(_item(INC, test, setup=setup), FAST)
    assert result.status == "error" and not result.passed, result
    assert reason in result.reason


def test_oversized_and_malformed_answers_fail() -> None:
    big = "def inc(x):\n    return 'x' * (40 << 20)\n"
    result = _check(big, "def check(c):\n    c(1)\n", ExecLimits(timeout_s=10))
    assert result.status == "failed" and "answered with over" in result.reason, result
    forged = """
    import os
    def inc(x):
        # Answer the call itself, with a line that is not the wire encoding, then stop.
        for fd in os.listdir("/proc/self/fd"):
            try:
                os.write(int(fd), b'{"ok": true}\\n')
            except OSError:
                pass
        os._exit(0)
    """
    result = _check(forged, "def check(c):\n    assert c(1)\n")
    assert result.status == "failed" and "malformed answer" in result.reason, result


@pytest.mark.timing  # asserts on wall-clock time (generous margin)
def test_hanging_candidate_times_out_within_the_limit() -> None:
    limits = ExecLimits(timeout_s=1)
    for code in ("import time\ntime.sleep(60)\n" + INC, "def inc(x):\n    while True:\n"
                 "        pass\n"):  # fmt: skip
        started = time.monotonic()
        result = _check(code, "def check(c):\n    c(1)\n", limits)
        assert result.status == "timed out" and "1 s" in result.reason, result
        assert time.monotonic() - started < 1 + 2.5
    assert _check(INC, "def check(c):\n    assert c(1) == 2\n").passed


def test_output_is_the_programs_tail() -> None:
    # Its output is there once it has answered (tests that never call it may end first).
    code = "print('hello from the model')\n" + INC
    result = _check(code, "def check(c):\n    assert c(1) == 3\n")
    assert result.status == "failed" and "hello from the model" in result.output
    spam = _check("print('x' * 100_000)\nprint('the end')\n" + INC, "def check(c):\n    c(1)\n")
    assert spam.passed and spam.output.endswith("the end") and len(spam.output) <= 2048


@needs_bwrap
def test_the_candidate_cannot_see_or_touch_the_tests() -> None:
    # The marker is only in the test code. The candidate looks everywhere it can (every
    # process it can see, every descriptor, its stdin, /tmp), tries to kill every process it
    # can see but its own, and returns what it found: the test passes only if that is nothing.
    marker = "EXPECTED_VALUE_ONLY_THE_TESTS_HOLD_4242"
    code = """
    import os, signal
    def inc(x):
        found = []
        me = os.getpid()
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            for name in ("cmdline", "environ"):
                try:
                    if MARKER.encode() in open(f"/proc/{pid}/{name}", "rb").read():
                        found.append(f"/proc/{pid}/{name}")
                except OSError:
                    pass
            try:
                for fd in os.listdir(f"/proc/{pid}/fd"):
                    path = f"/proc/{pid}/fd/{fd}"
                    try:
                        os.lseek(int(fd), 0, 0) if int(pid) == me else None
                        with open(path, "rb") as f:
                            if MARKER.encode() in f.read(1 << 20):
                                found.append(path)
                    except OSError:
                        pass
            except OSError:
                pass
            if int(pid) not in (me, 1):
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except OSError:
                    pass
        for root, _dirs, files in os.walk("/tmp"):
            for name in files:
                try:
                    if MARKER.encode() in open(os.path.join(root, name), "rb").read():
                        found.append(name)
                except OSError:
                    pass
        return found
    """.replace("MARKER", repr(marker))
    test = f"def check(candidate):\n    assert candidate(1) == [], candidate(1)\n# {marker}\n"
    # not a timing test: a generous limit, as walking /proc is slow on a loaded machine
    result = _check(code, test, ExecLimits(timeout_s=30))
    assert result.passed, result


def test_no_process_outlives_its_item() -> None:
    code = """
    import os, time
    if os.fork() == 0:
        time.sleep(60)
        os._exit(0)
    def inc(x):
        return x + 1
    """
    assert _check(code, "def check(c):\n    assert c(1) == 2\n").passed
    deadline = time.monotonic() + 10
    while (left := _sandboxed_processes()) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert left == []


def test_rlimits_fallback_still_grades() -> None:
    # Without bwrap the processes could reach each other through /proc (see the module
    # docstring), but everything that happens inside the candidate's interpreter still fails.
    item = _item(INC, "def check(c):\n    assert c(1) == 2\n")
    assert check_function(item, FAST, mode="rlimits").passed
    bad = _item("def inc(x):\n    return x\n", "def check(c):\n    assert c(1) == 2\n")
    assert check_function(bad, FAST, mode="rlimits").status == "failed"
    hang = _item("def inc(x):\n    while True:\n        pass\n", "def check(c):\n    c(1)\n")
    assert check_function(hang, ExecLimits(timeout_s=1), mode="rlimits").status == "timed out"


def test_a_sandbox_that_does_not_start_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    # Fault injection: every sandbox "starts" as /bin/false, the test server included.
    monkeypatch.setattr(two_process, "pick_mode", lambda _mode: Mode("bwrap", ("/bin/false",), -1))
    items = [_item(INC, "def check(c):\n    assert c(1) == 2\n")] * 3
    for result in check_functions(items, FAST):
        assert result.status == "error" and not result.passed, result


def test_one_items_broken_tests_leave_the_others_graded() -> None:
    # Each item's tests run in their own child of the test server: one that dies without a
    # verdict (dataset code calling os._exit) is that item's error, and the server goes on.
    good = _item(INC, "def check(c):\n    assert c(1) == 2\n")
    dies = _item(INC, "import os\ndef check(c):\n    os._exit(0)\n")
    results = check_functions([good, dies, good, dies, good], FAST, workers=1)
    assert [r.status for r in results] == ["passed", "error"] * 2 + ["passed"]
    assert "ended without a verdict" in results[1].reason


def _ended(rc: int = 0, reports: tuple[str, ...] = ("started",), early: bool = False) -> _Ended:
    return _Ended(rc, list(reports), "", early)


@pytest.mark.parametrize(
    ("tests", "candidate", "status", "reason"),
    [
        (["started", "passed"], _ended(), "passed", ""),
        (["started", "failed AssertionError: x"], _ended(), "failed", "AssertionError: x"),
        (["started", "gone stopped"], _ended(128 + 24, early=True), "timed out", "CPU limit"),
        (["started", "cpu"], _ended(), "timed out", "CPU limit"),
        (["started", "gone stopped"], _ended(128 + 25, early=True), "failed", "file size"),
        (["started", "gone stopped"], _ended(128 + 11, early=True), "failed",
         "stopped: killed by SIGSEGV"),
        (["started", "gone stopped"], _ended(1, (), early=True), "error",
         "the program's sandbox did not start"),
        ([], _ended(), "error", "the tests did not start"),
        (["started"], _ended(), "error", "ended without a verdict"),
        (["started", "error no check"], _ended(), "error", "no check"),
    ],
)  # fmt: skip
def test_judge(tests: list[str], candidate: _Ended, status: str, reason: str) -> None:
    mode = Mode("bwrap", (), -1)
    result = _judge(tests, candidate, False, FAST, mode, 0.1)
    assert result.status == status and reason in result.reason, result
    assert _judge(tests, candidate, True, FAST, mode, 3.0).status == "timed out"


@pytest.mark.timing  # asserts on wall-clock time (generous margin)
def test_check_functions_keeps_order_and_runs_in_parallel() -> None:
    items = [
        _item(f"import time\ntime.sleep(1)\ndef inc(x):\n    return x + {i % 2}\n",
              "def check(c):\n    assert c(1) == 1\n")
        for i in range(4)
    ]  # fmt: skip
    done: list[int] = []
    started = time.monotonic()
    results = check_functions(items, FAST, workers=4, on_done=lambda i, _r: done.append(i))
    assert [r.passed for r in results] == [True, False, True, False]
    assert sorted(done) == [0, 1, 2, 3]
    assert time.monotonic() - started < 3.5  # four 1 s sleeps, not in series
    assert check_functions([], FAST) == []


def test_the_bootstrap_imports_nothing_of_the_harness() -> None:
    # It runs where the harness's package is not importable.
    source = boot_source()
    assert re.findall(r"^\s*(?:from|import)\s+agent2rl", source, re.M) == []
    compile(source, "<split_boot>", "exec")
