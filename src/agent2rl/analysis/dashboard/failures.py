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
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from agent2rl.analysis.dashboard.runset import StudyRun
from agent2rl.analysis.report.run_metrics import RunMetrics, TrajectoryPoint
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


def _failed_kind(point: TrajectoryPoint) -> str:
    """``model`` or ``harness`` for a failed submission: the ledger's own verdict when the
    metrics carry it, else ``harness`` for an evaluation that timed out or crashed the
    grader, ``model`` otherwise."""
    if point.failure_kind in ("model", "harness"):
        return point.failure_kind
    error = (point.error or "").lower()
    harness = any(w in error for w in ("timeout", "timed out", "harness", "judge"))
    return "harness" if harness else "model"


#: a run status that is a failure: (kind, detail when the run recorded no error, artifact)
_STATUS_FAILURES: dict[str, tuple[str, str, str]] = {
    RunStatus.AGENT_ERROR: ("crash", "the agent exited with an error", "agent.log"),
    RunStatus.HARNESS_ERROR: ("harness", "the harness failed", "run.json"),
    RunStatus.OOM: ("oom", "over the memory cap", "run.json"),
    RunStatus.DISK_QUOTA: ("disk quota", "over the disk quota", "run.json"),
    RunStatus.INTERRUPTED: ("interrupted", "stopped", "run.json"),
}


def run_failures(m: RunMetrics) -> list[Failure]:
    """Every failure of one run (an empty list for a clean run)."""
    out: list[Failure] = []
    status = m.status
    if status in _STATUS_FAILURES:
        kind, detail, ref = _STATUS_FAILURES[status]
        out.append(Failure(kind, m.error or detail, ref))
    if m.valid_submissions == 0 and status in (RunStatus.DEADLINE, RunStatus.COMPLETED):
        kind = ("deadline, " if status == RunStatus.DEADLINE else "") + "no valid submission"
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
    copied = "a copy of the base model was submitted"
    out += [Failure("integrity", copied, f"submission #{p.id}") for p in m.trajectory if p.is_copy]
    out += [Failure("integrity", flag, "record/agent.json") for flag in m.mode_flags or []]
    not_derived = "the model does not derive from the base model"
    out += [
        Failure("integrity", not_derived, f"submission #{i}") for i in m.not_derived_submissions
    ]
    changed = "the chat template was changed"
    out += [Failure("integrity", changed, f"submission #{i}") for i in m.chat_template_submissions]
    c = m.contamination
    if c is not None and c.flagged:
        found = f"contamination: {c.matched_items} of {c.items_total} private items found"
        out.append(Failure("integrity", f"{found} in the workspace", "record/contamination.json"))
    return out


def failure_counts(runs: Sequence[StudyRun]) -> dict[str, Counter]:
    """Per stack label: how many runs show each kind (a run counts once per kind)."""
    out: dict[str, Counter] = {}
    for r in runs:
        kinds = {f.kind for f in run_failures(r.metrics)}
        out.setdefault(r.stack.label, Counter()).update(kinds)
    return out
