"""What runs inside the sandboxes of :mod:`agent2rl.sandbox.two_process` and
:mod:`agent2rl.sandbox.programs`.

Every process here starts as ``python -I [-S] -c STUB n ROLE ...``: STUB executes the first
``n`` bytes of stdin, this bootstrap compiled and marshalled by the harness
(:mod:`agent2rl.sandbox.wire` followed by this file, whose import of ``wire`` is then
redundant and removed). Three roles:

``program cpu as nproc fsize nofile uid report`` (:func:`~agent2rl.sandbox.programs.run_program`)
    reads a token line and then the program from the rest of stdin, sets its limits, drops to
    ``uid`` unless it is -1, and reports ``<token> started``, then ``<token> passed`` or
    ``<token> failed <reason>``, on ``report`` (not on stdout, which RLIMIT_FSIZE caps).

``candidate cpu as nproc fsize nofile uid report calls answers`` (one process per item)
    reads its job from the rest of stdin (a dict in the wire encoding: ``entry``, ``code``),
    sets its resource limits, drops to ``uid`` unless it is -1, writes ``started`` on
    ``report`` and closes it, *then* runs the model's code, so nothing the code does can take
    that line back or write another. It then answers each line on ``calls`` with one line on
    ``answers``: ``("ok", value)``, ``("raised", type name, message)`` for an ``Exception``,
    or ``("fatal", reason)`` when the code failed to load, does not define the entry point,
    raised a ``BaseException`` that is not an ``Exception`` (``SystemExit``,
    ``KeyboardInterrupt``, ``GeneratorExit``), or returned a value that is not plain data. It
    exits when the calls end. All of this is the candidate's to subvert: the model's code runs
    in this very interpreter, so the other side trusts none of it.

``server uid report control`` (one process per batch of items: the tests' side)
    closes ``report`` (it reports nothing: the harness starts every role with one), drops to
    ``uid`` and waits on the socket ``control`` for items. Each message carries four
    descriptors (the job, the calls' write end, the answers' read end, the report pipe); the
    server forks a child for it and closes its own copies, so the child alone holds them. The
    child reads its job (``entry``, ``setup``, ``test``, ``limits``, ``alarm``), sets the
    limits on itself (a fork's CPU time starts at zero) and runs :func:`run_tests`. The
    server exits when the harness closes ``control``.

:func:`run_tests` runs dataset code only: ``setup`` (HumanEval's prompt, whose helpers the
tests may use), then ``test``, then ``check(candidate)``, where ``candidate`` (also bound to
the entry point's name, and named like it) calls :meth:`_Link.call`: it sends the arguments
across and returns the decoded answer, or raises. Its verdict goes to ``report``, which no
candidate holds: ``started``, then ``passed``, ``failed <reason>``, ``gone <reason>`` (the
candidate's process stopped answering; the harness knows why), ``cpu`` (the CPU limit) or
``error <reason>`` (the dataset's code could not run: not the model's fault).

Once the candidate has failed beyond an ``Exception`` (gone, fatal, an answer that is not
plain data or is over :data:`MAX_ANSWER_BYTES`), every later call fails too and the verdict is
that failure, even if the tests caught the exception (:class:`CandidateFailure` is a
``BaseException``, so ``except Exception`` does not catch it, and the link remembers it in
case a bare ``except`` did). An ``Exception`` the candidate raised is re-raised here as the
builtin exception of that name (or :class:`CandidateError`), so tests that expect one behave as
in a single process.

Like ``wire``, this file imports only the standard library (the server imports ``socket`` and
``signal`` when it starts): it must start fast, and the harness's package is not inside the
sandbox.
"""

import builtins
import os
import resource
import sys

from agent2rl.sandbox.wire import WireError, decode, encode  # boot: defined by wire.py above

#: the longest answer line the tests read (a plain value this large is no HumanEval answer)
MAX_ANSWER_BYTES = 32 << 20
_REASON_CHARS = 300


