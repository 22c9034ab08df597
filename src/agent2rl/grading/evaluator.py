"""Run one evaluation in a child process, with a timeout that kills its whole group.

Every failed evaluation says whose failure it was (:data:`FailureKind`):

``model``
    the submission's own fault, and deterministic: its weights or config do not load (shape
    mismatch, unknown architecture, corrupt safetensors), its own chat template does not
    render, or a scorer refused its output (:class:`agent2rl.errors.ModelFault`). The grading
    service caches it like a score: the same files submitted again get the same failure.
``harness``
    anything else: a timeout (a loaded machine), the process killed by a signal (the OOM
    killer), the grader running out of memory, a judge outage, an internal exception, a worker
    that died without saying why. Not the model's fault, so never cached: the same weights
    submitted again are evaluated again.

When in doubt a failure is ``harness``: wrongly retrying a model failure costs one more
evaluation of the agent's own time, wrongly caching a harness failure loses a score for good.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Literal, TypeVar

from agent2rl.child_process import kill_group, signal_group, spawn_child, spawner
from agent2rl.dataset import Split
from agent2rl.inference.backend import BackendConfig
from agent2rl.rundir import RunInfo
from agent2rl.settings import Settings

T = TypeVar("T")


@dataclass(frozen=True)
class EvalSpec:
    """What a model is evaluated on and how; one per run, shared by the baseline and every
    submission so that their scores stay comparable.

    ``task_options`` are the task's ``--task-opt`` values; ``limit`` grades only the first
    items (quick checks; an official run never sets it); ``split`` is the split graded: the
    private one for every score a run records, ``validation`` or ``public`` only for
    ``agent2rl eval`` (a model graded without an agent).
    """

    task: str
    task_options: dict[str, Any] = field(default_factory=dict)
    backend: BackendConfig = field(default_factory=BackendConfig)
    limit: int | None = None
    split: Split = "private"

    def to_json(self) -> str:
        return json.dumps({**vars(self), "backend": self.backend.to_dict()}, sort_keys=True)

    @classmethod
    def of_run(cls, info: RunInfo, split: Split = "private") -> EvalSpec:
        """A run's evaluation settings, from its run.json (as its baseline used them)."""
        backend = BackendConfig.from_dict(info.backend)
        return cls(info.task, info.task_options or {}, backend, split=split)

    @classmethod
    def from_json(cls, text: str) -> EvalSpec:
        d = json.loads(text)
        return cls(
            task=d["task"],
            task_options=d.get("task_options") or {},
            backend=BackendConfig.from_dict(d.get("backend")),
            limit=d.get("limit"),
            split=d.get("split") or "private",
        )


#: Whose fault a failed evaluation was (see the module docstring).
FailureKind = Literal["model", "harness"]
FAILURE_KINDS: tuple[FailureKind, ...] = ("model", "harness")


@dataclass(frozen=True)
class EvalOutcome:
    """``score`` is None when ``error`` is set (crash, timeout, unloadable model); ``failure``
    is then whose fault it was, and None on success."""

    score: float | None
    n_items: int | None
    items_path: Path | None
    seconds: float
    eval_hash: str | None
    error: str | None = None
    failure: FailureKind | None = None
    #: the worker's breakdown (see :func:`agent2rl.grading.worker.evaluate_to`); None when
    #: the worker wrote no result
    timings: dict[str, Any] | None = None

    @classmethod
    def harness_failure(cls, seconds: float, error: str) -> EvalOutcome:
        return cls(None, None, None, seconds, None, error, "harness")

    def recorded(self, root: Path) -> dict[str, Any]:
        """The outcome as the ledger records it (a submission's row, the end-of-run grade):
        ``items_path`` relative to the run directory ``root``, ``failure_kind`` on a failure."""
        return {
            "score": self.score,
            "n_items": self.n_items,
            "items_path": str(self.items_path.relative_to(root)) if self.items_path else None,
            "eval_seconds": self.seconds,
            "eval_hash": self.eval_hash,
            "error": self.error,
            "failure_kind": self.failure if self.error is not None else None,
        }


#: Written by the worker into its ``out`` directory once it holds the device lock(s): from
#: then on the evaluation's own timeout runs (see :func:`run_evaluation`).
STARTED_FILE = "started.json"


