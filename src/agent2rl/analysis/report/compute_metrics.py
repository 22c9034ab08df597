"""Per-run metrics, computed only from a finished run directory (never from live state).

Reads, through the run's :class:`~agent2rl.run_record.RunRecord`, ``run.json``, ``ledger.db``
(read-only), the grader's per-item result files, the code snapshots and whatever the run
recorded under ``record/``. The result is deterministic: the bootstrap uses a fixed seed, so
computing the metrics twice gives byte-identical ``metrics.json``.

Scores are compared with the baseline only through :mod:`agent2rl.grading.comparison`, the
rule the grading service answered the agent with during the run.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Sequence
from dataclasses import replace
from itertools import pairwise
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
from pydantic import BaseModel

from agent2rl.analysis.report.code_changes import code_changes
from agent2rl.analysis.report.judging import judge_summary
from agent2rl.analysis.report.run_metrics import (
    MODE_VIOLATION,
    UNCHECKED,
    ContaminationSummary,
    EnvUsage,
    GroupScore,
    GroupScores,
    IdentityFlags,
    LLMUsage,
    RejectedAttempt,
    ResourceSummary,
    RunMetrics,
    TrajectoryPoint,
)
from agent2rl.analysis.report.searching import search_summary
from agent2rl.files import json_object, read_jsonl_tolerant
from agent2rl.grading.comparison import best as best_of
from agent2rl.grading.comparison import comparable, improvement
from agent2rl.grading.final import GradeStatus
from agent2rl.grading.ledger import Submission, SubmissionStatus
from agent2rl.integrity.contamination import read_contamination
from agent2rl.integrity.identity import identity_flags
from agent2rl.metering import summarize_usage
from agent2rl.rollout.env_record import summarize_env
from agent2rl.run_record import LedgerRecord, RunRecord
from agent2rl.rundir import RunPaths
from agent2rl.scoring.metrics import metric_for
from agent2rl.statistics import Intervals, compare_items, load_item_records

_M = TypeVar("_M", bound=BaseModel)


# -- inputs ------------------------------------------------------------------------------------
def _final_pick(graded: LedgerRecord) -> Submission | None:
    """The validation protocol's end-of-run grade as a graded submission on the private split
    (the selected submission's row with the private score, files and settings); None when it
    was not graded."""
    grade = graded.final_grade
    if grade is None or grade.status != GradeStatus.GRADED or grade.submission_id is None:
        return None
    row = next((s for s in graded.submissions if s.id == grade.submission_id), None)
    if row is None:
        return None
    return replace(
        row,
        score=grade.score,
        n_items=grade.n_items,
        items_path=grade.items_path,
        eval_hash=grade.eval_hash,
        eval_seconds=grade.eval_seconds,
        duplicate_of=None,
        split="private",
    )


def _decoding_text(backend: dict[str, Any] | None) -> str | None:
    """The run's decoding in words, from run.json's backend settings (None: an older run)."""
    if backend is None:
        return None
    from agent2rl.inference.decoding import Decoding

    return Decoding.from_dict(backend.get("decoding")).describe()


def resource_summary(path: Path) -> ResourceSummary | None:
    """Peak RSS, mean CPU and peak process count from ``record/resources.jsonl``.

    Returns None when the file is missing or holds no usable sample. A field missing from every
    sample is reported as None.
    """
    path = Path(path)
    if not path.is_file():
        return None
    samples = read_jsonl_tolerant(path)
    if not samples:
        return None

    def nums(key: str) -> list[float]:
        return [
            float(s[key])
            for s in samples
            if isinstance(s.get(key), int | float) and not isinstance(s.get(key), bool)
        ]

    rss, cpu, procs, ts = nums("rss_bytes"), nums("cpu_percent"), nums("n_procs"), nums("t")
    return ResourceSummary(
        n_samples=len(samples),
        peak_rss_bytes=int(max(rss)) if rss else None,
        mean_cpu_percent=float(np.mean(cpu)) if cpu else None,
        peak_cpu_percent=float(max(cpu)) if cpu else None,
        max_procs=int(max(procs)) if procs else None,
        span_s=float(max(ts) - min(ts)) if ts else None,
    )


def _rel(paths: RunPaths, rel: str | None) -> Path | None:
    return paths.root / rel if rel else None


def _items_for(paths: RunPaths, sub: Submission, by_id: dict[int, Submission]) -> Path | None:
    """The per-item file of ``sub``; a duplicate without its own falls back to its original's."""
    if sub.items_path:
        return _rel(paths, sub.items_path)
    original = by_id.get(sub.duplicate_of) if sub.duplicate_of is not None else None
    return _rel(paths, original.items_path) if original else None


def group_scores(path: Path | None) -> dict[str, GroupScore] | None:
    """Per-item results broken down by ``meta.group`` (an episode's task type):
    ``{group: GroupScore(n=items, score=the evaluation's metric over the group's items)}``
    (:func:`~agent2rl.scoring.metrics.metric_for`; 100 x mean score for an evaluation that
    declared none). Items without a numeric ``score`` are left out. None when the file is
    missing, no item carries a group, or the metric is not registered here."""
    if path is None or not Path(path).is_file():
        return None
    metric = metric_for(path)
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in read_jsonl_tolerant(Path(path)):
        meta = row.get("meta")
        group = meta.get("group") if isinstance(meta, dict) else None
        if group is not None and isinstance(row.get("score"), int | float):
            groups.setdefault(str(group), []).append(row)
    if not groups or metric is None:
        return None
    return {
        g: GroupScore(n=len(rows), score=metric.value(rows)) for g, rows in sorted(groups.items())
    }


def _dict_or_none(value: Any) -> dict[str, Any] | None:
    return value if isinstance(value, dict) else None


def _str_list(value: Any) -> list[str] | None:
    return value if isinstance(value, list) and all(isinstance(v, str) for v in value) else None


def _json_object(path: Path) -> dict[str, Any]:
    """The JSON object in ``path``; ``{}`` when it is missing, unreadable or not an object."""
    try:
        return json_object(path.read_bytes()) or {}
    except OSError:
        return {}


def _from_fields(model: type[_M], *sources: object, **fields: Any) -> _M:
    """A ``model`` of ``fields``; each of its other fields is the attribute of that name of
    ``sources`` (the last that has one): a record's fields shown as they are."""
    same = {k: getattr(src, k) for src in sources for k in model.model_fields if hasattr(src, k)}
    return model.model_validate({**same, **fields})


def _agent_view(
    paths: RunPaths,
) -> tuple[dict[str, Any] | None, list[str] | None, list[str] | None]:
    """From ``record/agent.json`` (written after the agent stops): the agent log's summary
    (events, the CLI's own token counts), the training methods found in its code and where
    they contradict its mode. Each is None when the file is missing or unreadable, or when
    its value is not of the expected kind (a dict, lists of strings)."""
    view = _json_object(paths.agent_json)
    return (
        _dict_or_none(view.get("log")),
        _str_list(view.get("methods")),
        _str_list(view.get("mode_flags")),
    )


# -- scores against the baseline ---------------------------------------------------------------
def _intervals(
    paths: RunPaths, baseline: dict[str, Any] | None, subs: Sequence[Submission]
) -> dict[int, Intervals]:
    """Per valid submission: its score interval and, when it is comparable with the baseline,
    the paired interval against it (see :func:`~agent2rl.statistics.compare_items`)."""
    base_path = _rel(paths, (baseline or {}).get("items_path"))
    base_items = load_item_records(base_path) if base_path else None
    base_hash = (baseline or {}).get("eval_hash")
    by_id = {s.id: s for s in subs}
    out: dict[int, Intervals] = {}
    for sub in subs:
        if not sub.valid:
            continue
        path = _items_for(paths, sub, by_id)
        items = load_item_records(path) if path else None
        # the submission's declared metric (a comparable baseline was graded by the same)
        metric = metric_for(path)
        out[sub.id] = (
            compare_items(
                items, base_items, comparable=comparable(sub.eval_hash, base_hash), metric=metric
            )
            if metric is not None
            else Intervals()
        )
    return out


def _pair_share(scores: Sequence[float], rise: Callable[[float, float], bool]) -> float | None:
    """The share of consecutive pairs ``(prev, cur)`` with ``rise(prev, cur)``; None for
    fewer than two scores."""
    if len(scores) < 2:
        return None
    return sum(1 for prev, cur in pairwise(scores) if rise(prev, cur)) / (len(scores) - 1)


def monotonic_ratio(scores: Sequence[float]) -> float | None:
    """The reference's ``monotonic_ratio``: the share of consecutive pairs where the score
    strictly increases (a tie is not an increase). None for fewer than two scores."""
    return _pair_share(scores, operator.lt)


def non_decreasing_ratio(scores: Sequence[float]) -> float | None:
    """agent2rl's variant: the share of consecutive pairs where the score did not go down
    (a tie counts). None for fewer than two scores."""
    return _pair_share(scores, operator.le)


def _reference_valid(s: Submission) -> bool:
    """The reference's valid submission: a score above 0 (agent2rl's: graded with a score)."""
    return s.valid and s.score is not None and s.score > 0


def _trajectory(
    subs: Sequence[Submission], t0: float, base_hash: str | None, intervals: dict[int, Intervals]
) -> list[TrajectoryPoint]:
    out: list[TrajectoryPoint] = []
    best: float | None = None
    for s in subs:
        if s.valid:
            best = s.score if best is None else max(best, s.score)  # type: ignore[type-var]
        out.append(
            _from_fields(
                TrajectoryPoint,
                s,
                intervals.get(s.id, Intervals()),
                t=s.submitted_at - t0,
                score=s.score if s.valid else None,
                best_so_far=best,
                comparable=comparable(s.eval_hash, base_hash) if s.valid else None,
                failure_kind=s.failure_kind if s.status == SubmissionStatus.FAILED else None,
                identity=_identity(s),
            )
        )
    return out


def _identity(s: Submission) -> IdentityFlags | None:
    """The submission's identity check as the report shows it: the pass/fail view the agent
    got (:func:`identity_flags`) plus the weight figures, read from the ledger's full report
    (the agent never saw them)."""
    flags = identity_flags(s.identity)
    if flags is None or s.identity is None:
        return None
    # the full reasons too: the agent's view cuts the figures out of the weight reason
    flags["reasons"] = [str(r) for r in s.identity.get("reasons") or []]
    figures = {k: _finite(s.identity.get(k)) for k in ("related_share", "median_cosine")}
    return IdentityFlags.model_validate({**flags, **figures})


def _finite(x: Any) -> float | None:
    """``x`` as a float when it is a finite number (not a bool); None otherwise."""
    ok = isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)
    return float(x) if ok else None


