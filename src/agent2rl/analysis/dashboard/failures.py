"""The failure taxonomy: what went wrong in a run, each with the artifact that shows it.

Kinds (:data:`KINDS`), several per run possible:

``crash``             the agent exited non-zero (``agent_error``)
``harness``           the harness failed (``harness_error``): not the agent's doing
``oom``               the agent went over its memory cap
``disk quota``        its workspace went over its disk quota
``interrupted``       the run was stopped by the user or the study
``deadline, no valid submission``  the budget ran out before any valid submission
``no valid submission``            the agent finished without one
``format error``      a submission refused at the door (bad path or files, HTTP 4xx) or
                      failed as the model's fault (it could not be loaded or scored)
``grader failure``    an evaluation failed as the harness's fault (the grader or a judge)
``integrity``         a copy of the base model submitted, a mode contradicted, a model not
                      derived from the base, a changed chat template, contamination

Integrity fields that :class:`RunMetrics` may not have in an older ``metrics.json`` are read
when present.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from agent2rl.analysis.dashboard.runset import StudyRun
from agent2rl.analysis.report.run_metrics import RunMetrics
from agent2rl.rundir import RunStatus

KINDS = (
    "crash",
    "harness",
    "oom",
    "disk quota",
    "interrupted",
    "deadline, no valid submission",
    "no valid submission",
    "format error",
    "grader failure",
    "integrity",
)


@dataclass(frozen=True)
class Failure:
    kind: str
    """One of :data:`KINDS`."""
    detail: str
    ref: str
    """The artifact: ``run.json``, ``agent.log``, ``submission #3``, ``rejection #1``..."""


def _failed_kind(point: object) -> str:
    """``model`` or ``harness`` for a failed submission: the ledger's own verdict when the
    metrics carry it, else ``harness`` for an evaluation that timed out or crashed the
    grader, ``model`` otherwise."""
    kind = getattr(point, "failure_kind", None)
    if kind in ("model", "harness"):
        return kind
    error = (getattr(point, "error", None) or "").lower()
    return (
        "harness"
        if any(w in error for w in ("timeout", "timed out", "harness", "judge"))
        else "model"
    )


def run_failures(m: RunMetrics) -> list[Failure]:
    """Every failure of one run (an empty list for a clean run)."""
    out: list[Failure] = []
    status = m.status
    if status == RunStatus.AGENT_ERROR:
        out.append(Failure("crash", m.error or "the agent exited with an error", "agent.log"))
    elif status == RunStatus.HARNESS_ERROR:
        out.append(Failure("harness", m.error or "the harness failed", "run.json"))
    elif status == RunStatus.OOM:
        out.append(Failure("oom", m.error or "over the memory cap", "run.json"))
    elif status == RunStatus.DISK_QUOTA:
        out.append(Failure("disk quota", m.error or "over the disk quota", "run.json"))
    elif status == RunStatus.INTERRUPTED:
        out.append(Failure("interrupted", m.error or "stopped", "run.json"))
    if m.valid_submissions == 0:
        kind = (
            "deadline, no valid submission"
            if status == RunStatus.DEADLINE
            else "no valid submission"
        )
        if status in (RunStatus.DEADLINE, RunStatus.COMPLETED):
            out.append(Failure(kind, f"{m.submissions} submission(s), none valid", "ledger.db"))
    for r in m.rejections:
        out.append(
            Failure("format error", f"refused ({r.http_status}): {r.reason}", f"rejection #{r.id}")
        )
    for p in m.trajectory:
        if p.status != "failed":
            continue
        kind = "grader failure" if _failed_kind(p) == "harness" else "format error"
        out.append(Failure(kind, p.error or "evaluation failed", f"submission #{p.id}"))
    for p in m.trajectory:
        if p.is_copy:
            out.append(
                Failure(
                    "integrity", "a copy of the base model was submitted", f"submission #{p.id}"
                )
            )
    for flag in m.mode_flags or []:
        out.append(Failure("integrity", flag, "record/agent.json"))
    for sid in getattr(m, "not_derived_submissions", None) or []:
        out.append(
            Failure(
                "integrity", "the model does not derive from the base model", f"submission #{sid}"
            )
        )
    for sid in getattr(m, "chat_template_submissions", None) or []:
        out.append(Failure("integrity", "the chat template was changed", f"submission #{sid}"))
    contamination = getattr(m, "contamination", None)
    if contamination is not None and getattr(contamination, "flagged", False):
        out.append(
            Failure(
                "integrity",
                f"contamination: {contamination.matched_items} of {contamination.items_total} "
                "private items found in the workspace",
                "record/contamination.json",
            )
        )
    return out


@dataclass(frozen=True)
class FailureRow:
    run_id: str
    stack: str
    task: str
    failures: list[Failure]


def failures(runs: Sequence[StudyRun]) -> list[FailureRow]:
    """Each run's failures, in the given order."""
    return [
        FailureRow(r.run_id, r.stack.label, r.metrics.task, run_failures(r.metrics)) for r in runs
    ]


def failure_counts(runs: Sequence[StudyRun]) -> dict[str, Counter]:
    """Per stack label: how many runs show each kind (a run counts once per kind)."""
    out: dict[str, Counter] = {}
    for r in runs:
        kinds = {f.kind for f in run_failures(r.metrics)}
        out.setdefault(r.stack.label, Counter()).update(kinds)
    return out


__all__ = ["KINDS", "Failure", "FailureRow", "failure_counts", "failures", "run_failures"]