def grading_overhead_s(timings: dict[str, Any] | None) -> float | None:
    """A submission's grading overhead: the time from taking it in to its score that was
    neither generation nor scoring (staging, process start, task setup, model load, the
    worker's bookkeeping), waits behind other evaluations (queue, device lock) excluded.
    None when it was not evaluated or the row has no breakdown (an older ledger)."""
    if not timings or not timings.get("evaluated"):
        return None
    try:
        spent = float(timings["eval_s"]) + float(timings.get("staging_s") or 0.0)
        work = float(timings["generate_s"]) + float(timings["score_s"])
        return max(0.0, spent - work - float(timings.get("lock_wait_s") or 0.0))
    except (KeyError, TypeError, ValueError):  # a failed evaluation has no generate_s
        return None


class EvalWorkers:
    """The evaluation workers this process is running, so that a stopping grading service can
    kill them (each is in its own process group) instead of leaving them holding a device.
    Thread-safe: evaluations run in the service's request threads. After :meth:`stop` every
    outcome (at once for a worker not started yet) is a harness failure saying so.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._procs: set[subprocess.Popen] = set()
        self.stopped = threading.Event()

    def _add(self, proc: subprocess.Popen) -> bool:
        with self._lock:
            if self.stopped.is_set():
                return False
            self._procs.add(proc)
            return True

    def _discard(self, proc: subprocess.Popen) -> None:
        with self._lock:
            self._procs.discard(proc)

    def stop(self) -> None:
        """Refuse new workers and SIGKILL the groups of running ones. Safe to call from a
        signal handler (no waiting, no locks held for long) and more than once."""
        self.stopped.set()
        with self._lock:
            procs = list(self._procs)
        for proc in procs:
            signal_group(proc)


def run_evaluation(
    spec: EvalSpec,
    model_dir: Path,
    out: Path,
    settings: Settings,
    timeout_s: float,
    *,
    lock_wait_s: float | None = None,
    workers: EvalWorkers | None = None,
    warm: WarmWorker | None = None,
) -> EvalOutcome:
    """Evaluate ``model_dir`` as ``spec`` says in a child process; results land in ``out``.

    Two clocks: the worker first prepares the task and waits for the lock of the device(s) it
    will use (other runs may be evaluating on them); that wait is bounded by ``lock_wait_s``
    (None: ``max(600, 2 * timeout_s)``) and does not count toward ``timeout_s``, which starts
    when the worker writes :data:`STARTED_FILE` (it holds the lock then). Either limit passed
    kills the whole process group and the outcome is a ``harness`` failure saying which.

    The child runs in its own session (its group is killed as one) and gets SIGKILL from the
    kernel if this thread's process dies (``PR_SET_PDEATHSIG``), so a grading service killed
    by SIGKILL leaves no worker holding the device; ``workers`` registers it for
    :meth:`EvalWorkers.stop`. Its output is appended to ``out/eval.log``. A failure is
    ``model`` only when the worker said so in ``error.json`` (its ``failure_kind``); a
    timeout, a signal, or an exit without it (or with an unknown kind in it) is ``harness``.
    ``warm``: evaluate in that long-lived worker (:class:`WarmWorker`) instead, with the same
    clocks, files in ``out`` and failure kinds.
    """
    out.mkdir(parents=True, exist_ok=True)
    for stale in (STARTED_FILE, "result.json", "error.json"):
        (out / stale).unlink(missing_ok=True)
    if lock_wait_s is None:
        lock_wait_s = max(600.0, 2 * timeout_s)
    if workers is not None and workers.stopped.is_set():
        return _stopped_outcome(0.0)
    if warm is not None:
        return warm.evaluate(spec, model_dir, out, settings, timeout_s, lock_wait_s, workers)
    args = ["--spec", spec.to_json(), "--model", str(model_dir), "--out", str(out)]
    started = time.time()
    with open(out / "eval.log", "ab") as log:
        proc = _spawn_worker(settings, [*args, "--requested-at", repr(started)], stdout=log)
    if workers is not None and not workers._add(proc):  # stopped while it was starting
        kill_group(proc)
        return _stopped_outcome(time.time() - started)
    try:
        cut, _ = _two_clocks(proc.wait, subprocess.TimeoutExpired, out, lock_wait_s, timeout_s)
        if cut is not None:
            kill_group(proc)
    finally:
        if workers is not None:
            workers._discard(proc)
    seconds = time.time() - started
    if workers is not None and workers.stopped.is_set() and proc.returncode != 0:
        return _stopped_outcome(seconds)
    if cut is not None:
        return EvalOutcome.harness_failure(seconds, cut)
    return _outcome(proc.returncode, out, seconds)


def _spawn_worker(settings: Settings, args: list[str], **io: Any) -> subprocess.Popen:
    """``python -m agent2rl.grading.worker ARGS`` with the task store and the locks, its
    standard streams as ``io`` says. SIGKILL, not SIGTERM, as its parent-death signal: a
    worker stuck in a CUDA call may ignore SIGTERM."""
    paths = ["--store", str(settings.task_store), "--locks", str(settings.locks)]
    cmd = [sys.executable, "-m", "agent2rl.grading.worker", *args, *paths]
    env = {"OMP_WAIT_POLICY": "PASSIVE", **os.environ}
    env.update(TOKENIZERS_PARALLELISM="false", HF_HUB_OFFLINE="1")
    return spawn_child(cmd, env=env, death_signal=signal.SIGKILL, **io)


def _outcome(returncode: int | None, out: Path, seconds: float) -> EvalOutcome:
    """The outcome of a worker's evaluation that ended by itself with ``returncode`` (a warm
    worker's reply code, or its exit code when it died), from the files it left in ``out``."""
    if returncode == 0 and (out / "result.json").exists():
        res = json.loads((out / "result.json").read_text())
        return EvalOutcome(
            res["score"],
            res["n_items"],
            out / "items.jsonl",
            seconds,
            res["eval_hash"],
            timings=res.get("timings"),
        )
    error, failure = f"evaluation failed (exit code {returncode})", "harness"
    if returncode and returncode < 0:
        # Killed (the OOM killer, an operator): whatever error.json says, this run was cut.
        error = f"evaluation killed by signal {-returncode} (out of memory?)"
    elif (out / "error.json").exists():
        report = _read_error(out / "error.json")
        error = "evaluation failed: " + str(report.get("error") or "no message")
        failure = report["failure"] if report.get("failure") in FAILURE_KINDS else "harness"
    return EvalOutcome(None, None, None, seconds, None, error, failure)


