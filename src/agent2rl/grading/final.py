"""The ``validation`` feedback protocol: the agent sees validation scores, the private split
grades one submission at the end.

agent2rl runs under one of two grading protocols (``agent2rl run --feedback``):

``private`` (the default, the paper's)
    ``POST /submit`` grades the submission on the task's private split and answers that
    score; the run's headline is the best of them (selected over every score the agent saw,
    so optimistic), with the final submission's score beside it.
``validation`` (MLE-bench's)
    ``POST /submit`` grades the submission on the task's *validation* split and answers only
    that score (and its interval against the base model's validation score); the private
    split is never graded while the agent runs. The agent may mark one submission final
    (``POST /final {"submission_id": N}``, or ``"final": true`` in ``POST /submit``; the
    latest mark counts). When the agent is gone the harness grades on the private split, with
    the same evaluation code (:func:`~agent2rl.grading.evaluator.run_evaluation`) and
    settings as every other score of the run, exactly one submission (:func:`select_final`):
    the one marked final if it was graded, else the best on validation (the latest on a tie).
    That grade is the run's score (:class:`FinalGrade`, in the ledger's meta
    ``final_grade``).

The weights of a submission are needed again at the end only if it may be the one selected:
the grading service keeps the private copies of the marked submission and of the best on
validation and drops every other one's weights (:func:`prune_weights`), so a run of many
submissions does not fill the grader's disk. An agent that marks an older submission whose
copy was dropped is told to submit the same directory again with ``"final": true``.

The end-of-run grade happens however the agent ended (:func:`finish_feedback`); a run
interrupted or whose harness died is graded by ``agent2rl report`` (:func:`grade_final`).
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, fields, replace
from enum import StrEnum
from typing import Any, Literal

from agent2rl.dataset import PreparedTask
from agent2rl.errors import UserError
from agent2rl.grading.evaluator import EvalSpec, run_evaluation
from agent2rl.grading.ledger import Ledger, Submission, SubmissionStatus
from agent2rl.rundir import RunInfo, RunPaths, RunStatus
from agent2rl.settings import load_settings

#: The choices of ``agent2rl run --feedback``.
FEEDBACK_PROTOCOLS = ("private", "validation")
#: How the end-of-run grade's submission was chosen.
SelectedBy = Literal["marked", "best_validation"]


class GradeStatus(StrEnum):
    """The end-of-run grade's ``status`` (a ``str``, as stored in the ledger's meta).
    ``GRADED``/``FAILED``: done; ``NO_SUBMISSION``: nothing was graded on validation;
    ``PENDING``: not done yet (the run was interrupted, or the harness died mid-grade:
    ``agent2rl report`` does it); ``GRADING``: under way (a harness that died here left it)."""

    GRADED = "graded"
    FAILED = "failed"
    NO_SUBMISSION = "no_submission"
    PENDING = "pending"
    GRADING = "grading"


@dataclass
class FinalGrade:
    """The end-of-run grade of the ``validation`` protocol (ledger meta ``final_grade``).

    ``score`` is on ``split`` (always ``private``) and is None unless ``status`` is
    ``graded``; ``validation_score`` is the same submission's score on the validation split
    (what the agent saw). ``failure_kind`` says whose fault a ``failed`` grade was (a
    ``harness`` failure is tried again by ``agent2rl report`` while the weights are kept).
    """

    status: GradeStatus
    submission_id: int | None = None
    selected_by: SelectedBy | None = None
    validation_score: float | None = None
    split: str = "private"
    score: float | None = None
    n_items: int | None = None
    items_path: str | None = None
    eval_seconds: float | None = None
    eval_hash: str | None = None
    error: str | None = None
    failure_kind: str | None = None
    graded_at: float | None = None
    note: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> FinalGrade:
        """From the ledger's JSON; unknown keys are ignored."""
        known = {f.name for f in fields(cls)}
        grade = cls(**{k: v for k, v in data.items() if k in known})
        grade.status = GradeStatus(grade.status)
        return grade


