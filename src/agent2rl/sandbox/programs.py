"""Run untrusted Python in a sandboxed, resource-limited process: the isolation modes and
limits every program runner here shares, and the one-process runner :func:`run_program`.

Every program gets its own interpreter in a fresh subprocess; nothing it does can crash, hang
or write into the caller. The bootstrap (:mod:`~agent2rl.sandbox.split_boot`'s ``program``
role) reads the program from stdin, sets the resource limits on itself, then ``exec``\\ s it.
The program *passes* only when it ran to its end without an exception: the bootstrap then
reports so on a pipe of its own, in a line tagged with a random token the program is not given
(it lives only in the bootstrap's memory), and exits 0. So neither ``sys.exit(0)`` (a
``SystemExit`` is a failure, as in HumanEval's own harness) nor ``os._exit(0)`` before the
tests have run counts as a pass.

Isolation, the strongest this machine allows (:func:`isolation` says which is in use):

``bwrap`` (where :func:`~agent2rl.sandbox.bwrap.bwrap_available`):
    the system dirs and the Python installation read-only, a private size-capped tmpfs
    ``/tmp`` as the only writable place (and the working directory), no network
    (``--unshare-net``: only a loopback of its own), its own pid namespace torn down with it
    (``--unshare-pid --die-with-parent``), an environment of four variables (``--clearenv``),
    nothing else of the host visible. Run by a non-root user, the sandbox gets its own user
    namespace (``--unshare-user``), so ``RLIMIT_NPROC`` counts only the sandbox's processes.
    Run by root, a user namespace would map to host uid 0, which the kernel exempts from
    ``RLIMIT_NPROC``; instead the bootstrap starts with only ``CAP_SETUID``/``CAP_SETGID``
    and drops to uid/gid 65534 (``nobody``) before the program runs, so the count is over
    nobody's processes on the host.

``rlimits`` (fallback without a usable bwrap):
    the same resource limits and wall-clock kill, a fresh temporary working directory that is
    removed afterwards, a minimal environment, and the program's own session (process group).
    *Not* enforced then: filesystem isolation (the program can read and write whatever the
    caller's user can), network isolation, and, when the caller is root, ``RLIMIT_NPROC``
    (root is exempt: a fork bomb runs until the CPU limit and the kill). For other users
    ``RLIMIT_NPROC`` counts all of the user's processes, so a program may be unable to start
    any thread or process at all. A child that starts its own session and outlives the
    program may escape the kill; the descendants still present are killed.

Resource limits (both modes): ``RLIMIT_CPU`` (``SIGXCPU``, reported as timed out),
``RLIMIT_AS`` (allocations fail with ``MemoryError``), ``RLIMIT_NPROC`` (``fork`` and new
threads fail: a fork bomb stops at the cap), ``RLIMIT_FSIZE`` (also caps the captured output),
``RLIMIT_NOFILE``, and no core dumps. A limit above the caller's own hard limit is lowered to it.

Residual risk, by design of one process: a hostile program can find the bootstrap's frame
(its token and reporting function) and report a pass, or neuter the tests that follow it in
the same interpreter. Graders therefore run a model's code and its tests with
:mod:`agent2rl.sandbox.two_process`, in two sandboxes each started as described here.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import marshal
import math
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Literal

import psutil

from agent2rl.child_process import signal_group, spawn_child
from agent2rl.sandbox.bwrap import (
    bwrap_available,
    bwrap_supports,
    mask_args,
    mount_parents,
    python_ro_binds,
    system_mounts,
)

log = logging.getLogger(__name__)

Status = Literal["passed", "failed", "timed out", "error"]
Isolation = Literal["bwrap", "rlimits"]

#: uid/gid a root caller's sandboxed program runs as (the overflow id, "nobody")
NOBODY = 65534
OUTPUT_TAIL = 4096
_REASON_CHARS = 300
KILL_WAIT_S = 10.0


@dataclass(frozen=True)
class ExecLimits:
    """What one program may use.

    ``timeout_s``: wall clock, from start to kill (the CPU limit is the same, rounded up).
    ``memory_mb``: address space (``RLIMIT_AS``); the interpreter itself takes ~30 MB of it.
    ``max_processes``: processes and threads (``RLIMIT_NPROC``). ``max_file_mb``: the largest
    file it may write, its captured output included (``RLIMIT_FSIZE``); under bwrap also the
    size of its ``/tmp``.
    """

    timeout_s: float = 10.0
    memory_mb: int = 1024
    max_processes: int = 32
    max_file_mb: int = 16
    max_open_files: int = 64

    def __post_init__(self) -> None:
        if not self.timeout_s > 0:
            raise ValueError(f"timeout_s must be positive, not {self.timeout_s}")
        for name in ("memory_mb", "max_processes", "max_file_mb", "max_open_files"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1")

    def rlimits(self) -> tuple[int, int, int, int, int]:
        """CPU seconds, address space bytes, processes, file size bytes, open files: the
        bootstraps' arguments, in their order."""
        return (
            max(1, math.ceil(self.timeout_s)),
            self.memory_mb << 20,
            self.max_processes,
            self.max_file_mb << 20,
            self.max_open_files,
        )


