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

import functools
import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from agent2rl.child_process import die_with_parent
from agent2rl.dataset import Split
from agent2rl.inference.backend import BackendConfig
from agent2rl.settings import Settings


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
        return json.dumps(
            {
                "task": self.task,
                "task_options": self.task_options,
                "backend": self.backend.to_dict(),
                "limit": self.limit,
                "split": self.split,
            },
            sort_keys=True,
        )

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


#: Written by the worker into its ``out`` directory once it holds the device lock(s): from
#: then on the evaluation's own timeout runs (see :func:`run_evaluation`).
STARTED_FILE = "started.json"


class EvalWorkers:
    """The evaluation workers this process is running, so that a stopping grading service can
    kill them (each is in its own process group) instead of leaving them holding a device.

    Thread-safe: evaluations run in the service's request threads. After :meth:`stop` no new
    worker starts (:func:`run_evaluation` answers a harness failure at once) and every running
    one gets SIGKILL; the outcome of each says the service stopped.
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

    def running(self) -> list[int]:
        """Pids of the workers running now."""
        with self._lock:
            return [p.pid for p in self._procs if p.poll() is None]

    def stop(self) -> int:
        """Refuse new workers and SIGKILL the groups of running ones; returns how many were
        signalled. Safe to call from a signal handler (no waiting, no locks held for long)
        and more than once."""
        self.stopped.set()
        with self._lock:
            procs = list(self._procs)
        for proc in procs:
            _signal_group(proc)
        return len(procs)


def run_evaluation(
    spec: EvalSpec,
    model_dir: Path,
    out: Path,
    settings: Settings,
    timeout_s: float,
    log_path: Path | None = None,
    *,
    lock_wait_s: float | None = None,
    workers: EvalWorkers | None = None,
) -> EvalOutcome:
    """Evaluate ``model_dir`` as ``spec`` says in a child process; results land in ``out``.

    Two clocks: the worker first prepares the task and waits for the lock of the device(s) it
    will use (other runs may be evaluating on them); that wait is bounded by ``lock_wait_s``
    (None: ``max(600, 2 * timeout_s)``) and does not count toward ``timeout_s``, which starts
    when the worker writes :data:`STARTED_FILE` (it holds the lock then). Either limit passed
    kills the whole process group and the outcome is a ``harness`` failure saying which.

    The child runs in its own session (its group is killed as one) and gets SIGKILL from the
    kernel if this thread's process dies (``PR_SET_PDEATHSIG``), so a grading service killed
    by SIGKILL leaves no worker holding the device. ``workers``, if given, registers the child
    so that :meth:`EvalWorkers.stop` can kill it; a stopped registry starts nothing. The
    child's output is appended to ``log_path`` (default ``out/eval.log``).

    A failure is ``model`` only when the worker said so in ``error.json`` (see
    :func:`agent2rl.grading.worker.failure_kind`); a timeout, a signal, or an exit without
    ``error.json`` (or with an unknown kind in it) is ``harness``.
    """
    out.mkdir(parents=True, exist_ok=True)
    for stale in (STARTED_FILE, "result.json", "error.json"):
        (out / stale).unlink(missing_ok=True)
    if lock_wait_s is None:
        lock_wait_s = max(600.0, 2 * timeout_s)
    cmd = [
        sys.executable,
        "-m",
        "agent2rl.grading.worker",
        "--spec",
        spec.to_json(),
        "--model",
        str(model_dir),
        "--out",
        str(out),
        "--store",
        str(settings.task_store),
        "--locks",
        str(settings.locks),
    ]
    started = time.time()
    if workers is not None and workers.stopped.is_set():
        return _stopped_outcome(0.0)
    env = {
        "OMP_WAIT_POLICY": "PASSIVE",
        **os.environ,
        "TOKENIZERS_PARALLELISM": "false",
        "HF_HUB_OFFLINE": "1",
    }
    with open(log_path or out / "eval.log", "ab") as log:
        proc = subprocess.Popen(
            cmd,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=env,
            # SIGKILL, not SIGTERM: a worker stuck in a CUDA call may ignore SIGTERM.
            preexec_fn=functools.partial(die_with_parent, signal.SIGKILL),
        )
    if workers is not None and not workers._add(proc):  # stopped while it was starting
        _kill_group(proc)
        return _stopped_outcome(time.time() - started)
    try:
        cut = _wait_in_two_phases(proc, out / STARTED_FILE, lock_wait_s, timeout_s)
    finally:
        if workers is not None:
            workers._discard(proc)
    seconds = time.time() - started
    if workers is not None and workers.stopped.is_set() and proc.returncode != 0:
        return _stopped_outcome(seconds)
    if cut is not None:
        return EvalOutcome(None, None, None, seconds, None, cut, "harness")
    if proc.returncode == 0 and (out / "result.json").exists():
        res = json.loads((out / "result.json").read_text())
        return EvalOutcome(
            res["score"], res["n_items"], out / "items.jsonl", seconds, res["eval_hash"]
        )
    error, failure = f"evaluation failed (exit code {proc.returncode})", "harness"
    if proc.returncode and proc.returncode < 0:
        # Killed (the OOM killer, an operator): whatever error.json says, this run was cut.
        error = f"evaluation killed by signal {-proc.returncode} (out of memory?)"
    elif (out / "error.json").exists():
        report = _read_error(out / "error.json")
        error = "evaluation failed: " + str(report.get("error") or "no message")
        failure = report["failure"] if report.get("failure") in FAILURE_KINDS else "harness"
    return EvalOutcome(None, None, None, seconds, None, error, failure)


def _wait_in_two_phases(
    proc: subprocess.Popen, started_file: Path, lock_wait_s: float, timeout_s: float
) -> str | None:
    """Wait for ``proc``: up to ``lock_wait_s`` until ``started_file`` appears, then up to
    ``timeout_s`` more. Returns None when it exited by itself, else why it was killed."""
    wait_end = time.monotonic() + lock_wait_s
    while not started_file.exists():
        try:
            proc.wait(timeout=0.05)
            return None
        except subprocess.TimeoutExpired:
            if time.monotonic() > wait_end:
                _kill_group(proc)
                return (
                    f"evaluation did not get the device within {lock_wait_s:g}s (other "
                    "evaluations held it): submit again"
                )
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        return f"evaluation timed out after {timeout_s:g}s"
    return None


def _stopped_outcome(seconds: float) -> EvalOutcome:
    return EvalOutcome(
        None,
        None,
        None,
        seconds,
        None,
        "the grading service stopped during the evaluation (the run ended): submit again "
        "in a later run",
        "harness",
    )


def _read_error(path: Path) -> dict[str, Any]:
    """The worker's ``error.json``; a torn or odd one reads as a harness failure."""
    try:
        report = json.loads(path.read_text())
    except (OSError, ValueError):
        return {"error": "unreadable error.json", "failure": "harness"}
    return report if isinstance(report, dict) else {"failure": "harness"}


def _signal_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):  # gone already (a reused pid is not ours)
        pass


def _kill_group(proc: subprocess.Popen) -> None:
    _signal_group(proc)
    proc.wait()