class WarmWorker:
    """A run's long-lived evaluation worker (``agent2rl.grading.worker --serve``, which keeps
    the imports, the prepared task and the loaded model between submissions).

    Started lazily by the first :meth:`evaluate`, in its own session, registered with the
    service's :class:`EvalWorkers` for its whole life (a stopping service kills it), and
    with SIGKILL as its parent-death signal. That signal follows the thread that forked, and
    request threads come and go, so the worker is forked from the process's spawner thread
    (:func:`agent2rl.child_process.spawner`). A timeout or a crash kills its group and
    forgets it: the next evaluation starts a new one (cold). One evaluation at a time (a
    lock).
    """

    def __init__(self, settings: Settings, log_path: Path) -> None:
        self._settings = settings
        self._log_path = log_path
        self._lock = threading.Lock()
        self._proc: subprocess.Popen | None = None
        self._replies: queue.Queue[str | None] = queue.Queue()

    def _popen(self) -> subprocess.Popen:
        self._log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self._log_path, "ab") as log:
            # requests in, replies out, everything else it prints to the log
            streams = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE, "stderr": log}
            return _spawn_worker(self._settings, ["--serve"], **streams)

    def _start(self, workers: EvalWorkers | None) -> subprocess.Popen | None:
        proc = spawner().submit(self._popen).result()  # its error, if any, raised here
        if workers is not None and not workers._add(proc):
            kill_group(proc)
            return None
        replies: queue.Queue[str | None] = queue.Queue()

        def read() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                replies.put(line.decode(errors="replace"))
            replies.put(None)  # end of output: the worker died

        threading.Thread(target=read, daemon=True).start()
        self._proc, self._replies = proc, replies
        return proc

    def _drop(self, workers: EvalWorkers | None) -> int | None:
        """Kill the worker's group, forget it; returns its exit status."""
        proc, self._proc = self._proc, None
        if proc is None:
            return None
        kill_group(proc)
        if workers is not None:
            workers._discard(proc)
        return proc.returncode

    def close(self, workers: EvalWorkers | None = None) -> None:
        """Kill the worker (the run is over); a later :meth:`evaluate` starts a new one."""
        with self._lock:
            self._drop(workers)

    def evaluate(
        self,
        spec: EvalSpec,
        model_dir: Path,
        out: Path,
        settings: Settings,
        timeout_s: float,
        lock_wait_s: float,
        workers: EvalWorkers | None,
    ) -> EvalOutcome:
        """:func:`run_evaluation` in this worker (called by it: ``out`` is clean, ``workers``
        not stopped yet)."""
        started = time.time()
        with self._lock:
            proc = self._proc
            if proc is None or proc.poll() is not None:
                self._drop(workers)
                proc = self._start(workers)
                if proc is None:
                    return _stopped_outcome(time.time() - started)
            request = {
                "spec": spec.to_json(),
                "model": str(model_dir),
                "out": str(out),
                "at": time.time(),
            }
            try:
                assert proc.stdin is not None
                proc.stdin.write((json.dumps(request) + "\n").encode())
                proc.stdin.flush()
                reply = partial(_next_reply, self._replies)
                cut, rc = _two_clocks(reply, queue.Empty, out, lock_wait_s, timeout_s)
            except OSError:  # the pipe broke: it died before reading the request
                cut, rc = None, None
            seconds = time.time() - started
            if workers is not None and workers.stopped.is_set() and rc != 0:
                self._drop(workers)
                return _stopped_outcome(seconds)
            if cut is not None:
                self._drop(workers)
                return EvalOutcome.harness_failure(seconds, cut)
            if rc is None:  # it died mid-evaluation: an exit status as a cold worker's
                status = self._drop(workers)
                return _outcome(status if status else -9, out, seconds)
            return _outcome(rc, out, seconds)