@dataclass(frozen=True)
class ExecResult:
    """The outcome of one program.

    ``status``: ``passed``; ``failed`` (an exception, a non-zero exit, a signal, or an exit
    before its tests finished); ``timed out`` (wall clock or CPU limit); ``error`` (the harness
    could not run it, e.g. the sandbox failed to start: not the program's fault, but not a
    pass either). ``reason`` is one short line (empty when passed). ``output`` is the tail of
    the program's stdout and stderr, for debugging.
    """

    passed: bool
    status: Status
    reason: str
    seconds: float
    output: str = ""


@dataclass(frozen=True)
class Mode:
    """How a sandboxed process is started: the isolation, the bwrap argv prefix, the uid."""

    isolation: Isolation
    #: bwrap arguments up to the command (empty in rlimits mode, so always a prefix)
    prefix: tuple[str, ...]
    #: uid the bootstrap drops to (-1: keep)
    uid: int


RLIMITS_MODE = Mode("rlimits", (), -1)
_HERE = Path(__file__).parent
#: the line of split_boot.py that imports the codec; in the sandbox the codec's source
#: precedes it instead
_WIRE_IMPORT = "from agent2rl.sandbox.wire import WireError, decode, encode"
#: ``python -c`` for every process: run the marshalled bootstrap at the head of stdin
_STUB = "import marshal,sys;exec(marshal.loads(sys.stdin.buffer.read(int(sys.argv[1]))))"


@functools.cache
def boot_source() -> str:
    """The bootstrap every sandboxed process runs: the codec, then
    :mod:`~agent2rl.sandbox.split_boot`."""
    wire = (_HERE / "wire.py").read_text()
    boot = (_HERE / "split_boot.py").read_text()
    if boot.count(_WIRE_IMPORT) != 1:
        raise RuntimeError("split_boot.py must import the codec on one line: " + _WIRE_IMPORT)
    return wire + "\n\n" + boot.replace(_WIRE_IMPORT, "pass  # the codec is defined above")


@functools.cache
def boot_code() -> bytes:
    # Compiled once here rather than in every sandbox (~2 ms each); marshal's format is the
    # interpreter's own, and the sandbox runs this very interpreter.
    return marshal.dumps(compile(boot_source(), "<split_boot>", "exec"))


def masked(mode: Mode, paths: Sequence[Path]) -> Mode:
    """``mode`` with ``paths`` made to look empty inside its sandbox (a task's private data
    that an installed package ships, which a program must not read: HumanEval's own test
    file would hand a model every answer). The rlimits mode cannot mask: returned as is."""
    if mode.isolation != "bwrap" or not paths:
        return mode
    extra = [arg for p in paths for arg in mask_args(Path(p))]
    cut = mode.prefix.index("--unshare-pid")  # after every bind, before the namespaces
    return replace(mode, prefix=(*mode.prefix[:cut], *extra, *mode.prefix[cut:]))