def _contamination(paths: RunPaths) -> ContaminationSummary | None:
    """The summary of ``record/contamination.json``; None when the check did not run."""
    report = read_contamination(paths)
    if report is None:
        return None
    lists = {
        "item_ids": [m.item_id for m in report.matches],
        "files": list(dict.fromkeys(f for match in report.matches for f in match.files)),
        "flagged_urls": report.egress.flagged_urls if report.egress else [],
        "unchecked_reasons": report.unchecked_reasons,
    }
    # up to 20 of each list; every other field is the report's own
    return _from_fields(ContaminationSummary, report, **{k: v[:20] for k, v in lists.items()})


def _integrity_flags(
    trajectory: Sequence[TrajectoryPoint],
    contamination: ContaminationSummary | None,
    mode_flags: Sequence[str] | None,
) -> list[str]:
    flags: list[str] = []
    if any(tr.identity and tr.identity.derived is False for tr in trajectory):
        flags.append("model_not_derived")
    # A submission's own chat template is recorded (chat_template_submissions), not flagged:
    # grading accepted it only under the renderer rule (a template that reads or computes
    # from the messages' text fails as the model's fault), so an honest SFT run that adds
    # role markers keeps its gain.
    if contamination is not None and contamination.flagged:
        flags.append("contaminated")
    # Fail closed: a check that could not read what it had to (or an identity check that
    # could not run on a graded submission) leaves the run unchecked, counted as flagged.
    identity_failed = any(
        tr.identity and tr.identity.derived is None and tr.score is not None for tr in trajectory
    )
    if (contamination is not None and contamination.unchecked) or identity_failed:
        flags.append(UNCHECKED)
    if mode_flags:
        flags.append(MODE_VIOLATION)
    return flags


