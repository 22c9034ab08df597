"""The grading service's HTTP API (FastAPI), one instance per run.

Every endpoint but ``/health`` needs ``Authorization: Bearer <run token>``. Errors are 4xx
with a JSON body ``{"error": "..."}`` naming the fix (507 when the grader's own disk is too full
to copy a submission; a JSON 500 only for a bug of the service itself). Every refused
submission attempt is recorded in the ledger's ``rejections`` table, at most
:attr:`GradingContext.rejections_per_minute` of them per minute: past that a refusal is
answered 429 and only counted (meta ``rejections_unrecorded``), so a flood of bad requests
cannot grow the ledger without bound. There is no endpoint that changes the baseline, the
clock or past results.

:class:`GradingService` holds one run's grading state, its methods callable without HTTP;
:func:`create_app` only declares the routes that call them. ``POST /submit`` is one
:class:`~agent2rl.grading.submission.SubmissionPipeline`, so that no submission can vanish.
The clock is told (:mod:`agent2rl.grading.service`): until then every submission is refused
"the run has not started yet". Stopped (SIGTERM), the service kills its evaluation worker at
once and ends its unsettled rows ``failed``/``harness`` (:meth:`GradingService.close`).

A submission's answer is its ledger row's public part (:meth:`GradingService.public_view`).
Under the ``validation`` protocol (:mod:`agent2rl.grading.final`) every score, baseline and
interval answered is on the validation split, and the answers name ``final_submission_id``;
under ``private``, ``POST /final`` and ``"final": true`` are refused (409/400).
"""

from __future__ import annotations

import math
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool

from agent2rl.grading.comparison import comparable, improvement
from agent2rl.grading.evaluator import EvalSpec, EvalWorkers, WarmWorker
from agent2rl.grading.final import (
    FEEDBACK_PROTOCOLS,
    kept_ids,
    marked_final,
    prune_weights,
    select_final,
    weights_kept,
)
from agent2rl.grading.ledger import Ledger, Submission, SubmissionStatus
from agent2rl.grading.submission import (
    RUN_ENDED,
    SubmissionError,
    SubmissionLimits,
    SubmissionPipeline,
    capped,
)
from agent2rl.http_api import BodyLimit, Refused, error, install_errors, require_bearer
from agent2rl.integrity.identity import identity_flags
from agent2rl.rundir import RunInfo, RunPaths
from agent2rl.scoring.metrics import metric_for
from agent2rl.settings import Settings
from agent2rl.statistics import Intervals, compare_items, load_item_records

#: The longest ``model_path`` accepted; a longer one is a malformed request (400).
MAX_MODEL_PATH_CHARS = 4096
#: The largest request body read; a larger one is refused (413) before it is parsed.
MAX_BODY_BYTES = 64 * 1024
#: The answer to a malformed body.
BAD_BODY = (
    'request body must be JSON like {"model_path": "output/v1"} with the header '
    f"Content-Type: application/json (a path of at most {MAX_MODEL_PATH_CHARS} characters)"
)

#: The fields of :class:`~agent2rl.statistics.Intervals` a submission's answer carries.
NOISE_FIELDS = ("score_ci95", "improvement_ci95", "within_noise")


class SubmitRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    model_path: str = Field(max_length=MAX_MODEL_PATH_CHARS)
    #: ``validation`` protocol only: mark this submission final once it is graded
    final: bool = False


class FinalRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    submission_id: int


@dataclass
class GradingContext:
    """What the service needs to grade one run.

    ``eval_lock_wait_s``, ``eval_timeout_s``: :func:`run_evaluation`'s two clocks (None: its
    default wait for the device).
    ``staging_slots``: submissions copied at once. ``disk_margin_bytes``: free space the
    grader's disk must keep beyond a submission's size for it to be copied.
    ``rejections_per_minute``: refusals stored row by row in any minute (the rest: 429).
    ``grader``: ``warm`` evaluates every submission in one long-lived worker that keeps the
    task and the model loaded (:class:`~agent2rl.grading.evaluator.WarmWorker`; same files,
    scores and failure kinds as a cold one), ``cold`` starts a fresh process per submission.
    ``feedback``: ``private`` grades on ``eval_spec``'s split, ``validation`` on the validation
    split (:mod:`agent2rl.grading.final`).
    """

    paths: RunPaths
    info: RunInfo
    token: str
    settings: Settings
    limits: SubmissionLimits
    eval_timeout_s: float
    base_model_dir: Path
    eval_spec: EvalSpec
    snapshot: Any = None  # callable(message) -> commit id, or None
    eval_lock_wait_s: float | None = None
    staging_slots: int = 1
    disk_margin_bytes: int = 256 * 2**20
    rejections_per_minute: int = 120
    submit_threads: int = 64
    eval_lock: threading.Lock = field(default_factory=threading.Lock)
    workers: EvalWorkers = field(default_factory=EvalWorkers)
    grader: str = "warm"
    feedback: str = "private"