def isolation() -> Isolation:
    """``bwrap`` or ``rlimits``: how programs are isolated on this machine (decided once, by
    really running a program in the sandbox; see the module docstring for what each means)."""
    return probe_mode().isolation


def run_program(
    source: str, limits: ExecLimits | None = None, mode: Isolation | None = None
) -> ExecResult:
    """Run the Python program ``source`` once, isolated and limited, and return its outcome.

    Never raises for anything the program does (an exception, an infinite loop, a memory, fork
    or output bomb, a crash of the interpreter): those come back as ``failed`` or ``timed
    out``. A harness failure (the sandbox does not start, no temporary file can be made) is an
    ``error`` result, not an exception. Source that is not valid Python fails with its
    ``SyntaxError``. Returns within about ``limits.timeout_s`` plus start-up time.

    ``mode`` forces the isolation: None takes the best available (:func:`isolation`);
    ``rlimits`` skips the sandbox; ``bwrap`` where it is unusable gives an ``error`` result.
    """
    limits = limits or ExecLimits()
    started = time.monotonic()
    try:
        return _run(source, limits, pick_mode(mode), started)
    except Exception as err:  # a harness fault must not take the caller down either
        log.exception("code execution harness failed")
        return ExecResult(False, "error", one_line(f"{type(err).__name__}: {err}"), 0.0)


def run_programs(
    sources: Sequence[str],
    limits: ExecLimits | None = None,
    workers: int | None = None,
    on_done: Callable[[int, ExecResult], None] | None = None,
    mode: Isolation | None = None,
) -> list[ExecResult]:
    """:func:`run_program` over ``sources`` in parallel, results in the order of ``sources``.

    ``workers`` defaults to the number of CPUs this process may use (each program is a
    CPU-bound process, so more would only slow each one down and risk spurious timeouts).
    ``on_done(index, result)`` is called as each finishes (from worker threads), for progress.
    An empty ``sources`` gives an empty list; ``mode`` is as for :func:`run_program`.
    """
    if not sources:
        return []
    probe_mode()  # probe the sandbox once, before the threads race to do it

    def one(i: int) -> ExecResult:
        result = run_program(sources[i], limits, mode)
        if on_done is not None:
            on_done(i, result)
        return result

    with ThreadPoolExecutor(max_workers=max(1, min(workers or cpu_count(), len(sources)))) as pool:
        return list(pool.map(one, range(len(sources))))


def _run(source: str, limits: ExecLimits, mode: Mode, started: float) -> ExecResult:
    tag = secrets.token_hex(16)
    payload = f"{tag}\n".encode() + source.encode("utf-8", "replace")
    args = ["program", *limits.rlimits(), mode.uid]
    box = Running.start(args, payload, (), mode, "agent2rl-exec-")
    timed_out = False
    try:
        box.proc.wait(timeout=limits.timeout_s)
    except subprocess.TimeoutExpired:
        timed_out = True
    finally:
        ended = box.stop()
    seconds = time.monotonic() - started
    lines = [r[len(tag) + 1 :] for r in ended.reports if r.startswith(tag + " ")]
    return _judge(lines, ended.output, ended.rc, timed_out, limits, mode, seconds)


@dataclass(frozen=True)
class Ended:
    """What a sandboxed bootstrap left: its exit status, its report lines and its output's
    tail. ``early``: it had exited on its own before the harness stopped it."""

    rc: int
    reports: list[str]
    output: str
    early: bool


