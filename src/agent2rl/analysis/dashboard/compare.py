"""Cross-run comparison: a table of runs and per-(task, agent, driver) aggregates.

Scores are comparable only when they were graded under the same evaluation settings (task
version, data, prompt, generation settings, backend), which every run records as its
``eval_hash``. Comparing or averaging runs of one task with different hashes is refused with
an error that names the runs and the way out, rather than printing a misleading table. A
flagged run (:func:`is_flagged`) counts in the means as its base model, best = baseline and
improvement 0, unless ``raw`` (:mod:`agent2rl.analysis.dashboard.counting`); each group counts
its flagged runs either way.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import TypedDict

import numpy as np

from agent2rl.analysis.dashboard.counting import counts_as_flagged
from agent2rl.analysis.dashboard.results import ResultsRow
from agent2rl.analysis.dashboard.runset import isolation_label
from agent2rl.errors import UserError


class IncomparableRuns(UserError):
    """Runs of one task were graded under different evaluation settings."""


class RunGroup(TypedDict):
    """The runs of one (task, agent, driver), aggregated."""

    task: str | None
    agent: str | None
    driver: str | None
    runs: int
    mean_best: float | None
    """Over the runs with a best score (best of budget: selected over every graded
    submission, so optimistic)."""
    mean_improvement: float | None
    """Over the runs with an improvement (comparable with their baseline)."""
    std_improvement: float | None
    """Sample standard deviation; needs two improvements."""
    beyond_noise: int
    """Runs that improved with an interval excluding 0."""
    eval_hash: str | None
    flagged: int
    """Runs with an integrity flag (:func:`integrity_note`); unless ``raw`` they count in the
    means as their base model (improvement 0) and never as beyond noise."""
    raw: bool
    """Flagged runs counted as graded."""
    feedback: str
    """The grading protocol of the group's runs (``private`` or ``validation``): runs of the
    two protocols are never pooled (:mod:`agent2rl.grading.final`)."""
    isolation: str | None
    """How the group's agents were confined when not fully (``sandbox: none``, ``network:
    host``: :func:`~agent2rl.analysis.dashboard.runset.isolation_label`): runs of different
    confinement are never pooled. None: bwrap with the services network, or a row recorded
    before the ledger held it."""


def is_flagged(row: ResultsRow) -> bool:
    """Whether a results row counts as flagged (:func:`counts_as_flagged` on its integrity
    flags; a row recorded before the checks existed has none)."""
    return counts_as_flagged((row.get("integrity_flags") or "").split(","))


def counted_scores(row: ResultsRow, *, raw: bool = False) -> tuple[float | None, float | None]:
    """``(best, improvement)`` as a row counts in an aggregate: as recorded, or, for a
    flagged row unless ``raw``, its baseline and 0 (None for both without a baseline)."""
    if raw or not is_flagged(row):
        return row["best"], row["improvement"]
    if row["baseline"] is None:
        return None, None
    return row["baseline"], 0.0


def integrity_note(row: ResultsRow) -> str:
    """A run's integrity flags for a table cell: ``-`` for none, else the flags, with the
    number of private items found for a contaminated run (e.g. ``contaminated (12 items),
    model_not_derived``). A run recorded before the checks existed shows ``-``."""
    flags = [f for f in (row.get("integrity_flags") or "").split(",") if f]
    items = row.get("contaminated_items")
    return (
        ", ".join(f"{f} ({items} items)" if f == "contaminated" and items else f for f in flags)
        or "-"
    )


def check_comparable(rows: Sequence[ResultsRow]) -> None:
    """Raise :class:`IncomparableRuns` if two rows of one task have different eval hashes.

    Rows without an eval hash (a run that failed before its baseline) are ignored: they carry
    no score to compare.
    """
    by_task: dict[str | None, dict[str, str]] = defaultdict(dict)
    for row in rows:
        if row["eval_hash"]:
            by_task[row["task"]].setdefault(row["eval_hash"], row["run_id"])
    for task, hashes in by_task.items():
        if len(hashes) > 1:
            shown = ", ".join(f"{h} (e.g. {run})" for h, run in sorted(hashes.items()))
            raise IncomparableRuns(
                f"runs of {task} were graded under different evaluation settings (eval hashes "
                f"{shown}): their scores are not comparable. Pick one setting with "
                f"--eval-hash HASH, or compare other runs"
            )


def aggregate(rows: Sequence[ResultsRow], *, raw: bool = False) -> list[RunGroup]:
    """Per (task, agent, driver, feedback protocol, confinement): run count, mean and spread
    of best score and improvement, how many runs improved beyond noise and how many are
    flagged. Refuses incomparable rows (see :func:`check_comparable`). Runs without a best
    score count in ``runs`` only. A flagged run counts as its base model unless ``raw``
    (module docstring)."""
    check_comparable(rows)
    groups: dict[tuple[str | None, str | None, str | None, str, str | None], list[ResultsRow]] = (
        defaultdict(list)
    )
    for row in rows:
        # A validation-protocol run's best is one private grade selected on validation, a
        # private-protocol run's a maximum over private scores: never one mean. An agent
        # that ran unconfined (no sandbox, or the host's network) could reach what a
        # sandboxed one cannot: never one mean either.
        feedback = row.get("feedback") or "private"
        isolation = isolation_label(
            row.get("sandbox"), row.get("network"), row.get("provider_tools")
        )
        groups[(row["task"], row["agent"], row["driver"], feedback, isolation)].append(row)
    out = []
    for (task, agent, driver, feedback, isolation), members in sorted(
        groups.items(), key=lambda kv: str(kv[0])
    ):
        scores = [counted_scores(r, raw=raw) for r in members]
        best = [b for b, _ in scores if b is not None]
        imp = [i for _, i in scores if i is not None]
        out.append(
            RunGroup(
                task=task,
                agent=agent,
                driver=driver,
                runs=len(members),
                mean_best=float(np.mean(best)) if best else None,
                mean_improvement=float(np.mean(imp)) if imp else None,
                std_improvement=float(np.std(imp, ddof=1)) if len(imp) > 1 else None,
                beyond_noise=sum(
                    1
                    for r in members
                    if r["within_noise"] == 0
                    and (r["improvement"] or 0) > 0
                    and (raw or not is_flagged(r))
                ),
                eval_hash=next((r["eval_hash"] for r in members if r["eval_hash"]), None),
                flagged=sum(1 for r in members if is_flagged(r)),
                raw=raw,
                feedback=feedback,
                isolation=isolation,
            )
        )
    return out
