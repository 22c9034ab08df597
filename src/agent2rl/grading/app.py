"""The grading service's HTTP API (FastAPI), one instance per run.

Every endpoint but ``/health`` needs ``Authorization: Bearer <run token>``. Errors are 4xx
with a JSON body ``{"error": "..."}`` naming the fix (507 when the grader's own disk is too full
to copy a submission; a JSON 500 only for a bug of the service itself). Every refused
submission attempt is recorded in the ledger's ``rejections`` table, at most
:attr:`GradingContext.rejections_per_minute` of them per minute: past that a refusal is
answered 429 and only counted (meta ``rejections_unrecorded``), so a flood of bad requests
cannot grow the ledger without bound. There is no endpoint that changes the baseline, the
clock or past results.

A submission's life (``POST /submit``), so that none can vanish:

1. **record**: right after the token and the clock are checked, its ledger row is created
   (status ``evaluating``), before anything slow; the run's end waits for such rows.
2. **check and stage**: the path and files are checked, the code snapshot is taken (a
   snapshot failure is logged in meta ``snapshot_errors`` and never fails the submission),
   and the files the model needs are copied into ``grading/submissions/<id>/model``, one
   staging at a time, and only when the grader's disk has room for them plus
   :attr:`GradingContext.disk_margin_bytes`. A refusal here (bad files, too big, no room, a
   full disk) *withdraws* the row: in one transaction it is deleted and a rejection recorded,
   and the agent gets the 4xx/507; a refused attempt is never a submission.
3. **grade**: hashed, de-duplicated (the same files are evaluated once: a duplicate of a
   graded row is settled at once, without queueing), identity-checked and evaluated, one
   evaluation at a time per run. Whatever goes wrong ends the row ``failed`` with a reason
   (``harness`` for the grader's own errors); no row is left ``evaluating`` by an exception.

When the service is stopped (SIGTERM) it kills its running evaluation worker at once (the
worker also dies with the service on SIGKILL, :func:`agent2rl.grading.evaluator.run_evaluation`),
and every row it created that is not settled ends ``failed``/``harness`` saying the run ended
before it was graded.

A submission's answer (and its row in ``GET /submissions``) says, besides the score:

- ``failure_kind`` for a failed evaluation: ``model`` (the submission's own fault, cached: the
  same files submitted again get the same failure as a duplicate) or ``harness`` (a timeout,
  an outage, the grader's own error: the same files submitted again are evaluated again, and
  that submission's ``retry_of`` names the failed one);
- ``identity``: whether the model derives from the base model (:mod:`agent2rl.integrity.
  identity`), with the reasons when it does not, and whether it brings its own chat template.
  The check runs before the evaluation and never changes the score;
- ``split``: the split its score is on.

Under the ``validation`` feedback protocol (:mod:`agent2rl.grading.final`) every submission
is graded on the validation split and every score, baseline and interval the API answers is
a validation-split one (the private split is never graded while the service runs); the
answers also name ``final_submission_id``, the submission the run's end will grade on the
private split as things stand. ``POST /final {"submission_id": N}`` (or ``"final": true``
in ``POST /submit``) marks a graded submission final. Under the ``private`` protocol both
are refused (400/409): the run's result is its best submission.
"""

from __future__ import annotations

import errno
import math
import shutil
import signal
import sys
import threading
import time
import traceback
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool

from agent2rl.grading.comparison import comparable, improvement
from agent2rl.grading.evaluator import EvalSpec, EvalWorkers, WarmWorker, run_evaluation
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
    SubmissionError,
    SubmissionLimits,
    check_declared_size,
    needed_files,
    precheck_submission,
    resolve_submission,
    stage_submission,
)
from agent2rl.http_api import BodyLimit, Refused, error, install_errors, require_bearer
from agent2rl.integrity.identity import check_identity, identity_flags
from agent2rl.models.weights import model_fingerprint, weights_hash
from agent2rl.rundir import RunInfo, RunPaths
from agent2rl.scoring.metrics import metric_for
from agent2rl.settings import Settings
from agent2rl.statistics import Intervals, compare_items, load_item_records