@dataclass
class Running:
    """A sandboxed bootstrap, while it runs."""

    proc: subprocess.Popen[bytes]
    out: IO[bytes]
    report_r: int
    workdir: str | None

    @classmethod
    def start(
        cls,
        args: list[object],
        data: bytes,
        fds: tuple[int, ...],
        mode: Mode,
        prefix: str,
        flags: tuple[str, ...] = ("-I",),
    ) -> Running:
        """Start the bootstrap (``python flags``) with ``args`` (a role and its arguments),
        the write end of its report pipe and ``fds``, and ``data`` after the bootstrap on its
        stdin; in the rlimits mode it works in a fresh temporary directory ``prefix...``."""
        report_r, report_w = os.pipe()
        stub = [sys.executable, *flags, "-c", _STUB, str(len(boot_code()))]
        argv = [*mode.prefix, *stub, *map(str, [*args, report_w, *fds])]
        workdir = None if mode.isolation == "bwrap" else tempfile.mkdtemp(prefix=prefix)
        # Output into a file: RLIMIT_FSIZE caps it, and nobody must drain it. stdin is a file
        # too, not a pipe: nothing to feed while it starts, nothing to block on.
        out = tempfile.TemporaryFile()
        try:
            with tempfile.TemporaryFile() as stdin:
                stdin.write(boot_code() + data)
                stdin.seek(0)
                proc = spawn_child(
                    argv,
                    env=sandbox_env(workdir or "/tmp"),
                    stdin=stdin,
                    stdout=out,
                    cwd=workdir,
                    pass_fds=(report_w, *fds),
                    # None: the threads that start programs come and go (the signal follows
                    # the thread); a deadline ends the program, and bwrap dies with us.
                    death_signal=None,
                )
        except BaseException:
            out.close()
            os.close(report_r)
            if workdir is not None:
                shutil.rmtree(workdir, ignore_errors=True)
            raise
        finally:
            os.close(report_w)
        return cls(proc, out, report_r, workdir)

    def stop(self) -> Ended:
        """Kill what is left of the process (:func:`kill_tree`), reap it, and collect what
        it left."""
        early = self.proc.poll() is not None
        kill_tree(self.proc, sweep=self.workdir is not None)  # a workdir: the rlimits mode
        try:
            self.out.seek(0, os.SEEK_END)
            self.out.seek(max(0, self.out.tell() - OUTPUT_TAIL))
            output = self.out.read().decode("utf-8", "replace")
            # What the pipe holds now, without waiting for an EOF that an escaped child could
            # hold off (the reports are a few hundred bytes, far below a pipe's buffer).
            os.set_blocking(self.report_r, False)
            reports = b""
            with contextlib.suppress(BlockingIOError):
                while chunk := os.read(self.report_r, 65536):
                    reports += chunk
        finally:
            self.out.close()
            os.close(self.report_r)
            if self.workdir is not None:
                shutil.rmtree(self.workdir, ignore_errors=True)
        lines = reports.decode("utf-8", "replace").splitlines()
        return Ended(self.proc.returncode, lines, output.strip("\n"), early)


def last_verdict(reports: list[str]) -> str:
    """The last report line other than ``started`` (empty when there is none)."""
    return next((r for r in reversed(reports) if r != "started"), "")