class RejectionLimiter:
    """At most ``per_minute`` refusals stored in any 60 s window (a sliding window);
    thread-safe. ``unrecorded`` counts the refusals it turned away."""

    def __init__(self, per_minute: int) -> None:
        self.per_minute = per_minute
        self._stored: deque[float] = deque()
        self._lock = threading.Lock()
        self.unrecorded = 0

    def admit(self) -> bool:
        """True if this refusal may be stored (and counts it), False if over the limit."""
        now = time.monotonic()
        with self._lock:
            while self._stored and self._stored[0] <= now - 60.0:
                self._stored.popleft()
            if len(self._stored) >= self.per_minute:
                self.unrecorded += 1
                return False
            self._stored.append(now)
            return True


class GradingService:
    """One run's grading: one public method per endpoint; a refusal raises
    :class:`~agent2rl.grading.submission.SubmissionError` (:meth:`record_refusal` stores a
    refused ``/submit``). Built from a ledger that already holds the baseline (and, under the
    ``validation`` protocol, the validation baseline): a ``ValueError`` otherwise, or for an
    unknown ``feedback`` or ``grader``."""

    def __init__(self, ctx: GradingContext) -> None:
        if ctx.feedback not in FEEDBACK_PROTOCOLS:
            raise ValueError(f"feedback must be one of {FEEDBACK_PROTOCOLS}, not {ctx.feedback!r}")
        if ctx.grader not in ("warm", "cold"):
            raise ValueError(f"grader must be warm or cold, not {ctx.grader!r}")
        self.ctx, self.ledger = ctx, Ledger(ctx.paths.ledger)
        self.validation = ctx.feedback == "validation"
        if self.validation:
            # Every score the agent is answered is on the validation split, its baseline too.
            ctx.eval_spec = replace(ctx.eval_spec, split="validation")
            if not self.ledger.get_meta("validation_baseline"):
                raise ValueError("the validation protocol needs the ledger's validation_baseline")
            self.ledger.set_meta("feedback", "validation")
        key = "validation_baseline" if self.validation else "baseline"
        self.baseline: dict[str, Any] = self.ledger.get_meta(key) or {}
        items = self.baseline.get("items_path")
        self.base_items = load_item_records(ctx.paths.root / items) if items else None
        self.noise_cache: dict[int, dict[str, Any]] = {}
        self.limiter = RejectionLimiter(ctx.rejections_per_minute)
        self.unrecorded_saved = (0.0, 0)  # when and what was last written to meta
        self.meta_lock = threading.Lock()
        self.keep_lock = threading.Lock()  # marking final and pruning kept weights, one at a time
        self.answering: set[int] = set()  # rows whose /submit has not answered yet
        warm_log = ctx.paths.root / "grading" / "warm_worker.log"
        self.warm = WarmWorker(ctx.settings, warm_log) if ctx.grader == "warm" else None
        self.pipeline = SubmissionPipeline(ctx, self.ledger, self.baseline, self.warm)
        # run.json's clock, for a service restarted on a running run; then only tell_clock
        self.start, self.deadline = ctx.info.start, ctx.info.deadline

    # -- the clock

    def tell_clock(self, start: float, deadline: float) -> None:
        """The run's clock, as the orchestrator starts it (the service's only source after
        its start; ``/time`` and every deadline check use it from now on)."""
        self.start, self.deadline = start, deadline

    def remaining(self) -> float:
        """Seconds left of the budget; 0 before the clock is told and after the deadline."""
        return max(0.0, self.deadline - time.time()) if self.deadline is not None else 0.0

    def time_view(self) -> dict[str, Any]:
        """``GET /time``: start, deadline (None until told), now, time left, budget."""
        return {
            "start": self.start,
            "deadline": self.deadline,
            "now": time.time(),
            "remaining_s": self.remaining(),
            "budget_s": self.ctx.info.budget_s,
        }

    # -- what the agent is told

    def noise(self, s: Submission) -> dict[str, Any]:
        """Intervals for a graded submission (cached: a graded row never changes). One graded
        under other settings than the baseline gets its score interval only."""
        if s.score is None or s.status != SubmissionStatus.GRADED:
            return dict.fromkeys(NOISE_FIELDS)
        if s.id not in self.noise_cache:
            path = self.ctx.paths.root / s.items_path if s.items_path else None
            items = load_item_records(path) if path else None
            # the scorer's declared metric gives the intervals (None: not registered here)
            metric = metric_for(path)
            same = comparable(s.eval_hash, self.baseline.get("eval_hash"))
            stats = (
                compare_items(items, self.base_items, comparable=same, metric=metric)
                if metric is not None
                else Intervals()
            )
            self.noise_cache[s.id] = {name: getattr(stats, name) for name in NOISE_FIELDS}
        return self.noise_cache[s.id]

    def public_view(self, s: Submission) -> dict[str, Any]:
        """One submission as the agent sees it. Never per-item results: predictions next to
        targets would leak the test set. The intervals are bootstrap statistics over items,
        which reveal no single item."""
        same_settings = comparable(s.eval_hash, self.baseline.get("eval_hash"))
        return {
            "submission_id": s.id,
            "submitted_at": s.submitted_at,
            "path": s.path,
            "status": s.status,
            "score": s.score,
            "improvement": improvement(s.score, self.baseline.get("score"), same_settings),
            **self.noise(s),
            "is_copy": s.is_copy,
            "duplicate_of": s.duplicate_of,
            "error": s.error,
            "failure_kind": s.failure_kind,
            "retry_of": s.retry_of,
            "eval_seconds": coarse_seconds(s.eval_seconds),
            "eval_hash": s.eval_hash,
            "identity": identity_flags(s.identity),
            "split": s.score_split,
        }

    def protocol_view(self) -> dict[str, Any]:
        """What every listing says about the protocol: the split of the scores and, under
        ``validation``, the submission the run's end will grade on the private split."""
        split = self.ctx.eval_spec.split
        if not self.validation:
            return {"feedback": "private", "split": split}
        chosen, how = select_final(self.ledger.submissions(), marked_final(self.ledger))
        return {
            "feedback": "validation",
            "split": split,
            "final_submission_id": chosen.id if chosen else None,
            "final_selected_by": how,
        }

    def submissions_view(self) -> dict[str, Any]:
        """``GET /submissions``: the baseline, the best score, the protocol, every row."""
        best = self.ledger.best()
        return {
            "baseline": self.baseline.get("score"),
            "best_score": best.score if best else None,
            **self.protocol_view(),
            "submissions": [self.public_view(s) for s in self.ledger.submissions()],
        }

    # -- refusals

    def record_refusal(
        self, path: str | None, status: int, message: str, sub_id: int | None = None
    ) -> tuple[int, str]:
        """Store one refused /submit attempt (withdrawing its row, if it had one) unless over
        the rate limit; returns the status and message to answer (429 over the limit)."""
        admitted = self.limiter.admit()
        if sub_id is not None:
            self.ledger.withdraw_submission(sub_id, (path, status, message) if admitted else None)
            self.pipeline.recorded.discard(sub_id)
        elif admitted:
            self.ledger.add_rejection(path, status, message)
        if admitted:
            return status, message
        self._save_unrecorded()
        return 429, (
            f"too many refused requests (over {self.limiter.per_minute} a minute): wait a minute "
            f"before retrying. This request was refused too: {message}"
        )

    def _save_unrecorded(self, force: bool = False) -> None:
        # At most once a second: a flood of refusals must not become a flood of writes.
        with self.meta_lock:
            n, now = self.limiter.unrecorded, time.monotonic()
            last, saved = self.unrecorded_saved
            if n != saved and (force or now - last >= 1.0):
                self.unrecorded_saved = (now, n)
                self.ledger.set_meta("rejections_unrecorded", n)

    # -- submitting and marking final

    def submit(self, model_path: str, final: bool = False) -> dict[str, Any]:
        """``POST /submit``: grade ``model_path`` (blocking) and answer its row, the best so
        far and the protocol. Refused (409) before the clock is told and after the deadline;
        ``final`` only under the validation protocol (400)."""
        if final and not self.validation:
            raise SubmissionError(
                '"final" is only for runs with the validation feedback protocol: this run\'s '
                "result is its best submission; submit without it",
                400,
                model_path,
            )
        if self.deadline is None:
            raise SubmissionError(
                "the run has not started yet: try again in a moment", 409, model_path
            )
        if time.time() > self.deadline:
            raise SubmissionError(
                "the budget is over: no more submissions are graded", 409, model_path
            )
        rows: list[int] = []  # the row, once recorded: it keeps its weights until answered

        def recorded(sub_id: int) -> None:
            rows.append(sub_id)
            self.answering.add(sub_id)

        try:
            return self._answer(self.pipeline.run(model_path, recorded), final)
        finally:
            self.answering.difference_update(rows)

    def _answer(self, sub_id: int, final: bool) -> dict[str, Any]:
        s = self.ledger.submission(sub_id)
        assert s is not None  # a settled row is never withdrawn
        marked = None
        if self.validation:
            with self.keep_lock:
                if final and s.valid:
                    marked = self._mark(sub_id)
                self._prune(answered=sub_id)
        best = self.ledger.best()
        return {
            **self.public_view(s),
            "baseline": self.baseline.get("score"),
            "best_score": best.score if best else None,
            "best_submission_id": best.id if best else None,
            "submissions": len(self.ledger.submissions()),
            "remaining_s": self.remaining(),
            **self.protocol_view(),
            **({"marked_final": marked} if final else {}),
        }

    def mark_final(self, sub_id: int) -> dict[str, Any]:
        """``POST /final``: mark ``sub_id`` final (validation protocol); 409 when it cannot be
        graded at the end (not graded, its weights dropped, the budget over), 404 unknown."""
        if not self.validation:
            raise SubmissionError(
                "this run uses the private feedback protocol: its result is its best "
                "submission, there is nothing to mark final",
                409,
            )
        if self.deadline is not None and time.time() > self.deadline:
            raise SubmissionError(
                "the budget is over: the final submission can no longer change", 409
            )
        with self.keep_lock:
            s = self.ledger.submission(sub_id)
            if s is None:
                raise SubmissionError(f"no submission {sub_id}: see GET /submissions", 404)
            if not s.valid:
                raise SubmissionError(
                    f"submission {sub_id} is {s.status}, not graded: only a graded submission "
                    "can be final",
                    409,
                )
            if not weights_kept(self.ctx.paths, sub_id):
                raise SubmissionError(
                    f"submission {sub_id}'s weights were not kept (only the best on validation "
                    "and the one marked final are): submit the same directory again with "
                    '"final": true',
                    409,
                )
            self._mark(sub_id)
            self._prune()
        return {"marked_final": sub_id, **self.protocol_view()}

    def _mark(self, sub_id: int) -> int:
        self.ledger.set_meta("marked_final", {"submission_id": sub_id, "at": time.time()})
        return sub_id

    def _prune(self, answered: int | None = None) -> None:
        """Drop the weights of every private copy that can no longer be selected (under
        ``keep_lock``); ``answered``: the row whose /submit is answering now."""
        subs = self.ledger.submissions()
        # A row whose /submit has not answered yet keeps its weights: it may still be marked.
        keep = kept_ids(subs, marked_final(self.ledger)) | (self.answering - {answered})
        prune_weights(self.ctx.paths, subs, keep)

    def close(self) -> None:
        """The service's stop: kill the evaluation worker, settle this service's unsettled
        rows as the run's end, save the count of unrecorded refusals."""
        self.ctx.workers.stop()
        if self.warm is not None:
            self.warm.close(self.ctx.workers)
        closed = self.ledger.fail_unfinished(RUN_ENDED, ids=sorted(self.pipeline.recorded.copy()))
        if closed:
            print(
                f"grading service stopping: {len(closed)} unsettled row(s) failed", file=sys.stderr
            )
        self._save_unrecorded(force=True)