class CandidateFailure(BaseException):
    """The candidate cannot be called any more; a ``BaseException`` so tests do not catch it."""


class CandidateError(Exception):
    """An exception the candidate raised whose type is not a builtin one."""


def main() -> None:
    """The bootstrap's entry: see the module docstring for the arguments."""
    role = sys.argv[2]  # sys.argv[1] is the bootstrap's size, read by the stub
    if role == "server":
        sys.stdin.close()
        os.close(int(sys.argv[4]))
        serve_tests(int(sys.argv[5]), int(sys.argv[3]))
        return
    if role == "program":
        run_program(*(int(a) for a in sys.argv[3:10]))
    cpu, mem, nproc, fsize, nofile, uid, report, fd_a, fd_b = (int(a) for a in sys.argv[3:12])
    job = decode(sys.stdin.buffer.read())
    sys.stdin.close()
    if type(job) is not dict:
        raise SystemExit("the job is not a dict")
    confine(cpu, mem, nproc, fsize, nofile, uid)
    _say(report, "started")
    os.close(report)
    serve(job["entry"], job["code"], fd_a, fd_b)


def confine(cpu: int, mem: int, nproc: int, fsize: int, nofile: int, uid: int) -> None:
    """Set the resource limits (never above the current hard limits), no core dumps, and drop
    to ``uid`` (:func:`drop_to`) unless it is -1."""
    r = resource
    for res, soft, hard in (
        (r.RLIMIT_CPU, cpu, cpu + 1),
        (r.RLIMIT_AS, mem, mem),
        (r.RLIMIT_NPROC, nproc, nproc),
        (r.RLIMIT_FSIZE, fsize, fsize),
        (r.RLIMIT_NOFILE, nofile, nofile),
        (r.RLIMIT_CORE, 0, 0),
    ):
        limit = r.getrlimit(res)[1]
        if limit != r.RLIM_INFINITY:
            hard = min(hard, limit)
        r.setrlimit(res, (min(soft, hard), hard))
    drop_to(uid)


def run_program(cpu: int, mem: int, nproc: int, fsize: int, nofile: int, uid: int, fd: int) -> None:
    """The ``program`` role: run the program after the tag line on stdin, confined; report
    on ``fd`` as the module docstring says, and exit (0 when it passed)."""
    tag, _, source = sys.stdin.buffer.read().partition(b"\n")
    sys.stdin.close()
    confine(cpu, mem, nproc, fsize, nofile, uid)
    out = os.dup(fd)
    os.close(fd)
    prefix = tag.decode() + " "
    del tag

    def say(text: str) -> None:
        _say(out, prefix + text)

    say("started")
    try:
        code = compile(source, "<program>", "exec")
        del source
        exec(code, {"__name__": "__program__"})
    except BaseException as err:
        try:
            reason = type(err).__name__ + ": " + str(err)
        except BaseException:
            reason = type(err).__name__
        say("failed " + _one_line(reason))
        os._exit(1)
    say("passed")
    os._exit(0)


def drop_to(uid: int) -> None:
    """Become ``uid``/``uid`` with no supplementary groups (nothing when ``uid`` is -1)."""
    if uid >= 0:
        os.chmod(".", 0o1777)  # its /tmp: the only place it may write
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)


def serve_tests(control_fd: int, uid: int) -> None:
    """The tests' server: fork a child per item received on ``control_fd`` until it closes."""
    import signal
    import socket

    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    drop_to(uid)
    # The kernel reaps the children: the harness learns of each end from its report pipe.
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    control = socket.socket(fileno=control_fd)
    while True:
        try:
            message, fds, _flags, _addr = socket.recv_fds(control, 16, 4)
        except OSError:
            break
        if not message:
            break  # the harness is done (or gone)
        if len(fds) == 4:
            try:
                pid = os.fork()
            except OSError as err:  # e.g. out of processes: the harness's fault, say so
                _say(fds[3], "error the tests could not be started: " + describe(err))
                pid = -1
            if pid == 0:
                try:
                    control.close()
                    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                    _test_child(*fds)
                finally:
                    os._exit(1)
        for fd in fds:
            os.close(fd)
    os._exit(0)


