"""Grade a model on a task without an agent (``agent2rl eval``).

The same code path as every score a run records (:func:`~agent2rl.grading.evaluator.
run_evaluation` in a child worker holding the per-device evaluation lock, so it queues behind
the runs' graders; the base model's end-of-sequence ids, as a run's baseline): the GPU smoke
test of an install, and how a user builds a baseline table across models.

Each evaluation gets ``<runs_dir>/evals/<eval_id>/``: ``request.json``, the worker's
``items.jsonl``, ``result.json`` (score, n_items, eval_hash) and ``eval.log``, and ``eval.json``
(the score with the 95% bootstrap interval of the scorer's declared metric).
"""

from __future__ import annotations

import re
import secrets
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from agent2rl.dataset import SPLITS, Split
from agent2rl.errors import UserError
from agent2rl.files import read_json, write_json_atomic
from agent2rl.grading.evaluator import EvalSpec, run_evaluation
from agent2rl.inference.backend import BackendConfig
from agent2rl.models.resolve import resolve_model
from agent2rl.orchestration.request import grading_backend
from agent2rl.scoring.metrics import metric_for
from agent2rl.settings import load_settings
from agent2rl.statistics import load_item_records, new_rng
from agent2rl.tasks import get_task


@dataclass(frozen=True)
class EvalRequest:
    """What ``agent2rl eval`` asks for. ``limit`` None grades every item of ``split``;
    ``timeout_s`` None is the task's own evaluation timeout (what a run's grader allows)."""

    task: str
    model: str
    split: str = "private"
    limit: int | None = None
    backend: BackendConfig = field(default_factory=BackendConfig)
    task_options: dict[str, str] = field(default_factory=dict)
    runs_dir: Path = Path("runs")
    out: Path | None = None
    timeout_s: float | None = None


@dataclass(frozen=True)
class EvalReport:
    """One finished evaluation: ``score`` is the task's score (0-100) and ``ci95`` its 95%
    bootstrap interval over the items (None without per-item scores)."""

    task: str
    model: str
    split: str
    score: float
    ci95: tuple[float, float] | None
    n_items: int
    seconds: float
    eval_hash: str
    backend: str
    out: Path
    #: every declared metric's value by name, the score's first (empty: none recorded)
    metrics: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        ci95 = list(self.ci95) if self.ci95 else None
        return asdict(self) | {"out": str(self.out), "ci95": ci95}


def new_eval_id(task: str, model: str) -> str:
    """``<UTC time>-<task>-<model>-<random>``: sortable by time, unique, a safe name."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", Path(model).name or model)[:40]
    return f"{stamp}-{task}-{safe}-{secrets.token_hex(3)}"


def evaluate_model(req: EvalRequest, on_step: Any = None) -> EvalReport:
    """Grade ``req.model`` on ``req.task`` into the evaluation's directory; returns the report.
    ``on_step`` (optional) gets a one-line description of each step as it starts. Raises
    :class:`UserError` for a bad request (unknown task, split or model, a split the task does
    not have, a backend that cannot run here) and when the evaluation fails (naming the
    failure, whose fault it was, and the log to read)."""
    step = on_step or (lambda _msg: None)
    # a request that cannot work, before anything is built
    if req.split not in SPLITS:
        raise UserError(f"unknown --split {req.split!r}: use one of {', '.join(SPLITS)}")
    if req.limit is not None and req.limit < 1:
        raise UserError(f"--limit {req.limit} must be at least 1 (leave it out for every item)")
    if req.timeout_s is not None and req.timeout_s <= 0:
        raise UserError("--timeout must be more than zero")
    req.backend.validate()
    settings = load_settings()
    task = get_task(req.task, req.task_options)
    split: Split = req.split  # type: ignore[assignment]  # checked above
    if task.splits is not None and split not in task.splits.files:
        have = ", ".join(task.splits.files)
        raise UserError(f"task {task.name} has no {split} split: use --split with one of {have}")
    step(f"resolving model {req.model}")
    model = resolve_model(req.model, settings.model_store)
    backend = grading_backend(req.backend, task, req.model, model.path)  # as a run's grader
    out = (req.out or req.runs_dir / "evals" / new_eval_id(task.name, req.model)).expanduser()
    if out.exists() and any(out.iterdir()):
        raise UserError(f"--out {out} is not empty: pass a new directory")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UserError(f"cannot create {out} ({err.strerror}): pass another --out") from None
    spec = EvalSpec(task.name, task.opts, backend, req.limit, split)
    write_json_atomic(
        out / "request.json",
        {"task": task.name, "model": req.model, "model_path": str(model.path), "split": split,
         "limit": req.limit, "backend": backend.to_dict(), "task_options": task.opts},
    )  # fmt: skip
    timeout_s = req.timeout_s or task.eval_timeout_s
    step(
        f"grading on the {split} split"
        + (f" (first {req.limit} items)" if req.limit else "")
        + f" with the {backend.resolved_kind()} backend (timeout {timeout_s:g}s)"
    )
    outcome = run_evaluation(spec, model.path, out, settings, timeout_s=timeout_s)
    if outcome.error:
        whose = "the model's fault" if outcome.failure == "model" else "not the model's fault"
        raise UserError(f"{outcome.error} ({whose}); see {out / 'eval.log'}")
    result = read_json(out / "result.json")
    items = load_item_records(out / "items.jsonl") or {}
    # the interval of the scorer's declared metric (the score is its value)
    metric = metric_for(out / "items.jsonl")
    ci = metric.interval(list(items.values()), new_rng()) if items and metric else None
    report = EvalReport(
        task=task.name,
        model=req.model,
        split=split,
        score=float(result["score"]),
        ci95=ci,
        n_items=int(result["n_items"]),
        seconds=float(result["seconds"]),
        eval_hash=str(result["eval_hash"]),
        backend=backend.resolved_kind(),
        out=out.resolve(),
        metrics=dict(result.get("metrics") or {}),
    )
    write_json_atomic(out / "eval.json", report.to_dict())
    return report