#: The longest ``model_path`` accepted; a longer one is a malformed request (400).
MAX_MODEL_PATH_CHARS = 4096
#: The largest request body read; a larger one is refused (413) before it is parsed.
MAX_BODY_BYTES = 64 * 1024
#: The reason of every row the run's end (or a stopping service) leaves unsettled.
RUN_ENDED = (
    "the run ended before this submission was graded (the grading service stopped): "
    "not the model's fault"
)


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

    ``eval_lock_wait_s``: how long an evaluation may wait for its device (held by other
    runs) before it fails as ``harness``; None: :func:`run_evaluation`'s default. The
    ``eval_timeout_s`` clock starts only once the device is held.
    ``staging_slots``: submissions copied at once. ``disk_margin_bytes``: free space the
    grader's disk must keep beyond a submission's size for it to be copied.
    ``rejections_per_minute``: refusals stored row by row in any minute (the rest: 429).
    ``grader``: ``warm`` evaluates every submission in one long-lived worker that keeps the
    task and the model loaded (:class:`~agent2rl.grading.evaluator.WarmWorker`; same files,
    scores and failure kinds as a cold one), ``cold`` starts a fresh process per submission.
    ``feedback``: ``private`` grades on ``eval_spec``'s split (the private one) and answers
    that score; ``validation`` grades every submission on the validation split instead,
    against the ledger's ``validation_baseline`` (:mod:`agent2rl.grading.final`).
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


class _Refused(Refused):
    """A refused request; ``path`` is the submitted path (recorded with a refused /submit),
    ``sub_id`` the row to withdraw when the refusal came after the submission was recorded."""

    def __init__(
        self, status: int, message: str, path: str | None = None, sub_id: int | None = None
    ) -> None:
        super().__init__(status, message)
        self.path, self.sub_id = path, sub_id


class RejectionLimiter:
    """At most ``per_minute`` refusals stored in any 60 s window (a sliding window);
    thread-safe. ``unrecorded`` counts the refusals it turned away."""

    def __init__(self, per_minute: int, window_s: float = 60.0) -> None:
        self.per_minute, self.window_s = per_minute, window_s
        self._stored: deque[float] = deque()
        self._lock = threading.Lock()
        self.unrecorded = 0

    def admit(self, now: float | None = None) -> bool:
        """True if this refusal may be stored (and counts it), False if over the limit."""
        now = time.monotonic() if now is None else now
        with self._lock:
            while self._stored and self._stored[0] <= now - self.window_s:
                self._stored.popleft()
            if len(self._stored) >= self.per_minute:
                self.unrecorded += 1
                return False
            self._stored.append(now)
            return True