# -- metrics -----------------------------------------------------------------------------------
class _Run:
    """What the metrics are computed from: the run's record and the figures several metrics
    share (``seen``: the baseline the agent's scores compare with, the validation split's
    under the validation protocol; ``top``/``last``: the best's and the final's intervals).
    Raises FileNotFoundError when the run has no readable ``run.json``."""

    def __init__(self, paths: RunPaths) -> None:
        record = RunRecord(paths.root)
        info = record.info()
        if info is None:
            raise FileNotFoundError(f"{paths.run_json}: no readable run.json")
        self.paths, self.info, self.git = paths, info, record.git
        self.graded = graded = record.ledger()
        subs, baseline = graded.submissions, graded.baseline
        self.t0 = info.start if info.start is not None else info.created_at
        ended = info.ended_at is not None and info.start is not None
        self.duration = info.ended_at - info.start if ended else None  # type: ignore[operator]
        self.base_score = _finite(baseline.get("score")) if baseline else None
        self.base_hash = baseline.get("eval_hash") if baseline else None
        # Under the validation protocol the trajectory is on the validation split; the run's
        # score is the end-of-run grade on the private split, never a maximum.
        self.by_validation = info.feedback == "validation"
        self.seen = graded.record("validation_baseline") if self.by_validation else baseline
        self.seen_score = _finite(self.seen.get("score")) if self.seen else None
        self.seen_hash = self.seen.get("eval_hash") if self.seen else None
        pick = _final_pick(graded) if self.by_validation else None
        self.valid = [s for s in subs if s.valid]
        self.best = pick if self.by_validation else best_of(subs)
        self.intervals = _intervals(paths, self.seen, subs)
        self.top = self.intervals.get(self.best.id, Intervals()) if self.best else Intervals()
        self.final = self.valid[-1] if self.valid else None
        self.last = self.intervals.get(self.final.id, Intervals()) if self.final else Intervals()
        if self.by_validation:  # one submission has a private score: both best and final
            self.top = _intervals(paths, baseline, [pick])[pick.id] if pick else Intervals()
            self.final, self.last = pick, self.top
        # the per-item files of the (private) baseline and the best
        self.base_items = _rel(paths, (baseline or {}).get("items_path"))
        by_id = {s.id: s for s in subs}
        self.best_items = _items_for(paths, self.best, by_id) if self.best else None

    def gain(self, sub: Submission | None, *, seen: bool = False) -> float | None:
        """``sub``'s improvement over the baseline, or with ``seen`` over the one its score
        was shown against (None: no submission, not comparable)."""
        if sub is None:
            return None
        base, base_hash = (
            (self.seen_score, self.seen_hash) if seen else (self.base_score, self.base_hash)
        )
        return improvement(sub.score, base, comparable(sub.eval_hash, base_hash))