def create_app(service: GradingService) -> FastAPI:
    """The HTTP API of ``service`` (the module docstring): routes that call its methods."""
    ctx = service.ctx
    threads: dict[str, anyio.CapacityLimiter] = {}

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # Submissions get their own threads: a queue of them waiting for the evaluation
        # must not take every thread that status polls are answered from.
        threads["submit"] = anyio.CapacityLimiter(ctx.submit_threads)
        restore = _on_sigterm(ctx.workers.stop)
        try:
            yield
        finally:
            ctx.workers.stop()  # at once, not when a thread is free for close()
            await run_in_threadpool(service.close)
            restore()

    app = FastAPI(
        title="agent2rl grading service",
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
        lifespan=lifespan,
    )
    _install_refusals(app, service)

    def authorize(request: Request) -> None:
        require_bearer(request, ctx.token, "GRADING_TOKEN")

    authorized = [Depends(authorize)]

    @app.get("/health")
    def health() -> dict[str, Any]:
        return {"status": "ok", "task": ctx.info.task}

    app.get("/time", dependencies=authorized)(service.time_view)
    app.get("/submissions", dependencies=authorized)(service.submissions_view)

    @app.post("/final")  # the token checked after the body, as for /submit
    def mark_final(req: FinalRequest, request: Request) -> dict[str, Any]:
        authorize(request)
        return service.mark_final(req.submission_id)

    @app.post("/submit")
    async def submit(req: SubmitRequest, request: Request) -> dict[str, Any]:
        try:
            authorize(request)
        except Refused as refused:  # recorded with the path it was for
            raise SubmissionError(refused.message, refused.status, req.model_path) from None
        return await anyio.to_thread.run_sync(
            service.submit, req.model_path, req.final, limiter=threads.get("submit")
        )

    return app


