"""Grade a model's function against a dataset's unit tests in two sandboxes, so that nothing the
model's code does can reach the verdict.

Why two processes: when the model's code and the tests share an interpreter (the classic
HumanEval harness, and :func:`agent2rl.sandbox.programs.run_program`), the code can forge a
pass. It can walk the stack to the harness's reporting function and call it, return an object
whose ``__eq__`` always says yes, replace ``abs``, ``math`` or ``__import__`` under the tests,
redefine a helper the tests call (HumanEval/32's ``poly``), or install a tracer that jumps over
the asserts. Each is a reward hack an RL-trained model can find. Here no object of the model's
ever reaches the tests (:mod:`agent2rl.sandbox.split_boot` runs both sides):

* The **candidate process** runs the model's code (HumanEval: the prompt plus the completion;
  for a chat model, the prompt plus the code of its reply) and nothing else: neither the tests
  nor the expected values are ever sent to it. It then answers calls to the entry point over
  a pair of pipes, one line of plain data each way (:mod:`agent2rl.sandbox.wire`: a builtin
  type's subclass, such as an ``int`` whose ``__eq__`` always says yes, arrives as the plain
  value it holds; ``split_boot`` lists the answers that fail the item).
* The **test process** runs the dataset's code only: the prompt (for the helpers its tests
  use, e.g. ``poly``), the tests, then ``check(candidate)``, where ``candidate`` is a stub
  that sends its arguments across and returns the decoded answer, or raises the candidate's
  exception. The verdict is computed here and written to a pipe the candidate never holds.
* The item **passes only if the test process ran** ``check()`` **to its end**. Whatever the
  candidate process does (exit early, hang, print, patch its own builtins, walk its own
  frames, fork, write on every file descriptor it has) it can only make its answers wrong,
  late or missing, and a missing, malformed or oversized answer or a fatal error fails the
  item for good, even if the tests catch the exception.

Isolation (:mod:`agent2rl.sandbox.programs` describes the modes and limits): every candidate
process gets a fresh sandbox of its own. The test processes of a batch of items are children
of one sandboxed *test server*, forked per item from a warm interpreter: only dataset code and
plain values ever enter the server, so the items' tests may share its sandbox. With bwrap, a
candidate's pid, network, IPC and mount namespaces and its private ``/tmp`` are its own, so it
cannot see, signal, trace or open anything of the test server or of another item, and a root
caller runs both sides as ``nobody``. The limits (CPU, memory, processes, file size) apply to
each side, the wall clock to the item. A fork costs ~17 ms less CPU per item than a fresh
sandbox and interpreter for the tests (``benchmarks/humaneval_grading.py`` compares both
runners).

What changes against one process: a call's arguments are copies, so a function that mutates
its arguments no longer affects the tests' objects (all 164 HumanEval canonical solutions pass
either way); results must be plain data (HumanEval's all are); the tests' helpers are the
dataset's, never the model's redefinitions.

Residual risk: in the ``rlimits`` fallback (no usable bwrap) both sides run as the caller's
user with no namespaces, so a deliberately hostile program can reach the test server through
``/proc`` (and the whole filesystem); the split then stops in-process forgeries only. A
candidate can learn a call's arguments (it must, to answer) and keep state between calls, as
a function can.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import select
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from agent2rl.sandbox.programs import (
    OUTPUT_TAIL,
    Ended,
    ExecLimits,
    ExecResult,
    Isolation,
    Mode,
    Running,
    Status,
    cpu_count,
    exit_signal,
    last_verdict,
    masked,
    one_line,
    pick_mode,
    probe_mode,
    signal_name,
)
from agent2rl.sandbox.wire import encode

log = logging.getLogger(__name__)

#: how long a candidate whose answers ended may take to finish exiting (to learn why)
_EXIT_GRACE_S = 1.0


@dataclass(frozen=True)
class FunctionUnderTest:
    """One item: the model's code and the dataset's tests of the function it defines.

    ``code`` is the model's program (it runs in the candidate process); ``entry_point`` is the
    name of the function the tests call. ``test`` is dataset code defining
    ``check(candidate)``; ``setup`` is dataset code run before it on the tests' side
    (HumanEval's prompt: its imports and helper functions), empty when there is none.
    """

    code: str
    entry_point: str
    test: str
    setup: str = ""


def check_function(
    item: FunctionUnderTest, limits: ExecLimits | None = None, mode: Isolation | None = None
) -> ExecResult:
    """Run ``item``'s tests against its function, the two sides in separate sandboxes.

    ``passed`` only when the tests ran ``check(candidate)`` to its end. ``failed`` when a test
    failed, the function raised, its answer was not plain data, or the candidate process
    stopped answering (the reason says why: an exit status, a signal, the file size limit);
    ``timed out`` at the wall clock or either side's CPU limit; ``error`` when a sandbox did
    not start, the dataset's code could not be loaded, or the tests pass the function a value
    that cannot be sent (the harness's fault, not the model's). Never raises for anything the
    model's code does; returns within about ``limits.timeout_s`` plus start-up time. ``mode``
    is as for :func:`agent2rl.sandbox.programs.run_program`.
    """
    return check_functions([item], limits, workers=1, mode=mode)[0]


def check_functions(
    items: Sequence[FunctionUnderTest],
    limits: ExecLimits | None = None,
    workers: int | None = None,
    on_done: Callable[[int, ExecResult], None] | None = None,
    mode: Isolation | None = None,
    hide: Sequence[Path] = (),
) -> list[ExecResult]:
    """:func:`check_function` over ``items`` in parallel with one test server for them all,
    as :func:`~agent2rl.sandbox.programs.run_programs` runs programs. ``hide``: paths both
    sandboxes mask (a task's private data inside the installed packages;
    :func:`~agent2rl.sandbox.programs.masked`). A harness fault (the test server does not
    start) makes every item an ``error``; it never raises."""
    if not items:
        return []
    limits = limits or ExecLimits()
    try:
        probe_mode()  # probe the sandbox once, before the threads race to do it
        chosen = masked(pick_mode(mode), hide)
        server = _TestServer(chosen)
    except Exception as err:  # a harness fault must not take the caller down
        log.exception("the two-process test harness could not start")
        failed = ExecResult(False, "error", one_line(f"{type(err).__name__}: {err}"), 0.0)
        return [failed] * len(items)

    def one(i: int) -> ExecResult:
        started = time.monotonic()
        try:
            result = _run(items[i], limits, chosen, server, started)
        except Exception as err:
            log.exception("two-process test harness failed")
            why = one_line(f"{type(err).__name__}: {err}")
            result = ExecResult(False, "error", why, time.monotonic() - started)
        if on_done is not None:
            on_done(i, result)
        return result

    with (
        contextlib.closing(server),
        ThreadPoolExecutor(max_workers=max(1, min(workers or cpu_count(), len(items)))) as pool,
    ):
        return list(pool.map(one, range(len(items))))


class _TestServer:
    """The tests' side of a batch: one sandboxed process that forks a child per item (see
    :func:`~agent2rl.sandbox.split_boot.serve_tests`). :meth:`close` closes the control
    socket, on which the server exits, and kills what is left of it."""

    def __init__(self, mode: Mode) -> None:
        self.lock = threading.Lock()
        self.control, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            # -S: the tests need no site-packages (dataset code and the standard library).
            args = ["server", mode.uid]
            self.server = Running.start(args, b"", (theirs.fileno(),), mode, "a2t-", ("-I", "-S"))
        except BaseException:
            self.control.close()
            raise
        finally:
            theirs.close()

    def submit(self, item: FunctionUnderTest, limits: ExecLimits, fds: tuple[int, ...]) -> None:
        """Hand one item's tests to the server with ``fds`` (the calls' write end, the
        answers' read end, the report pipe). Raises ``OSError`` if the server is gone."""
        job = {
            "entry": item.entry_point,
            "setup": _text(item.setup),
            "test": _text(item.test),
            "limits": limits.rlimits(),
            "alarm": 2 * math.ceil(limits.timeout_s) + 5,
        }
        with tempfile.TemporaryFile() as data:
            data.write(encode(job).encode())
            data.seek(0)
            with self.lock:
                socket.send_fds(self.control, [b"item"], [data.fileno(), *fds])

    def close(self) -> None:
        self.control.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.server.proc.wait(timeout=2.0)  # it exits on the control socket's end
        ended = self.server.stop()
        if ended.rc not in (0, None):  # its output is kept for this (dataset code prints little)
            log.error("the test server exited with status %s: %s", ended.rc, ended.output)