def _run_fields(r: _Run) -> dict[str, Any]:
    """The run's own record: identity, settings, clock, confinement."""
    info = r.info
    return {
        **info.identity().model_dump(),
        "task_options": info.task_options,
        "decoding": _decoding_text(info.backend),
        "level": info.level,
        "status": info.status,
        "error": info.error,
        "budget_s": info.budget_s,
        "start": info.start,
        "deadline": info.deadline,
        "ended_at": info.ended_at,
        "duration_s": r.duration,
        "agent_uid": info.agent_uid,  # sandbox and network: the identity's
        # record/network.json's egress summary (None: no file, or a ``host`` run)
        "egress": _dict_or_none(_json_object(r.paths.network_json).get("egress")),
        "caps": info.caps,
        "cap_mechanism": info.cap_mechanism,
        "token_budget": info.token_budget,
    }


def _score_fields(r: _Run) -> dict[str, Any]:
    """The baseline, the best and final submissions and the validation protocol's grade."""
    best, final, grade = r.best, r.final, r.graded.final_grade
    # the first valid submission whose comparable score beats the baseline
    first_better = next((s for s in r.valid if (r.gain(s, seen=True) or 0) > 0), None)
    chosen = grade if r.by_validation else None
    return {
        "baseline": r.base_score,
        "baseline_n_items": r.graded.baseline.get("n_items") if r.graded.baseline else None,
        "best_score": best.score if best else None,
        "best_submission_id": best.id if best else None,
        "eval_hash": r.base_hash,
        "improvement": r.gain(best),
        "improvement_ci95": r.top.improvement_ci95,
        "best_score_ci95": r.top.score_ci95,
        "within_noise": r.top.within_noise,
        "n_items_paired": r.top.n_items_paired,
        "final_submission_id": final.id if final else None,
        "final_score": final.score if final else None,
        "final_improvement": r.gain(final),
        "final_improvement_ci95": r.last.improvement_ci95,
        "time_to_first_improvement": first_better.submitted_at - r.t0 if first_better else None,
        "time_to_best": best.submitted_at - r.t0 if best else None,
        "validation_baseline": r.seen_score if r.by_validation else None,
        "selected_validation_score": chosen.validation_score if chosen else None,
        "selected_by": chosen.selected_by if chosen else None,
        "final_grade_status": grade.status if grade else None,
        "final_grade_note": (grade.error or grade.note) if grade else None,
    }


