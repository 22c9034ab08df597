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
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from agent2rl.inference.backend import BackendConfig
from agent2rl.settings import Settings


@dataclass(frozen=True)
class EvalSpec:
    """What a model is evaluated on and how; one per run, shared by the baseline and every
    submission so that their scores stay comparable.

    ``task_options`` are the task's ``--task-opt`` values; ``limit`` grades only the first
    items (quick checks; an official run never sets it).
    """

    task: str
    task_options: dict[str, Any] = field(default_factory=dict)
    backend: BackendConfig = field(default_factory=BackendConfig)
    limit: int | None = None

    def to_json(self) -> str:
        return json.dumps(
            {
                "task": self.task,
                "task_options": self.task_options,
                "backend": self.backend.to_dict(),
                "limit": self.limit,
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


def run_evaluation(
    spec: EvalSpec,
    model_dir: Path,
    out: Path,
    settings: Settings,
    timeout_s: float,
    log_path: Path | None = None,
) -> EvalOutcome:
    """Evaluate ``model_dir`` as ``spec`` says in a child process; results land in ``out``.

    The child runs in its own session; on timeout the whole process group gets SIGKILL and
    the outcome carries an error. The child's output is appended to ``log_path``.

    A failure is ``model`` only when the worker said so in ``error.json`` (see
    :func:`agent2rl.grading.worker.failure_kind`); a timeout, a signal, or an exit without
    ``error.json`` (or with an unknown kind in it) is ``harness``.
    """
    out.mkdir(parents=True, exist_ok=True)
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
    log = open(log_path or out / "eval.log", "ab")  # noqa: SIM115 - closed below
    started = time.time()
    env = {
        "OMP_WAIT_POLICY": "PASSIVE",
        **os.environ,
        "TOKENIZERS_PARALLELISM": "false",
        "HF_HUB_OFFLINE": "1",
    }
    proc = subprocess.Popen(
        cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env
    )
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        return EvalOutcome(
            None,
            None,
            None,
            time.time() - started,
            None,
            f"evaluation timed out after {timeout_s:g}s",
            "harness",
        )
    finally:
        log.close()
    seconds = time.time() - started
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


def _read_error(path: Path) -> dict[str, Any]:
    """The worker's ``error.json``; a torn or odd one reads as a harness failure."""
    try:
        report = json.loads(path.read_text())
    except (OSError, ValueError):
        return {"error": "unreadable error.json", "failure": "harness"}
    return report if isinstance(report, dict) else {"failure": "harness"}


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()