def create_app(ctx: GradingContext) -> FastAPI:
    """Build the app for one run. The ledger must already hold the baseline (and, under the
    ``validation`` protocol, the validation baseline: a ``ValueError`` otherwise)."""
    ledger = Ledger(ctx.paths.ledger)
    if ctx.feedback not in FEEDBACK_PROTOCOLS:
        raise ValueError(f"feedback must be one of {FEEDBACK_PROTOCOLS}, not {ctx.feedback!r}")
    validation = ctx.feedback == "validation"
    if validation:
        # Every score the agent is answered is on the validation split, its baseline too.
        ctx.eval_spec = replace(ctx.eval_spec, split="validation")
        if not ledger.get_meta("validation_baseline"):
            raise ValueError("the validation protocol needs the ledger's validation_baseline")
        ledger.set_meta("feedback", "validation")
    split = ctx.eval_spec.split
    baseline: dict = ledger.get_meta("validation_baseline" if validation else "baseline") or {}
    base_hash: str | None = ledger.get_meta("base_weights_hash")
    base_fingerprint: str | None = ledger.get_meta("base_fingerprint")
    base_items = (
        load_item_records(ctx.paths.root / baseline["items_path"])
        if baseline.get("items_path")
        else None
    )
    noise_cache: dict[int, dict[str, Any]] = {}
    limiter = RejectionLimiter(ctx.rejections_per_minute)
    unrecorded_saved = [0.0, 0]  # when and what was last written to meta
    staging_slots = threading.BoundedSemaphore(max(1, ctx.staging_slots))
    meta_lock = threading.Lock()
    keep_lock = threading.Lock()  # marking final and pruning kept weights, one at a time
    answering: set[int] = set()  # rows whose /submit has not answered yet
    mine: set[int] = set()  # rows this service created (settled or not)
    submit_pool: dict[str, anyio.CapacityLimiter] = {}
    if ctx.grader not in ("warm", "cold"):
        raise ValueError(f"grader must be warm or cold, not {ctx.grader!r}")
    warm = (
        WarmWorker(ctx.settings, ctx.paths.root / "grading" / "warm_worker.log")
        if ctx.grader == "warm"
        else None
    )

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # Submissions get their own threads: a queue of them waiting for the evaluation
        # must not take every thread that status polls are answered from.
        submit_pool["limiter"] = anyio.CapacityLimiter(ctx.submit_threads)
        restore = _on_sigterm(ctx.workers.stop)
        try:
            yield
        finally:
            ctx.workers.stop()
            if warm is not None:
                warm.close(ctx.workers)
            await run_in_threadpool(_close_mine)
            restore()

    app = FastAPI(
        title="agent2rl grading service",
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
        lifespan=lifespan,
    )

    async def body_refused(path: str | None, status: int, message: str) -> tuple[int, str]:
        if path != "/submit":
            return status, message
        return await run_in_threadpool(record_refusal, None, status, message)

    app.add_middleware(
        BodyLimit,
        limit=MAX_BODY_BYTES,
        message="send only the JSON {model_path: ...}",
        on_refusal=body_refused,
    )

    def _close_mine() -> None:
        """Settle this service's unsettled rows as the run's end (stopping)."""
        closed = ledger.fail_unfinished(RUN_ENDED, ids=sorted(mine.copy()))
        if closed:
            print(
                f"grading service stopping: {len(closed)} unsettled row(s) failed", file=sys.stderr
            )
        _save_unrecorded(force=True)

    def _save_unrecorded(force: bool = False) -> None:
        # At most once a second: a flood of refusals must not become a flood of writes.
        with meta_lock:
            n, now = limiter.unrecorded, time.monotonic()
            if n != unrecorded_saved[1] and (force or now - unrecorded_saved[0] >= 1.0):
                unrecorded_saved[:] = [now, n]
                ledger.set_meta("rejections_unrecorded", n)

    def noise(s: Submission) -> dict[str, Any]:
        """Intervals for a graded submission (cached: a graded row never changes). One graded
        under other settings than the baseline gets its score interval only."""
        if s.score is None or s.status != SubmissionStatus.GRADED:
            return {"score_ci95": None, "improvement_ci95": None, "within_noise": None}
        if s.id not in noise_cache:
            path = ctx.paths.root / s.items_path if s.items_path else None
            items = load_item_records(path) if path else None
            # the scorer's declared metric gives the intervals (None: not registered here)
            metric = metric_for(path)
            same = comparable(s.eval_hash, baseline.get("eval_hash"))
            stats = (
                compare_items(items, base_items, comparable=same, metric=metric)
                if metric is not None
                else Intervals()
            )
            noise_cache[s.id] = {
                "score_ci95": stats.score_ci95,
                "improvement_ci95": stats.improvement_ci95,
                "within_noise": stats.within_noise,
            }
        return noise_cache[s.id]

    def authorize(request: Request, path: str | None = None) -> None:
        try:
            require_bearer(request, ctx.token, "GRADING_TOKEN")
        except Refused as refused:
            raise _Refused(refused.status, refused.message, path) from None

    def record_refusal(
        path: str | None, status: int, message: str, sub_id: int | None = None
    ) -> tuple[int, str]:
        """Store one refused /submit attempt (withdrawing its row, if it had one) unless over
        the rate limit; returns the status and message to answer."""
        admitted = limiter.admit()
        if sub_id is not None:
            shutil.rmtree(ctx.paths.submission_dir(sub_id), ignore_errors=True)
            ledger.withdraw_submission(sub_id, (path, status, message) if admitted else None)
            mine.discard(sub_id)
        elif admitted:
            ledger.add_rejection(path, status, message)
        if admitted:
            return status, message
        _save_unrecorded()
        return 429, (
            f"too many refused requests (over {limiter.per_minute} a minute): wait a minute "
            f"before retrying. This request was refused too: {message}"
        )

    async def _refused(request: Request, exc: Refused) -> JSONResponse:
        status, message = exc.status, exc.message
        if request.url.path == "/submit":
            path, sub_id = getattr(exc, "path", None), getattr(exc, "sub_id", None)
            status, message = await run_in_threadpool(
                record_refusal, _capped(path), exc.status, exc.message, sub_id
            )
        return error(status, message)

    async def _bad_body(request: Request) -> JSONResponse:
        msg = (
            'request body must be JSON like {"model_path": "output/v1"} with the header '
            f"Content-Type: application/json (a path of at most {MAX_MODEL_PATH_CHARS} characters)"
        )
        status = 400
        if request.url.path == "/submit":
            status, msg = await run_in_threadpool(record_refusal, None, 400, msg)
        return error(status, msg)

    install_errors(app, "grading service", bad_body=_bad_body, on_refused=_refused)

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
            "eval_seconds": coarse_seconds(s.eval_seconds),
            "eval_hash": s.eval_hash,
            "identity": identity_flags(s.identity),
            "split": s.score_split,
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

    def protocol_view() -> dict[str, Any]:
        """What every listing says about the protocol: the split of the scores and, under
        ``validation``, the submission the run's end will grade on the private split."""
        if not validation:
            return {"feedback": "private", "split": split}
        chosen, how = select_final(ledger.submissions(), marked_final(ledger))
        return {
            "feedback": "validation",
            "split": split,
            "final_submission_id": chosen.id if chosen else None,
            "final_selected_by": how,
        }

    @app.get("/submissions")
    def list_submissions(request: Request) -> dict[str, Any]:
        authorize(request)
        subs = ledger.submissions()
        best = ledger.best()
        return {
            "baseline": baseline.get("score"),
            "best_score": best.score if best else None,
            **protocol_view(),
            "submissions": [public_view(s) for s in subs],
        }

    @app.post("/final")
    def mark_final(req: FinalRequest, request: Request) -> dict[str, Any]:
        authorize(request)
        return _mark(req.submission_id)

    def _mark(sub_id: int) -> dict[str, Any]:
        """Mark ``sub_id`` final (validation protocol): 409 when it cannot be graded at the
        end (not graded, its weights dropped, the budget over)."""
        if not validation:
            raise _Refused(
                409,
                "this run uses the private feedback protocol: its result is its best "
                "submission, there is nothing to mark final",
            )
        end = deadline()
        if end is not None and time.time() > end:
            raise _Refused(409, "the budget is over: the final submission can no longer change")
        with keep_lock:
            s = ledger.submission(sub_id)
            if s is None:
                raise _Refused(404, f"no submission {sub_id}: see GET /submissions")
            if not s.valid:
                raise _Refused(
                    409,
                    f"submission {sub_id} is {s.status}, not graded: only a graded submission "
                    "can be final",
                )
            if not weights_kept(ctx.paths, sub_id):
                raise _Refused(
                    409,
                    f"submission {sub_id}'s weights were not kept (only the best on validation "
                    "and the one marked final are): submit the same directory again with "
                    '"final": true',
                )
            ledger.set_meta("marked_final", {"submission_id": sub_id, "at": time.time()})
            _prune()
        return {"marked_final": sub_id, **protocol_view()}

    def _prune(answered: int | None = None) -> None:
        """Drop the weights of every private copy that can no longer be selected (under
        ``keep_lock``); ``answered``: the row whose /submit is answering now."""
        subs = ledger.submissions()
        # A row whose /submit has not answered yet keeps its weights: it may still be marked.
        keep = kept_ids(subs, marked_final(ledger)) | (answering - {answered})
        prune_weights(ctx.paths, subs, keep)

    @app.post("/submit")
    async def submit(req: SubmitRequest, request: Request) -> dict[str, Any]:
        authorize(request, req.model_path)
        if req.final and not validation:
            raise _Refused(
                400,
                '"final" is only for runs with the validation feedback protocol: this run\'s '
                "result is its best submission; submit without it",
                req.model_path,
            )
        return await anyio.to_thread.run_sync(
            _submit, req.model_path, req.final, limiter=submit_pool.get("limiter")
        )

    def _submit(model_path: str, final: bool = False) -> dict[str, Any]:
        end = deadline()
        if end is None:
            raise _Refused(409, "the run has not started yet: try again in a moment", model_path)
        if time.time() > end:
            raise _Refused(409, "the budget is over: no more submissions are graded", model_path)
        # Recorded before anything slow: from here on the run's end waits for this row, and
        # whatever happens it ends graded, failed (with a reason) or withdrawn as a refusal.
        sub_id = ledger.add_submission(_capped(model_path) or "", None, None, None, split=split)
        mine.add(sub_id)
        answering.add(sub_id)
        try:
            return _submit_row(sub_id, model_path, final)
        finally:
            answering.discard(sub_id)

    def _submit_row(sub_id: int, model_path: str, final: bool) -> dict[str, Any]:
        """Stage, grade and answer the recorded row ``sub_id`` (see :func:`_submit`)."""
        staging = time.time()
        try:
            copy = _check_and_stage(sub_id, model_path)
        except _Refused as refused:
            refused.sub_id = sub_id
            raise
        except SubmissionError as err:
            raise _Refused(err.status, str(err), model_path, sub_id) from None
        except Exception as err:  # the grader's own failure: recorded on the row
            traceback.print_exc(file=sys.stderr)
            _fail(
                sub_id, f"the grader could not copy the submission ({_describe(err)}): submit again"
            )
        else:
            _grade(sub_id, copy, time.time() - staging)
        s = ledger.submission(sub_id)
        marked = None
        if validation:
            with keep_lock:
                if final and s.valid:
                    ledger.set_meta("marked_final", {"submission_id": sub_id, "at": time.time()})
                    marked = sub_id
                _prune(answered=sub_id)
        best = ledger.best()
        return {
            **public_view(s),
            "baseline": baseline.get("score"),
            "best_score": best.score if best else None,
            "best_submission_id": best.id if best else None,
            "submissions": len(ledger.submissions()),
            "remaining_s": remaining(),
            **protocol_view(),
            **({"marked_final": marked} if final else {}),
        }

    def _fail(sub_id: int, error: str, kind: str = "harness") -> None:
        ledger.update_submission(
            sub_id,
            status=SubmissionStatus.FAILED,
            error=error,
            failure_kind=kind,
            finished_at=time.time(),
        )

    def _check_and_stage(sub_id: int, model_path: str) -> Path:
        """Check the path and files, snapshot the code, copy the model privately; raises
        :class:`SubmissionError` / :class:`_Refused` for a refusal."""
        model_dir = resolve_submission(model_path, ctx.paths.workspace)
        precheck_submission(model_dir)
        rel = str(model_dir.relative_to(ctx.paths.workspace.resolve()))
        ledger.update_submission(sub_id, path=rel)
        _snapshot(sub_id, rel)
        sub_dir = ctx.paths.submission_dir(sub_id)
        with staging_slots:
            # Checked under the slot: concurrent copies cannot all pass one free-space reading.
            need = sum(_size(f) for f in needed_files(model_dir))
            check_declared_size(need, ctx.limits)  # over the limit is a 413, never a 507
            sub_dir.mkdir(parents=True, exist_ok=True)
            free = shutil.disk_usage(sub_dir).free
            if free < need + ctx.disk_margin_bytes:
                raise _Refused(
                    507,
                    f"the grader's disk is too full to copy this submission ({free / 2**20:.0f} "
                    f"MiB free, it needs {need / 2**20:.0f} MiB plus "
                    f"{ctx.disk_margin_bytes / 2**20:.0f} MiB to spare): submit again later",
                    model_path,
                )
            partial = sub_dir / "model.partial"
            roots = [ctx.paths.output.resolve(), ctx.base_model_dir.resolve()]
            try:
                stage_submission(model_dir, partial, roots, ctx.limits, ctx.base_model_dir)
            except OSError as err:
                if err.errno not in (errno.ENOSPC, errno.EDQUOT):
                    raise
                raise _Refused(
                    507,
                    "the grader's disk filled up while copying this submission (no space left"
                    " on device): it was not accepted; submit again later",
                    model_path,
                ) from None
            copy = sub_dir / "model"
            partial.rename(copy)
        return copy

    def _snapshot(sub_id: int, rel: str) -> None:
        """The code snapshot for this submission; a failure is logged, never fatal."""
        if not ctx.snapshot:
            return
        try:
            ledger.update_submission(sub_id, snapshot=ctx.snapshot(f"submission: {rel}"))
        except Exception as err:  # a recording failure must not cost the agent its submission
            traceback.print_exc(file=sys.stderr)
            with meta_lock:
                errors = ledger.get_meta("snapshot_errors") or {}
                errors[str(sub_id)] = _describe(err)[:500]
                ledger.set_meta("snapshot_errors", errors)

    def _grade(sub_id: int, copy: Path, staging_s: float) -> None:
        """Grade the private copy; never raises: any exception ends the row failed
        (``harness``) with the reason, and the weights copy is removed. ``staging_s``: the
        time spent checking and copying it (for the row's ``timings``)."""
        try:
            _grade_copy(sub_id, copy, {"staging_s": staging_s, "grader": ctx.grader})
        except Exception as err:
            traceback.print_exc(file=sys.stderr)
            _fail(sub_id, f"the grader failed while grading ({_describe(err)}): submit again")
        finally:
            # Only needed while evaluating; under the validation protocol the copy may be
            # the one graded on the private split at the end (pruned in _submit instead).
            if not validation:
                for f in copy.glob("*.safetensors"):
                    f.unlink(missing_ok=True)

    def _grade_copy(sub_id: int, copy: Path, timings: dict[str, Any]) -> None:
        """Hash, de-duplicate, check identity, evaluate; leaves the row graded or failed
        (with whose fault it was) and its ``timings`` (``timings`` so far: staging)."""
        sub_dir = ctx.paths.submission_dir(sub_id)
        clock = time.time()
        try:
            digest = weights_hash(copy)
            fingerprint = model_fingerprint(copy, digest)
        except (OSError, ValueError) as err:
            # Malformed safetensors are the model's; an I/O error on our copy is ours.
            _fail(
                sub_id,
                f"could not read the submission: {err}",
                "model" if isinstance(err, ValueError) else "harness",
            )
            return
        is_copy = bool(base_hash) and digest == base_hash
        timings["staging_s"] += time.time() - clock  # hashing is part of taking the files in
        ledger.update_submission(
            sub_id,
            weights_hash=digest,
            fingerprint=fingerprint,
            is_copy=is_copy,
            timings={**timings, "evaluated": False},
        )
        if _settle_known(sub_id, copy, is_copy, fingerprint):
            return  # no evaluation needed: no waiting in the queue either
        queued = time.time()
        while not ctx.eval_lock.acquire(timeout=0.5):  # one evaluation at a time for this run
            if ctx.workers.stopped.is_set():
                _fail(sub_id, RUN_ENDED)
                return
            # The same files graded meanwhile (they were ahead in the queue): done, without
            # waiting behind other evaluations for the lock.
            if _settle_known(sub_id, copy, is_copy, fingerprint):
                return
        try:
            if ctx.workers.stopped.is_set():
                _fail(sub_id, RUN_ENDED)
                return
            # The same files may have been graded while this one waited: evaluated once.
            if _settle_known(sub_id, copy, is_copy, fingerprint):
                return
            # Before the weights copy is deleted; a report, never a change to the score.
            ledger.update_submission(
                sub_id, identity=check_identity(copy, ctx.base_model_dir).to_dict()
            )
            # The same files failed before through no fault of their own: evaluate them again.
            retried = ledger.retryable_failure(fingerprint)
            timings["queue_wait_s"] = time.time() - queued
            outcome = run_evaluation(
                ctx.eval_spec,
                copy,
                sub_dir,
                ctx.settings,
                timeout_s=ctx.eval_timeout_s,
                lock_wait_s=ctx.eval_lock_wait_s,
                workers=ctx.workers,
                warm=warm,
            )
        finally:
            ctx.eval_lock.release()
        timings.update(outcome.timings or {})
        timings.update(evaluated=True, eval_s=outcome.seconds)
        items = str(outcome.items_path.relative_to(ctx.paths.root)) if outcome.items_path else None
        ledger.update_submission(
            sub_id,
            status=SubmissionStatus.GRADED if outcome.error is None else SubmissionStatus.FAILED,
            score=outcome.score,
            n_items=outcome.n_items,
            items_path=items,
            eval_seconds=outcome.seconds,
            eval_hash=outcome.eval_hash,
            error=outcome.error,
            failure_kind=outcome.failure if outcome.error is not None else None,
            retry_of=retried.id if retried is not None else None,
            timings=timings,
            finished_at=time.time(),
        )

    def _settle_known(sub_id: int, copy: Path, is_copy: bool, fingerprint: str) -> bool:
        """Settle the row without evaluating when its outcome is known: the base model
        itself (the baseline's score) or the same files as an earlier graded or model-failed
        row (that row's outcome). False when it must be evaluated."""
        if is_copy and fingerprint == base_fingerprint:  # the base model itself: its baseline
            identity = check_identity(copy, ctx.base_model_dir).to_dict()
            ledger.update_submission(
                sub_id,
                identity=identity,
                status=SubmissionStatus.GRADED,
                is_copy=True,
                score=baseline.get("score"),
                n_items=baseline.get("n_items"),
                items_path=baseline.get("items_path"),
                eval_seconds=0.0,
                eval_hash=baseline.get("eval_hash"),
                finished_at=time.time(),
            )
            return True
        earlier = ledger.graded_with_fingerprint(fingerprint)
        if earlier is None or earlier.id == sub_id:
            return False
        ledger.update_submission(  # same files: same outcome
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
        return True

    return app


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


def _capped(text: str | None, limit: int = 1024) -> str | None:
    """At most ``limit`` characters of agent-given text, for the ledger."""
    if text is None or len(text) <= limit:
        return text
    return text[:limit] + f"...[{len(text)} characters]"


def _describe(err: BaseException) -> str:
    first = next((line for line in str(err).splitlines() if line.strip()), "")
    return f"{type(err).__name__}: {first[:300]}" if first else type(err).__name__


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:  # vanished or unreadable: staging refuses it with a clear message
        return 0


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
