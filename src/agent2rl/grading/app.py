"""The grading service's HTTP API (FastAPI), one instance per run.

Every endpoint but ``/health`` needs ``Authorization: Bearer <run token>``. Errors are 4xx
with a JSON body ``{"error": "..."}`` naming the fix; every refused submission attempt is
recorded in the ledger's ``rejections`` table. There is no endpoint that changes the
baseline, the clock or past results.

A submission's answer (and its row in ``GET /submissions``) says, besides the score:

- ``failure_kind`` for a failed evaluation: ``model`` (the submission's own fault, cached: the
  same files submitted again get the same failure as a duplicate) or ``harness`` (a timeout,
  an outage, the grader's own error: the same files submitted again are evaluated again, and
  that submission's ``retry_of`` names the failed one);
- ``identity``: whether the model derives from the base model (:mod:`agent2rl.integrity.
  identity`), with the reasons when it does not, and whether it brings its own chat template.
  The check runs before the evaluation and never changes the score.
"""

from __future__ import annotations

import hmac
import secrets
import shutil
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict
from starlette.exceptions import HTTPException as StarletteHTTPException

from agent2rl.grading.comparison import comparable, improvement
from agent2rl.grading.evaluator import EvalSpec, run_evaluation
from agent2rl.grading.ledger import Ledger, Submission
from agent2rl.grading.noise import compare_items, load_item_scores
from agent2rl.grading.submission import (
    SubmissionError,
    SubmissionLimits,
    precheck_submission,
    resolve_submission,
    stage_submission,
)
from agent2rl.integrity.identity import check_identity, identity_flags
from agent2rl.models.weights import model_fingerprint, weights_hash
from agent2rl.rundir import RunInfo, RunPaths
from agent2rl.settings import Settings


class SubmitRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    model_path: str


@dataclass
class GradingContext:
    """What the service needs to grade one run."""

    paths: RunPaths
    info: RunInfo
    token: str
    settings: Settings
    limits: SubmissionLimits
    eval_timeout_s: float
    base_model_dir: Path
    eval_spec: EvalSpec
    snapshot: Any = None  # callable(message) -> commit id, or None
    eval_lock: threading.Lock = field(default_factory=threading.Lock)