def _test_child(job_fd: int, calls_fd: int, answers_fd: int, report: int) -> None:
    """One item's tests, in a child of the server (see :func:`serve_tests`)."""
    import signal

    with os.fdopen(job_fd, "rb") as f:
        job = decode(f.read())
    cpu, mem, nproc, fsize, nofile = job["limits"]
    confine(cpu, mem, nproc, fsize, nofile, -1)

    def out_of_cpu(_sig: int, _frame: object) -> None:
        _say(report, "cpu")
        os._exit(1)

    signal.signal(signal.SIGXCPU, out_of_cpu)
    # A backstop only: the harness kills the candidate at the deadline, which ends the calls.
    signal.alarm(job["alarm"])
    run_tests(job["entry"], job["setup"], job["test"], report, calls_fd, answers_fd)


def serve(entry: str, code: str, calls_fd: int, answers_fd: int) -> None:
    """Run the model's ``code``, then answer calls to ``entry`` until the calls end."""
    fatal = None
    namespace: dict[str, object] = {"__name__": "__program__"}
    try:
        exec(compile(code, "<program>", "exec"), namespace)
    except BaseException as err:
        fatal = "the program raised " + describe(err)
    function = namespace.get(entry)
    if fatal is None and not callable(function):
        fatal = f"the program defines no function {entry}()"
    _flush()
    calls = os.fdopen(calls_fd, "rb")
    while line := calls.readline():
        try:
            answer = _answer(entry, function, fatal, line)
        except BaseException as err:  # e.g. a subclass whose slots raise SystemExit
            answer = encode(("fatal", f"{entry}() could not be answered: {describe(err)}"))
        _flush()
        _write_all(answers_fd, answer.encode() + b"\n")
    os._exit(0)


def _answer(entry: str, function: object, fatal: str | None, line: bytes) -> str:
    if fatal is not None:
        return encode(("fatal", fatal))
    args, kwargs = decode(line)
    try:
        value = function(*args, **kwargs)  # type: ignore[operator]
    except Exception as err:
        return encode(("raised", type(err).__name__, _message(err)))
    except BaseException as err:
        return encode(("fatal", f"{entry}() raised {describe(err)}"))
    try:
        return encode(("ok", value))
    except WireError as err:
        return encode(("fatal", f"{entry}() returned a value the tests cannot receive: {err}"))