def _next_reply(replies: queue.Queue[str | None], seconds: float) -> int | None:
    """The code of a warm worker's next reply line (waiting up to ``seconds``, else
    ``queue.Empty``); None for end of output (it died)."""
    line = replies.get(timeout=seconds)
    if line is None:
        return None
    try:
        return int(json.loads(line)["rc"])
    except (ValueError, KeyError, TypeError):
        return 1  # an unreadable reply: whatever the files say, not a success


def _two_clocks(
    wait: Callable[[float], T],
    empty: type[Exception],
    out: Path,
    lock_wait_s: float,
    timeout_s: float,
) -> tuple[str | None, T | None]:
    """The two clocks of :func:`run_evaluation` over ``wait(seconds)``, which returns what
    the worker answered or raises ``empty`` when nothing came in time: up to ``lock_wait_s``
    until ``out/``:data:`STARTED_FILE` appears, then up to ``timeout_s`` more. ``(None,
    answer)`` when it answered, ``(why it was cut, None)`` past a limit."""
    wait_end = time.monotonic() + lock_wait_s
    while not (out / STARTED_FILE).exists():
        try:
            return None, wait(0.05)
        except empty:
            if time.monotonic() > wait_end:
                return (
                    f"evaluation did not get the device within {lock_wait_s:g}s (other "
                    "evaluations held it): submit again",
                    None,
                )
    try:
        return None, wait(timeout_s)
    except empty:
        return f"evaluation timed out after {timeout_s:g}s", None


def _stopped_outcome(seconds: float) -> EvalOutcome:
    return EvalOutcome.harness_failure(
        seconds,
        "the grading service stopped during the evaluation (the run ended): submit again "
        "in a later run",
    )


def describe(err: BaseException, limit: int = 300) -> str:
    """An exception as one short line: its type and the first line of its message (at most
    ``limit`` characters of it)."""
    first = next((line for line in str(err).splitlines() if line.strip()), "")
    return f"{type(err).__name__}: {first[:limit]}" if first else type(err).__name__


def _read_error(path: Path) -> dict[str, Any]:
    """The worker's ``error.json``; a torn or odd one reads as a harness failure."""
    try:
        report = json.loads(path.read_text())
    except (OSError, ValueError):
        return {"error": "unreadable error.json", "failure": "harness"}
    return report if isinstance(report, dict) else {"failure": "harness"}