def _submission_fields(r: _Run) -> dict[str, Any]:
    """Counts, rates and timing of the submissions, by the reference's rules and ours."""
    subs, valid, t0, info = r.graded.submissions, r.valid, r.t0, r.info
    budget = info.budget_s if info.budget_s and info.budget_s > 0 else None
    used = r.duration / budget if r.duration is not None and budget else None
    last_at = subs[-1].submitted_at if subs else None
    return {
        "submissions": len(subs),
        "valid_submissions": len(valid),
        "valid_submission_rate": (
            sum(1 for s in subs if _reference_valid(s)) / len(subs) if subs else None
        ),
        "first_valid_idx": next((i for i, s in enumerate(subs, 1) if _reference_valid(s)), None),
        "graded_submission_rate": len(valid) / len(subs) if subs else None,
        "first_graded_idx": next((i for i, s in enumerate(subs, 1) if s.valid), None),
        # The reference's runs over every submission's score (a failed one as 0) ...
        "monotonic_ratio": monotonic_ratio(
            [s.score if s.valid and s.score is not None else 0.0 for s in subs]
        ),
        # ... agent2rl's over the graded scores only.
        "non_decreasing_ratio": non_decreasing_ratio([s.score for s in valid]),  # type: ignore[misc]
        "copy_model_count": sum(1 for s in subs if s.is_copy),
        "duplicate_count": sum(1 for s in subs if s.duplicate_of is not None),
        "rejected_attempts": len(r.graded.rejections),
        "first_valid_delay": next((s.submitted_at - t0 for s in subs if _reference_valid(s)), None),
        # The reference's ratio is not clipped (core/metrics.py); agent2rl's clipped variant
        # has its own name.
        "time_used_ratio": used,
        "budget_used_ratio": min(1.0, max(0.0, used)) if used is not None else None,
        "last_submit_gap": (
            info.ended_at - last_at if last_at is not None and info.ended_at is not None else None
        ),
        "last_submit_to_deadline": (
            info.deadline - last_at if last_at is not None and info.deadline is not None else None
        ),
        "rejections": [
            _from_fields(RejectedAttempt, rej, t=rej.at - t0) for rej in r.graded.rejections
        ],
    }