def _judge(
    reports: list[str],
    output: str,
    rc: int,
    timed_out: bool,
    limits: ExecLimits,
    mode: Mode,
    seconds: float,
) -> ExecResult:
    output = output.strip("\n")[-OUTPUT_TAIL // 2 :]
    verdict = last_verdict(reports)

    def result(status: Status, reason: str) -> ExecResult:
        return ExecResult(status == "passed", status, one_line(reason), seconds, output)

    if timed_out:
        return result("timed out", f"exceeded the {limits.timeout_s:g} s wall-clock limit")
    if verdict == "passed" and rc == 0:
        return result("passed", "")
    if verdict.startswith("failed"):
        return result("failed", verdict.removeprefix("failed").strip())
    sig = exit_signal(rc, mode)
    if sig == signal.SIGXCPU:
        return result("timed out", f"exceeded the {math.ceil(limits.timeout_s)} s CPU limit")
    if "started" not in reports:
        # The bootstrap never got to the program: a sandbox or interpreter start-up failure.
        return result("error", f"the sandbox did not start (exit status {rc}): {output[-200:]}")
    if sig == signal.SIGXFSZ:
        return result("failed", f"exceeded the {limits.max_file_mb} MB file size limit")
    if sig > 0:
        return result("failed", f"killed by {signal_name(sig)}")
    return result("failed", f"exited (status {rc}) before its tests finished")


def exit_signal(rc: int, mode: Mode) -> int:
    """The signal that killed a sandboxed program with exit status ``rc``, 0 if none."""
    # bwrap reports a child killed by signal N as exit status 128 + N; Popen as -N.
    return -rc if rc < 0 else rc - 128 if mode.isolation == "bwrap" and rc > 128 else 0


def kill_tree(proc: subprocess.Popen[bytes], sweep: bool) -> None:
    """SIGKILL the program's process group and, with ``sweep``, every descendant still there,
    then reap. Under bwrap, killing bwrap is enough (the sandbox's pid namespace dies with it);
    the sweep, which walks the whole process table, is for the rlimits mode, where a child may
    have left the group."""
    descendants = []
    if sweep:
        with contextlib.suppress(psutil.Error):
            descendants = psutil.Process(proc.pid).children(recursive=True)
    signal_group(proc)  # also when it exited: what it forked may still be in its group
    for child in descendants:
        with contextlib.suppress(psutil.Error):
            child.kill()
    try:
        proc.wait(timeout=KILL_WAIT_S)
    except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL of our own child
        log.error("program process %d did not die after SIGKILL", proc.pid)


def sandbox_env(home: str) -> dict[str, str]:
    """The whole environment of a sandboxed program whose home (and working dir) is ``home``."""
    return {"PATH": "/usr/bin:/bin", "HOME": home, "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}


def pick_mode(mode: Isolation | None) -> Mode:
    """The :class:`Mode` for ``mode`` (None: the best available). Raises ``RuntimeError``
    when ``bwrap`` is asked for where it cannot run programs."""
    best = probe_mode()
    if mode is None or mode == best.isolation:
        return best
    if mode == "rlimits":
        return RLIMITS_MODE
    raise RuntimeError("bwrap cannot run programs on this machine")


@functools.cache
def probe_mode() -> Mode:
    """Pick the isolation once per process: bwrap when it really runs a program here."""
    why = "bwrap is not usable here"
    if bwrap_available():
        mode = _bwrap_mode()
        try:
            probe = _run("import math\nassert math.gcd(4, 6) == 2\n", ExecLimits(30), mode, 0.0)
        except Exception as err:  # e.g. no temporary file: decide once, do not re-probe
            probe = ExecResult(False, "error", one_line(f"{type(err).__name__}: {err}"), 0.0)
        if probe.passed:
            return mode
        why = f"bwrap cannot run programs here ({probe.status}: {probe.reason})"
    log.warning("%s; code runs with rlimits only, WITHOUT filesystem or network isolation", why)
    return RLIMITS_MODE


def _bwrap_mode() -> Mode:
    argv = [shutil.which("bwrap") or "bwrap"]
    argv += system_mounts(tmp_size_bytes=ExecLimits().max_file_mb << 22)  # 4x a file, 64 MB
    binds = python_ro_binds()
    for parent in mount_parents(binds):
        # Made explicitly, bwrap gives them mode 755; made implicitly it may copy the host's
        # (``/root`` is 700), and nobody could not reach the interpreter's files below.
        argv += ["--dir", str(parent)]
    for path in binds:
        argv += ["--ro-bind", str(path), str(path)]
    argv += ["--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-net"]
    argv += ["--unshare-cgroup-try", "--die-with-parent", "--new-session"]
    if os.geteuid() == 0:
        # See the module docstring: root keeps only what dropping to nobody needs.
        argv += ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
        uid = NOBODY
    else:
        argv += ["--unshare-user"]
        if bwrap_supports("--disable-userns"):
            argv += ["--disable-userns"]
        uid = -1
    argv += ["--clearenv"]
    for key, value in sandbox_env("/tmp").items():
        argv += ["--setenv", key, value]
    argv += ["--chdir", "/tmp", "--"]
    return Mode("bwrap", tuple(argv), uid)


def cpu_count() -> int:
    """CPUs this process may run on (its affinity), at least 1."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def signal_name(sig: int) -> str:
    """``SIGKILL`` for 9; ``signal 77`` for a number with no name."""
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"


def one_line(text: str) -> str:
    """``text`` with its whitespace runs collapsed to single spaces, cut to 300 characters."""
    return " ".join(text.split())[:_REASON_CHARS]