class _Refused(Exception):
    def __init__(self, status: int, message: str, path: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.path = status, message, path


def create_app(ctx: GradingContext) -> FastAPI:
    """Build the app for one run. The ledger must already hold the baseline."""
    app = FastAPI(title="agent2rl grading service", docs_url=None, redoc_url=None, openapi_url=None)
    ledger = Ledger(ctx.paths.ledger)
    baseline: dict = ledger.get_meta("baseline") or {}
    base_hash: str | None = ledger.get_meta("base_weights_hash")
    base_fingerprint: str | None = ledger.get_meta("base_fingerprint")
    base_items = (
        load_item_scores(ctx.paths.root / baseline["items_path"])
        if baseline.get("items_path")
        else None
    )
    noise_cache: dict[int, dict[str, Any]] = {}

    def noise(s: Submission) -> dict[str, Any]:
        """Intervals for a graded submission (cached: a graded row never changes). One graded
        under other settings than the baseline gets its score interval only."""
        if s.score is None or s.status != "graded":
            return {"score_ci95": None, "improvement_ci95": None, "within_noise": None}
        if s.id not in noise_cache:
            items = load_item_scores(ctx.paths.root / s.items_path) if s.items_path else None
            stats = compare_items(
                items, base_items, comparable=comparable(s.eval_hash, baseline.get("eval_hash"))
            )
            noise_cache[s.id] = {
                "score_ci95": stats.score_ci95,
                "improvement_ci95": stats.improvement_ci95,
                "within_noise": stats.within_noise,
            }
        return noise_cache[s.id]

    def authorize(request: Request, path: str | None = None) -> None:
        header = request.headers.get("authorization", "")
        scheme, _, given = header.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip(), ctx.token):
            raise _Refused(
                401,
                "missing or wrong token: send the header 'Authorization: Bearer $GRADING_TOKEN'",
                path,
            )

    @app.exception_handler(_Refused)
    async def _refused(request: Request, exc: _Refused) -> JSONResponse:
        if request.url.path == "/submit":
            ledger.add_rejection(exc.path, exc.status, exc.message)
        return JSONResponse({"error": exc.message}, status_code=exc.status)

    @app.exception_handler(RequestValidationError)
    async def _bad_body(request: Request, exc: RequestValidationError) -> JSONResponse:
        msg = (
            'request body must be JSON like {"model_path": "output/v1"} with the header '
            "Content-Type: application/json"
        )
        if request.url.path == "/submit":
            ledger.add_rejection(None, 400, msg)
        return JSONResponse({"error": msg}, status_code=400)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return JSONResponse({"error": str(exc.detail)}, status_code=exc.status_code)

    def deadline() -> float | None:
        # The orchestrator starts the clock only after this service is up: re-read run.json
        # until the deadline is set (a file read per request before the run starts).
        if ctx.info.deadline is None:
            ctx.info = RunInfo.load(ctx.paths)
        return ctx.info.deadline

    def remaining() -> float:
        end = deadline()
        return max(0.0, end - time.time()) if end is not None else 0.0

    def public_view(s: Submission) -> dict[str, Any]:
        same_settings = comparable(s.eval_hash, baseline.get("eval_hash"))
        # Never per-item results: predictions next to targets would leak the test set. The
        # intervals are bootstrap statistics over items, which reveal no single item.
        return {
            "submission_id": s.id,
            "submitted_at": s.submitted_at,
            "path": s.path,
            "status": s.status,
            "score": s.score,
            "improvement": improvement(s.score, baseline.get("score"), same_settings),
            **noise(s),
            "is_copy": s.is_copy,
            "duplicate_of": s.duplicate_of,
            "error": s.error,
            "failure_kind": s.failure_kind,
            "retry_of": s.retry_of,
            "eval_seconds": s.eval_seconds,
            "eval_hash": s.eval_hash,
            "identity": identity_flags(s.identity),
        }

    @app.get("/health")
    def health() -> dict[str, Any]:
        return {"status": "ok", "task": ctx.info.task}

    @app.get("/time")
    def get_time(request: Request) -> dict[str, Any]:
        authorize(request)
        end = deadline()
        return {
            "start": ctx.info.start,
            "deadline": end,
            "now": time.time(),
            "remaining_s": remaining(),
            "budget_s": ctx.info.budget_s,
        }

    @app.get("/submissions")
    def list_submissions(request: Request) -> dict[str, Any]:
        authorize(request)
        subs = ledger.submissions()
        best = ledger.best()
        return {
            "baseline": baseline.get("score"),
            "best_score": best.score if best else None,
            "submissions": [public_view(s) for s in subs],
        }

    @app.post("/submit")
    def submit(req: SubmitRequest, request: Request) -> dict[str, Any]:
        authorize(request, req.model_path)
        end = deadline()
        if end is None:
            raise _Refused(
                409, "the run has not started yet: try again in a moment", req.model_path
            )
        if time.time() > end:
            raise _Refused(
                409, "the budget is over: no more submissions are graded", req.model_path
            )
        staging = ctx.paths.grading / "staging" / secrets.token_hex(8)
        try:
            model_dir = resolve_submission(req.model_path, ctx.paths.workspace)
            precheck_submission(model_dir)
            roots = [ctx.paths.output.resolve(), ctx.base_model_dir.resolve()]
            stage_submission(model_dir, staging, roots, ctx.limits)
        except SubmissionError as err:
            raise _Refused(err.status, str(err), req.model_path) from None
        rel = str(model_dir.relative_to(ctx.paths.workspace.resolve()))
        snapshot = ctx.snapshot(f"submission: {rel}") if ctx.snapshot else None
        sub_id = ledger.add_submission(rel, None, None, snapshot)
        copy = ctx.paths.submission_dir(sub_id) / "model"
        copy.parent.mkdir(parents=True, exist_ok=True)
        staging.rename(copy)
        with ctx.eval_lock:  # one evaluation at a time for this run
            _grade(sub_id, copy)
        s = ledger.submission(sub_id)
        best = ledger.best()
        return {
            **public_view(s),
            "baseline": baseline.get("score"),
            "best_score": best.score if best else None,
            "best_submission_id": best.id if best else None,
            "submissions": len(ledger.submissions()),
            "remaining_s": remaining(),
        }

    def _grade(sub_id: int, copy: Path) -> None:
        """Hash, de-duplicate, check identity, evaluate the private copy; leaves the row
        graded or failed (with whose fault it was)."""
        sub_dir = ctx.paths.submission_dir(sub_id)
        try:
            digest = weights_hash(copy)
            fingerprint = model_fingerprint(copy, digest)
        except (OSError, ValueError) as err:
            ledger.update_submission(
                sub_id,
                status="failed",
                finished_at=time.time(),
                error=f"could not read the submission: {err}",
                # Malformed safetensors are the model's; an I/O error on our copy is ours.
                failure_kind="model" if isinstance(err, ValueError) else "harness",
            )
            return
        is_copy = bool(base_hash) and digest == base_hash
        ledger.update_submission(
            sub_id, weights_hash=digest, fingerprint=fingerprint, is_copy=is_copy
        )
        if is_copy and fingerprint == base_fingerprint:  # the base model itself: its baseline
            identity = check_identity(copy, ctx.base_model_dir).to_dict()
            shutil.rmtree(copy, ignore_errors=True)
            ledger.update_submission(
                sub_id,
                identity=identity,
                status="graded",
                is_copy=True,
                score=baseline.get("score"),
                n_items=baseline.get("n_items"),
                items_path=baseline.get("items_path"),
                eval_seconds=0.0,
                eval_hash=baseline.get("eval_hash"),
                finished_at=time.time(),
            )
            return
        earlier = ledger.graded_with_fingerprint(fingerprint)
        if earlier is not None and earlier.id != sub_id:  # same files: same outcome
            shutil.rmtree(copy, ignore_errors=True)
            ledger.update_submission(
                sub_id,
                status=earlier.status,
                duplicate_of=earlier.id,
                score=earlier.score,
                n_items=earlier.n_items,
                items_path=earlier.items_path,
                eval_seconds=0.0,
                eval_hash=earlier.eval_hash,
                error=earlier.error,
                failure_kind=earlier.failure_kind,
                identity=earlier.identity,
                finished_at=time.time(),
            )
            return
        # Before the weights copy is deleted; a report, never a change to the score.
        ledger.update_submission(
            sub_id, identity=check_identity(copy, ctx.base_model_dir).to_dict()
        )
        # The same files failed before through no fault of their own: evaluate them again.
        retried = ledger.retryable_failure(fingerprint)
        outcome = run_evaluation(
            ctx.eval_spec, copy, sub_dir, ctx.settings, timeout_s=ctx.eval_timeout_s
        )
        # The weights copy is only needed while evaluating; keep config for the record.
        for f in copy.glob("*.safetensors"):
            f.unlink(missing_ok=True)
        items = str(outcome.items_path.relative_to(ctx.paths.root)) if outcome.items_path else None
        ledger.update_submission(
            sub_id,
            status="graded" if outcome.error is None else "failed",
            score=outcome.score,
            n_items=outcome.n_items,
            items_path=items,
            eval_seconds=outcome.seconds,
            eval_hash=outcome.eval_hash,
            error=outcome.error,
            failure_kind=outcome.failure if outcome.error is not None else None,
            retry_of=retried.id if retried is not None else None,
            finished_at=time.time(),
        )

    return app