class _Link:
    """The test process's end of the calls: :meth:`call` is the ``candidate`` the tests see."""

    def __init__(self, entry: str, calls_fd: int, answers_fd: int) -> None:
        self.entry = entry
        self.calls_fd = calls_fd
        self.answers = os.fdopen(answers_fd, "rb")
        #: why the candidate cannot be called any more: ("failed" | "gone", reason)
        self.broken: tuple[str, str] | None = None
        #: the last exception re-raised for the candidate (to name it in the verdict)
        self.raised: BaseException | None = None
        #: a dataset value that cannot be sent: the harness's limit, not the model's fault
        self.unsendable: str | None = None

    def call(self, *args: object, **kwargs: object) -> object:
        if self.broken is not None:
            raise CandidateFailure(self.broken[1])
        try:
            request = encode((args, kwargs))
        except WireError as err:
            self.unsendable = f"the tests pass {self.entry}() a value that cannot be sent: {err}"
            raise CandidateFailure(self.unsendable) from None
        try:
            _write_all(self.calls_fd, request.encode() + b"\n")
        except OSError:  # EPIPE: nobody reads the calls any more
            raise self._fail("gone", "the program's process stopped answering") from None
        line = self.answers.readline(MAX_ANSWER_BYTES + 1)
        if len(line) > MAX_ANSWER_BYTES:
            raise self._fail(
                "failed", f"{self.entry}() answered with over {MAX_ANSWER_BYTES} bytes"
            )
        if not line.endswith(b"\n"):
            raise self._fail("gone", "the program's process stopped answering")
        try:
            reply = decode(line)
        except WireError as err:
            reason = f"the program sent a malformed answer: {err}"
            raise self._fail("failed", reason) from None
        if type(reply) is tuple and len(reply) == 2 and reply[0] == "ok":
            return reply[1]
        if type(reply) is tuple and len(reply) == 3 and reply[0] == "raised":
            name, message = reply[1], reply[2]
            if type(name) is str and type(message) is str:
                self.raised = _rebuild(name, message)
                raise self.raised
        if type(reply) is tuple and len(reply) == 2 and reply[0] == "fatal":
            raise self._fail("failed", str(reply[1]))
        raise self._fail("failed", "the program sent an answer that is not a call's result")

    def _fail(self, kind: str, reason: str) -> CandidateFailure:
        """Remember that the candidate is broken (for good) and the exception to raise."""
        self.broken = (kind, _one_line(reason))
        return CandidateFailure(self.broken[1])

    def verdict(self, err: BaseException | None) -> str:
        """The report line for a run of the tests that ended with ``err`` (None: no error)."""
        if self.unsendable is not None:
            return "error " + _one_line(self.unsendable)
        if self.broken is not None:
            return f"{self.broken[0]} {self.broken[1]}"
        if err is None:
            return "passed"
        if err is self.raised:
            return f"failed {self.entry}() raised {describe(err)}"
        return "failed " + describe(err)


def run_tests(entry: str, setup: str, test: str, report: int, calls_fd: int, answers_fd: int):
    """Run the dataset's ``setup`` and ``test`` code and ``check(candidate)``; say the verdict
    on ``report`` and exit (0 when passed)."""
    _say(report, "started")
    link = _Link(entry, calls_fd, answers_fd)

    def candidate(*args: object, **kwargs: object) -> object:
        return link.call(*args, **kwargs)

    candidate.__name__ = candidate.__qualname__ = entry  # as the real function would say
    namespace: dict[str, object] = {"__name__": "__tests__"}
    try:
        exec(compile(setup, "<prompt>", "exec"), namespace)
        namespace[entry] = candidate
        exec(compile(test, "<test>", "exec"), namespace)
        check = namespace["check"]
    except BaseException as err:  # the dataset's own code: the harness's problem
        _say(report, "error the tests could not be loaded: " + describe(err))
        os._exit(1)
    try:
        check(candidate)  # type: ignore[operator]
    except BaseException as err:
        _say(report, link.verdict(err))
        os._exit(1)
    verdict = link.verdict(None)
    _say(report, verdict)
    os._exit(0 if verdict == "passed" else 1)


def _rebuild(name: str, message: str) -> BaseException:
    """The exception to raise in the tests for one the candidate raised: the builtin
    ``Exception`` of that name when there is one that takes a message, else CandidateError."""
    cls = getattr(builtins, name, None)
    if isinstance(cls, type) and issubclass(cls, Exception):
        try:
            return cls(message)
        except Exception:  # e.g. UnicodeDecodeError wants five arguments
            pass
    return CandidateError(f"{name}: {message}")


def describe(err: BaseException) -> str:
    """``Type: message`` on one short line, even for an exception whose ``str`` fails."""
    return _one_line(f"{type(err).__name__}: {_message(err)}")


def _message(err: BaseException) -> str:
    try:
        return str(err)[:_REASON_CHARS]
    except BaseException:
        return ""


def _one_line(text: str) -> str:
    return " ".join(text.split())[:_REASON_CHARS]


def _say(fd: int, text: str) -> None:
    _flush()
    try:
        _write_all(fd, (text + "\n").encode("utf-8", "replace"))
    except OSError:  # nobody listens any more (the harness gave up at the deadline)
        pass


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:  # the program may have closed or replaced them
            pass


if __name__ == "__main__":
    main()