def read_final_grade(ledger: Ledger) -> FinalGrade | None:
    """The recorded end-of-run grade, None when none was recorded (a ``private`` run, or
    one whose end never came)."""
    data = ledger.get_meta("final_grade")
    return FinalGrade.from_dict(data) if isinstance(data, dict) else None


def marked_final(ledger: Ledger) -> int | None:
    """The id of the submission the agent last marked final, None when unmarked."""
    mark = ledger.get_meta("marked_final")
    return int(mark["submission_id"]) if isinstance(mark, dict) else None


def select_final(
    subs: Sequence[Submission], marked: int | None
) -> tuple[Submission | None, SelectedBy | None]:
    """The submission graded on the private split at the end, and why: the ``marked`` one
    when it was graded (a mark on a failed or unknown row is ignored), else the graded one
    with the highest validation score, the *latest* on a tie (the agent's most recent of
    equally good models); ``(None, None)`` when none was graded."""
    valid = [s for s in subs if s.valid]
    chosen = next((s for s in valid if s.id == marked), None)
    if chosen is not None:
        return chosen, "marked"
    if not valid:
        return None, None
    return max(valid, key=lambda s: (s.score, s.id)), "best_validation"


def kept_ids(subs: Sequence[Submission], marked: int | None) -> set[int]:
    """The submissions whose private copies must keep their weights: the ``marked`` one (if
    graded) and the best on validation (what :func:`select_final` picks without a mark)."""
    picked = (select_final(subs, marked)[0], select_final(subs, None)[0])
    return {s.id for s in picked if s is not None}


def weights_kept(paths: RunPaths, submission_id: int) -> bool:
    """Whether the private copy of ``submission_id`` still holds its weights."""
    return any((paths.submission_dir(submission_id) / "model").glob("*.safetensors"))


def prune_weights(paths: RunPaths, subs: Sequence[Submission], keep: set[int]) -> list[int]:
    """Delete the weights of every settled submission's private copy but those in ``keep``
    (a row still ``evaluating`` is left alone: it is being graded); returns the ids pruned."""
    pruned = []
    for s in subs:
        if s.id in keep or s.status == SubmissionStatus.EVALUATING:
            continue
        files = list((paths.submission_dir(s.id) / "model").glob("*.safetensors"))
        for f in files:
            f.unlink(missing_ok=True)
        if files:
            pruned.append(s.id)
    return pruned


def grade_final(paths: RunPaths, *, pending: str | None = None) -> FinalGrade | None:
    """Grade on the private split the submission :func:`select_final` picks, record it in
    the ledger (meta ``final_grade``) and return it; None for a run that is not under the
    ``validation`` protocol (or has no ledger).

    Only once the grading service is stopped (nothing else writes the ledger then).
    Idempotent: a grade already ``graded``/``no_submission``, or ``failed`` by the model's
    fault, is returned unchanged; a ``pending``, ``grading`` (the harness died during it) or
    harness-``failed`` one is done again. Once settled, every private copy's weights are
    deleted. Never raises for a failed evaluation: the grade is then ``failed`` with the
    reason.

    ``pending``: instead of grading, record the grade as not done, saying why, unless one is
    already settled or ``failed`` (whoever's fault).
    """
    if not paths.ledger.exists():
        return None
    with Ledger(paths.ledger) as ledger:
        if ledger.get_meta("feedback") != "validation":
            return None
        done = read_final_grade(ledger)
        if done is not None and (
            done.status in (GradeStatus.GRADED, GradeStatus.NO_SUBMISSION)
            or (
                done.status == GradeStatus.FAILED
                and (pending is not None or done.failure_kind == "model")
            )
        ):
            return done
        if pending is not None:
            return _record(ledger, FinalGrade(status=GradeStatus.PENDING, note=pending))
        subs = ledger.submissions()
        chosen, how = select_final(subs, marked_final(ledger))
        if chosen is None:
            note = "no submission was graded on the validation split"
            return _record(ledger, FinalGrade(status=GradeStatus.NO_SUBMISSION, note=note))
        grade = FinalGrade(
            status=GradeStatus.GRADING,
            submission_id=chosen.id,
            selected_by=how,
            validation_score=chosen.score,
        )
        if not weights_kept(paths, chosen.id):
            grade.status, grade.failure_kind = GradeStatus.FAILED, "harness"
            grade.error = (
                f"the weights of submission {chosen.id} were not kept, so it could not be "
                "graded on the private split"
            )
            return _record(ledger, grade)
        _record(ledger, grade)
        outcome = _evaluate(paths, chosen.id)
        grade = _record(
            ledger,
            replace(
                grade,
                status=GradeStatus.GRADED if outcome.error is None else GradeStatus.FAILED,
                graded_at=time.time(),
                **outcome.recorded(paths.root),
            ),
        )
        if grade.status == GradeStatus.GRADED or grade.failure_kind == "model":
            prune_weights(paths, subs, set())  # nothing will be graded again
        return grade