def _run(
    item: FunctionUnderTest, limits: ExecLimits, mode: Mode, server: _TestServer, started: float
) -> ExecResult:
    calls_r, calls_w = os.pipe()
    answers_r, answers_w = os.pipe()
    report_r, report_w = os.pipe()
    candidate = None
    try:
        job = encode({"entry": item.entry_point, "code": _text(item.code)}).encode()
        args = ["candidate", *limits.rlimits(), mode.uid]
        candidate = Running.start(args, job, (calls_r, answers_w), mode, "a2c-")
        server.submit(item, limits, (calls_w, answers_r, report_w))
    except BaseException:
        os.close(report_r)
        if candidate is not None:
            candidate.stop()
        raise
    finally:
        # Only the two sides hold the pipes now, so each sees the other's end close.
        for fd in (calls_r, calls_w, answers_r, answers_w, report_w):
            os.close(fd)
    try:
        reports, timed_out = _await_verdict(report_r, started + limits.timeout_s)
    finally:
        os.close(report_r)
    seconds = time.monotonic() - started
    if not timed_out and last_verdict(reports).startswith("gone"):
        # Its answers ended: let it finish exiting, so that its status says why.
        with contextlib.suppress(subprocess.TimeoutExpired):
            candidate.proc.wait(timeout=_EXIT_GRACE_S)
    # Killing the candidate also ends a test child still waiting on it (at the deadline).
    return _judge(reports, candidate.stop(), timed_out, limits, mode, seconds)


