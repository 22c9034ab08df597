"""Scaling curves and trajectories on constructed runs."""

from __future__ import annotations

import pytest
from support.studyruns import make_run

from agent2rl.analysis.dashboard.curves import (
    best_so_far_steps,
    scaling_curves,
    step_value,
    tokens_at,
)
from agent2rl.analysis.dashboard.trajectories import trajectories


def test_best_so_far_step_function() -> None:
    run = make_run(baseline=10, scores=[12, None, 11, 16], times=[10, 20, 30, 40])
    steps = best_so_far_steps(run, "time")
    assert steps == [(0.0, 0.0), (10, 2.0), (40, 6.0)]
    assert step_value(steps, 5) == 0.0 and step_value(steps, 39) == 2.0
    assert step_value(steps, 1000) == 6.0
    subs = best_so_far_steps(run, "submissions")
    assert subs == [(0.0, 0.0), (1.0, 2.0), (4.0, 6.0)]  # invalid ones count in x
    assert best_so_far_steps(run, "tokens") is None  # no token record
    assert best_so_far_steps(make_run(baseline=None, scores=[5]), "time") is None


def test_tokens_axis_reads_the_timeline() -> None:
    timeline = [(1.0, 100), (15.0, 250), (35.0, 400)]
    assert tokens_at(timeline, 0.5) == 0 and tokens_at(timeline, 15) == 250
    run = make_run(baseline=0, scores=[5, 9], times=[20, 40], token_timeline=timeline)
    assert best_so_far_steps(run, "tokens") == [(0.0, 0.0), (250.0, 5.0), (400.0, 9.0)]


def test_mean_and_band_over_repeats() -> None:
    runs = [
        make_run(agent="a", baseline=0, scores=[4], times=[10], budget_s=100),
        make_run(agent="a", baseline=0, scores=[8], times=[50], budget_s=100),
        make_run(agent="b", baseline=0, scores=[1], times=[10], budget_s=100),
    ]
    curves = {c.key.stack.agent: c for c in scaling_curves(runs, "time", points=11)}
    a = curves["a"]
    assert a.n == 2 and a.xs[0] == 0 and a.xs[-1] == 100
    at = dict(zip(a.xs, a.mean, strict=True))
    assert at[0.0] == 0.0 and at[20.0] == pytest.approx(2.0) and at[60.0] == pytest.approx(6.0)
    lo = dict(zip(a.xs, a.lo, strict=True))
    assert lo[60.0] == pytest.approx(6.0 - 2**0.5 * 2)  # std of (4, 8)
    assert curves["b"].lo is None  # one run: no band
    subs = {c.key.stack.agent: c for c in scaling_curves(runs, "submissions")}
    assert subs["a"].xs == [0.0, 1.0] and subs["a"].mean == [0.0, 6.0]
    assert scaling_curves(runs, "tokens") == []
    with pytest.raises(ValueError):
        scaling_curves(runs, "cost")  # type: ignore[arg-type]


def test_trajectories_mark_the_best() -> None:
    (t,) = trajectories([make_run(baseline=3, scores=[4, None, 9], repeat=1)])
    assert t.baseline == 3 and t.repeat == 1
    assert [(s.index, s.score, s.is_best) for s in t.steps] == [
        (1, 4, False),
        (2, None, False),
        (3, 9, True),
    ]
