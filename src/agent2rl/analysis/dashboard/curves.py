"""Scaling curves (the paper's Figs. 3 and 7): best-so-far improvement against wall time,
tokens used and submissions, per group, as a mean with a band over repeats.

Each run's curve is a step function: 0 until its first valid submission graded under the
baseline's settings (the base model stands), then the best such score so far minus the
baseline. On the ``time`` axis x is seconds since the run's start; on ``tokens`` it is the
driver LLM's cumulative input+output tokens when the submission was made (runs without a
metering record have no tokens curve); on ``submissions`` it is the submission's position
(1, 2, ...; invalid ones count, they used the budget too). Runs are evaluated on a common
grid and averaged; a run keeps its last value after its end. The band is mean ± one sample
standard deviation over the runs (none for a single run). A flagged run is a flat 0 (its base
model) unless ``raw`` (:mod:`agent2rl.analysis.dashboard.counting`); each curve counts them.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from agent2rl.analysis.dashboard.counting import counts_as_flagged, run_flags
from agent2rl.analysis.dashboard.runset import GroupKey, StudyRun, group_runs

Axis = Literal["time", "tokens", "submissions"]
AXES: tuple[Axis, ...] = ("time", "tokens", "submissions")
#: grid points per curve on the continuous axes
GRID_POINTS = 60


def tokens_at(timeline: Sequence[tuple[float, int]], t: float) -> int:
    """Cumulative tokens of the requests made at or before ``t`` (0 before the first)."""
    i = bisect.bisect_right(timeline, t, key=lambda p: p[0])
    return timeline[i - 1][1] if i else 0


def best_so_far_steps(run: StudyRun, axis: Axis) -> list[tuple[float, float]] | None:
    """The run's step function as ``[(x, improvement from x on)]``, starting at ``(0, 0)``.

    None when the run has no baseline, or on the tokens axis when it has no token record.
    """
    m = run.metrics
    if m.baseline is None or (axis == "tokens" and not run.token_timeline):
        return None
    steps: list[tuple[float, float]] = [(0.0, 0.0)]
    best: float | None = None
    for i, p in enumerate(m.trajectory, 1):
        if p.score is None or p.comparable is False:
            continue
        gain = p.score - m.baseline
        if best is not None and gain <= best:
            continue
        best = gain
        x = {"time": p.t, "submissions": float(i)}.get(axis)
        if x is None:
            x = float(tokens_at(run.token_timeline, p.t))
        steps.append((max(0.0, x), gain))
    return steps


def step_value(steps: Sequence[tuple[float, float]], x: float) -> float:
    """The step function's value at ``x`` (the last step at or before it)."""
    i = bisect.bisect_right(steps, x, key=lambda s: s[0])
    return steps[i - 1][1] if i else steps[0][1]


@dataclass(frozen=True)
class Curve:
    """One group's mean curve on one axis, with its band and the runs behind it."""

    key: GroupKey
    axis: Axis
    xs: list[float]
    mean: list[float]
    lo: list[float] | None
    hi: list[float] | None
    n: int
    flagged: int = 0
    """Runs of ``n`` with a flag: a flat 0 in the mean unless ``raw``."""


def _extent(run: StudyRun, axis: Axis, steps: list[tuple[float, float]]) -> float:
    m = run.metrics
    if axis == "time":
        return max([m.budget_s or 0.0, m.duration_s or 0.0, steps[-1][0]])
    if axis == "submissions":
        return float(max(m.submissions, 1))
    return float(run.token_timeline[-1][1]) if run.token_timeline else steps[-1][0]


def scaling_curves(
    runs: Sequence[StudyRun], axis: Axis, points: int = GRID_POINTS, *, raw: bool = False
) -> list[Curve]:
    """One :class:`Curve` per group with at least one run that has a curve on ``axis``; a
    flagged run's curve is a flat 0 (its base model) unless ``raw`` (module docstring).

    The grid runs from 0 to the largest extent in the group (the budget or duration on
    ``time``, the most submissions on ``submissions`` with one point per submission, the
    most tokens on ``tokens``).
    """
    if axis not in AXES:
        raise ValueError(f"unknown axis {axis!r}: use one of {', '.join(AXES)}")
    out = []
    for key, members in group_runs(runs).items():
        curves = [(r, s) for r in members if (s := best_so_far_steps(r, axis)) is not None]
        if not curves:
            continue
        end = max(_extent(r, axis, s) for r, s in curves)
        if axis == "submissions":
            xs = [float(i) for i in range(0, int(end) + 1)]
        else:
            xs = list(np.linspace(0.0, end if end > 0 else 1.0, points))
        flagged = {id(r) for r, _ in curves if counts_as_flagged(run_flags(r.metrics))}
        values = np.array(
            [
                [0.0 if id(r) in flagged and not raw else step_value(s, x) for x in xs]
                for r, s in curves
            ]
        )
        mean = values.mean(axis=0)
        sd = values.std(axis=0, ddof=1) if len(curves) > 1 else None
        lo, hi = (list(mean - sd), list(mean + sd)) if sd is not None else (None, None)
        xs_out = [float(x) for x in xs]
        out.append(Curve(key, axis, xs_out, list(mean), lo, hi, len(curves), len(flagged)))
    return out