def _record_fields(r: _Run) -> dict[str, Any]:
    """What the run's record adds: code changes, the trajectory, resources, LLM and
    environment use, judge and search figures, the agent's own view and integrity."""
    paths, subs = r.paths, r.graded.submissions
    changes = code_changes(r.git, subs)
    env = summarize_env(paths.env_db, r.t0)
    agent_log, methods, mode_flags = _agent_view(paths)
    trajectory = _trajectory(subs, r.t0, r.seen_hash, r.intervals)
    contamination = _contamination(paths)
    base_groups, best_groups = group_scores(r.base_items), group_scores(r.best_items)
    return {
        "code_changes": changes,
        "total_lines_changed": sum(
            c.added + c.removed for c in changes if c.added is not None and c.removed is not None
        ),
        "trajectory": trajectory,
        "resources": resource_summary(paths.resources),
        "llm_usage": (
            LLMUsage.model_validate(summarize_usage(paths.llm_usage))
            if paths.llm_usage.is_file()
            else None
        ),
        "env_usage": EnvUsage.model_validate(env) if env is not None else None,
        "group_scores": (
            GroupScores(baseline=base_groups, best=best_groups)
            if base_groups is not None or best_groups is not None
            else None
        ),
        "judge": judge_summary(paths, r.base_items, r.best_items),
        "search": search_summary(paths, env),
        "agent_log": agent_log,
        "methods": methods,
        "mode_flags": mode_flags,
        "not_derived_submissions": [
            tr.id for tr in trajectory if tr.identity and tr.identity.derived is False
        ],
        "chat_template_submissions": [
            tr.id for tr in trajectory if tr.identity and tr.identity.chat_template_changed
        ],
        "contamination": contamination,
        "integrity_flags": _integrity_flags(trajectory, contamination, mode_flags),
    }


def compute_metrics(paths: RunPaths) -> RunMetrics:
    """All per-run metrics of a finished run directory, read through its
    :class:`~agent2rl.run_record.RunRecord` (the ledger read-only: never migrated, never
    created).

    Times are seconds since ``start`` (the budget clock); a run that never started uses
    ``created_at`` as the origin. Scores are 0-100. Edge cases:

    - no ``ledger.db`` (the run failed before grading): zero submissions, no baseline;
    - no valid submission: ``best_score``, ``improvement``, the ``final_*`` fields, the
      intervals, ``time_to_best`` and ``first_valid_idx`` are None; no baseline:
      ``improvement`` and ``time_to_first_improvement`` are None;
    - ``final_*`` is the last valid submission (ledger order), compared with the baseline by
      the same rule as the best;
    - a score is compared with the baseline only when both eval hashes are known and equal
      (:func:`agent2rl.grading.comparison.comparable`): otherwise its trajectory point says
      ``comparable`` False and has no improvement interval, a best that is not comparable
      gives ``improvement`` None, and it cannot be the first improvement;
    - missing per-item files: the intervals and ``within_noise`` are None; only items present
      in both the baseline's and the best's files are paired;
    - the submission sequence's metrics (the reference's formulas under its names, agent2rl's
      variants under their own) are as :class:`RunMetrics` documents each; ``time_used_ratio``
      and ``budget_used_ratio`` need ``start``, ``ended_at`` and a positive budget;
    - ``code_changes`` entries have None counts where a snapshot is missing or unreadable;
      ``total_lines_changed`` sums the known ones (added + removed);
    - integrity: a submission without an identity report (an older ledger) has ``identity``
      None and raises no flag; no ``record/contamination.json`` gives ``contamination`` None
      (the check did not run), never "clean". Neither ever changes a score.
    """
    r = _Run(paths)
    return RunMetrics(
        **_run_fields(r), **_score_fields(r), **_submission_fields(r), **_record_fields(r)
    )