def _await_verdict(report_r: int, deadline: float) -> tuple[list[str], bool]:
    """The tests' report lines once their process closes the pipe, and whether the deadline
    came first. (The test child is the server's, not ours: its pipe is how we see it end.)"""
    poller = select.poll()  # not select(): descriptors above 1023 are common in a harness
    poller.register(report_r, select.POLLIN)
    data = b""
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or not poller.poll(left * 1000):
            return data.decode("utf-8", "replace").splitlines(), True
        chunk = os.read(report_r, 65536)
        if not chunk:
            return data.decode("utf-8", "replace").splitlines(), False
        data += chunk


def _judge(
    tests: list[str],
    candidate: Ended,
    timed_out: bool,
    limits: ExecLimits,
    mode: Mode,
    seconds: float,
) -> ExecResult:
    """The item's result from the tests' report lines and what the candidate left."""
    output = candidate.output[-OUTPUT_TAIL // 2 :]
    kind, _, reason = last_verdict(tests).partition(" ")
    candidate_sig = exit_signal(candidate.rc, mode) if candidate.early else 0

    def result(status: Status, why: str) -> ExecResult:
        return ExecResult(status == "passed", status, one_line(why), seconds, output)

    if timed_out:
        return result("timed out", f"exceeded the {limits.timeout_s:g} s wall-clock limit")
    if kind == "passed":  # written by dataset code's process only, after check() returned
        return result("passed", "")
    cpu_limit = f"exceeded the {math.ceil(limits.timeout_s)} s CPU limit"
    if kind == "cpu" or (kind == "gone" and candidate_sig == signal.SIGXCPU):
        return result("timed out", cpu_limit)
    if kind == "error":
        return result("error", reason)
    if kind == "failed":
        return result("failed", reason)
    if kind == "gone":
        if "started" not in candidate.reports:
            return result(
                "error",
                f"the program's sandbox did not start (exit status {candidate.rc}): "
                + candidate.output[-200:],
            )
        if candidate_sig == signal.SIGXFSZ:
            return result("failed", f"exceeded the {limits.max_file_mb} MB file size limit")
        if candidate_sig:
            return result("failed", f"{reason}: killed by {signal_name(candidate_sig)}")
        if candidate.early:
            return result("failed", f"{reason}: it exited with status {candidate.rc}")
        return result("failed", reason)
    # Only dataset code runs on the tests' side, so an end without a verdict is the harness's.
    if "started" not in tests:
        return result("error", "the tests did not start (see the harness's log)")
    return result("error", "the tests' process ended without a verdict")


def _text(source: str) -> str:
    """``source`` with any lone surrogate (from a lossy decode) replaced, so it compiles."""
    return source.encode("utf-8", "replace").decode("utf-8")