def _install_refusals(app: FastAPI, service: GradingService) -> None:
    """JSON errors for ``app``, and every refused ``/submit`` (a refusal, a malformed or
    oversized body) recorded through :meth:`GradingService.record_refusal`."""

    async def recorded(
        route: str | None,
        status: int,
        message: str,
        path: str | None = None,
        sub_id: int | None = None,
    ) -> tuple[int, str]:
        """The answer to a refusal on ``route``: a refused ``/submit`` is recorded (its
        ``path`` and withdrawn row ``sub_id``, if any), or turned into a 429 over the limit."""
        if route != "/submit":
            return status, message
        return await run_in_threadpool(service.record_refusal, path, status, message, sub_id)

    app.add_middleware(
        BodyLimit,
        limit=MAX_BODY_BYTES,
        message="send only the JSON {model_path: ...}",
        on_refusal=recorded,
    )

    async def refused(request: Request, exc: Refused) -> JSONResponse:
        path, sub_id = capped(getattr(exc, "path", None)), getattr(exc, "sub_id", None)
        return error(*await recorded(request.url.path, exc.status, exc.message, path, sub_id))

    async def bad_body(request: Request) -> JSONResponse:
        return error(*await recorded(request.url.path, 400, BAD_BODY))

    install_errors(app, "grading service", bad_body=bad_body, on_refused=refused)


#: The grain of the evaluation time the API answers (see :func:`coarse_seconds`).
EVAL_SECONDS_GRAIN = 60


def coarse_seconds(seconds: float | None) -> float | None:
    """An evaluation's time as the agent is told it: rounded up to a whole
    :data:`EVAL_SECONDS_GRAIN` (0 and None as they are: settled without an evaluation, or not
    yet). A chat template or tokenizer that burns time on some private prompts must not be
    timed to the second by its submission's answer; the ledger keeps the exact figure."""
    if not seconds:
        return seconds
    return float(math.ceil(seconds / EVAL_SECONDS_GRAIN) * EVAL_SECONDS_GRAIN)


def _on_sigterm(stop: Any) -> Any:
    """Call ``stop()`` first thing on SIGTERM, then the handler already installed (uvicorn's
    graceful shutdown). Returns the function that puts the previous handler back. Off the
    main thread (no signals there) it does nothing."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous = signal.getsignal(signal.SIGTERM)

    def handler(sig: int, frame: Any) -> None:
        stop()  # kill the evaluation worker now, not after the graceful wait
        if callable(previous):
            previous(sig, frame)

    signal.signal(signal.SIGTERM, handler)
    return lambda: signal.signal(signal.SIGTERM, previous)