def _record(ledger: Ledger, grade: FinalGrade) -> FinalGrade:
    ledger.set_meta("final_grade", grade.to_dict())
    return grade


def _evaluate(paths: RunPaths, sub_id: int) -> Any:
    """The private-split evaluation of ``sub_id``'s private copy, with the run's own
    evaluation settings (run.json, as the service and the baseline use them) and the task's
    evaluation timeout."""
    info = RunInfo.load(paths)
    from agent2rl.tasks import get_task

    timeout_s = get_task(info.task, info.task_options).eval_timeout_s
    out = paths.root / "grading" / "final"  # items.jsonl, result.json, eval.log
    shutil.rmtree(out, ignore_errors=True)  # a retry starts clean (run_evaluation makes it)
    model = paths.submission_dir(sub_id) / "model"
    return run_evaluation(EvalSpec.of_run(info), model, out, load_settings(), timeout_s)


def check_feedback(feedback: str, task: str, prepared: PreparedTask) -> None:
    """A :class:`UserError` naming the fix for a protocol that is unknown or that the task
    cannot run under (``validation`` needs a validation split)."""
    if feedback not in FEEDBACK_PROTOCOLS:
        raise UserError(f"bad --feedback {feedback!r}: use {' or '.join(FEEDBACK_PROTOCOLS)}")
    if feedback == "validation" and prepared.validation is None:
        raise UserError(
            f"--feedback validation: task {task} has no validation split to answer "
            "submissions with; use --feedback private (the default) for this task"
        )


def finish_feedback(paths: RunPaths, status: str, say: Callable[[str], Any] = print) -> None:
    """The run's end under the ``validation`` protocol (nothing otherwise): once the grading
    service is stopped, grade the selected submission on the private split
    (:func:`grade_final`), whatever ended the agent; an interrupted run records the grade
    ``pending`` instead (``agent2rl report`` does it). Never raises: a failure is said and
    recorded, the run's report is still written."""
    pending = None
    if status == RunStatus.INTERRUPTED:
        pending = (
            "the run was interrupted before its end-of-run grade on the private split:"
            f" `agent2rl report {paths.root}` does it"
        )
    try:
        grade = grade_final(paths, pending=pending)
    except Exception as err:  # noqa: BLE001 - the report must still be written
        say(f"[red]the end-of-run grade on the private split failed: {err}[/]")
        grade_final(paths, pending=f"the end-of-run grade failed ({type(err).__name__}: {err})")
        return
    if grade is not None:
        say(describe_grade(grade))


def describe_grade(grade: FinalGrade) -> str:
    """One line for the console and the report on the end-of-run grade."""
    if grade.status == GradeStatus.GRADED:
        valid = grade.validation_score
        how = "marked final" if grade.selected_by == "marked" else "best on validation"
        return (
            f"final (submission {grade.submission_id}, {how}): {grade.score:.2f} on the private "
            f"split (validation: {'-' if valid is None else f'{valid:.2f}'})"
        )
    if grade.status == "no_submission":
        return "final: none (no submission was graded on the validation split)"
    if grade.status == GradeStatus.FAILED:
        return f"final (submission {grade.submission_id}): not graded: {grade.error}"
    return f"final: not graded yet ({grade.note or grade.status})"
