"""The leaderboard: per task x agent stack, statistics over repeats.

One row per :class:`~agent2rl.analysis.dashboard.runset.GroupKey` (task, eval hash, model, stack):
mean, sample standard deviation and a 95% percentile-bootstrap interval of the mean over the
repeats, for the baseline, the best score and the improvement (the best of budget rule of
:func:`~agent2rl.analysis.dashboard.runset.outcome`: selected over every graded submission, so
optimistic), the final submission's score and improvement beside them, plus the
valid-submission rate and what the driver LLM cost. A task graded under more than one
evaluation setting gets one block of rows per setting, never a pooled one. A flagged run counts
as its base model unless ``raw`` (:mod:`agent2rl.analysis.dashboard.counting`); each row counts
its flagged runs either way.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from agent2rl.analysis.dashboard.counting import counted
from agent2rl.analysis.dashboard.runset import GroupKey, StudyRun, group_runs
from agent2rl.statistics import bootstrap_mean_ci


@dataclass(frozen=True)
class Stat:
    """Summary of one quantity over a group's repeats. ``std`` needs two values (sample
    standard deviation), ``ci95`` too (one run has no interval); both None otherwise."""

    n: int
    mean: float | None
    std: float | None
    ci95: tuple[float, float] | None


def stat(values: Sequence[float], *, seed: int = 0) -> Stat:
    """:class:`Stat` of ``values`` (an empty sequence gives n 0 and Nones)."""
    arr = np.asarray(values, dtype=float)
    if arr.size == 0:
        return Stat(0, None, None, None)
    return Stat(
        int(arr.size),
        float(arr.mean()),
        float(arr.std(ddof=1)) if arr.size > 1 else None,
        bootstrap_mean_ci(list(arr), seed=seed),
    )


@dataclass(frozen=True)
class LeaderboardRow:
    """One group's statistics (see the module docstring)."""

    key: GroupKey
    runs: int
    """Runs in the group, those without a baseline included."""
    scored: int
    """Runs with an outcome (a baseline)."""
    no_valid: int
    """Scored runs without a valid comparable submission (counted as improvement 0)."""
    flagged: int
    """Scored runs with an integrity or mode flag; unless ``raw``, each counts as its base
    model (best = final = baseline, improvement 0)."""
    baseline: Stat
    best: Stat
    """Best of budget: the maximum over every graded submission (selected, optimistic)."""
    improvement: Stat
    final: Stat
    """The last valid submission's score (not selected)."""
    final_improvement: Stat
    beyond_noise: int
    """Runs whose improvement's paired interval excludes 0, upwards."""
    valid_rate: float | None
    """Mean over runs with submissions of valid / all submissions."""
    submissions: int
    valid_submissions: int
    tokens: Stat
    """Driver LLM tokens per run (runs with a metering proxy only)."""
    cost_usd: Stat
    statuses: dict[str, int]
    run_ids: tuple[str, ...]
    raw: bool = False
    """Flagged runs counted as graded (True) or as their base model (False, the default)."""


def leaderboard(
    runs: Sequence[StudyRun], *, seed: int = 0, raw: bool = False
) -> list[LeaderboardRow]:
    """Rows per group, ordered by task, eval hash, then mean improvement (best first),
    groups without any outcome last. ``raw`` counts flagged runs as graded (module
    docstring); ``beyond_noise`` never counts a flagged run unless ``raw``."""
    rows = []
    for key, members in group_runs(runs).items():
        by_run = {r.run_id: counted(r.metrics, raw=raw) for r in members}
        outs = [o for o in by_run.values() if o is not None]
        zeroed = {run_id for run_id, o in by_run.items() if o is not None and o.zeroed}
        rates = [
            r.metrics.valid_submissions / r.metrics.submissions
            for r in members
            if r.metrics.submissions
        ]
        usage = [r.metrics.llm_usage for r in members if r.metrics.llm_usage is not None]
        rows.append(
            LeaderboardRow(
                key=key,
                runs=len(members),
                scored=len(outs),
                no_valid=sum(1 for o in outs if not o.has_valid),
                flagged=sum(1 for o in outs if o.flagged),
                baseline=stat([o.baseline for o in outs], seed=seed),
                best=stat([o.best for o in outs], seed=seed),
                improvement=stat([o.improvement for o in outs], seed=seed),
                final=stat([o.final for o in outs], seed=seed),
                final_improvement=stat([o.final_improvement for o in outs], seed=seed),
                beyond_noise=sum(
                    1
                    for r in members
                    if r.metrics.within_noise is False
                    and (r.metrics.improvement or 0) > 0
                    and r.run_id not in zeroed
                ),
                valid_rate=float(np.mean(rates)) if rates else None,
                submissions=sum(r.metrics.submissions for r in members),
                valid_submissions=sum(r.metrics.valid_submissions for r in members),
                tokens=stat([u.total_tokens for u in usage], seed=seed),
                cost_usd=stat([u.cost_usd for u in usage], seed=seed),
                statuses=dict(Counter(r.metrics.status for r in members)),
                run_ids=tuple(r.run_id for r in members),
                raw=raw,
            )
        )

    def order(row: LeaderboardRow) -> tuple:
        mean = row.improvement.mean
        return (row.key.task, row.key.eval_hash or "", mean is None, -(mean or 0.0))

    return sorted(rows, key=order)
