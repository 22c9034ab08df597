"""The leaderboard: statistics over repeats, bootstrap intervals, eval-hash groups."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from support.studyruns import make_run

from agent2rl.analysis.dashboard.leaderboard import leaderboard, stat
from agent2rl.analysis.dashboard.runset import mixed_tasks
from agent2rl.statistics import bootstrap_mean_ci


def test_bootstrap_ci_known_answers() -> None:
    assert bootstrap_mean_ci([4.0]) is None  # one run: no spread to speak of
    assert bootstrap_mean_ci([]) is None
    assert bootstrap_mean_ci([3.0, 3.0, 3.0]) == (3.0, 3.0)
    # Two values: resampled means are 0, 5, 10 with probabilities 1/4, 1/2, 1/4, so the
    # 2.5% and 97.5% quantiles are the extremes.
    assert bootstrap_mean_ci([0.0, 10.0]) == (0.0, 10.0)
    # Deterministic for a seed, and the interval holds the mean.
    a = bootstrap_mean_ci([1.0, 2.0, 6.0, 7.0], seed=3)
    assert a == bootstrap_mean_ci([1.0, 2.0, 6.0, 7.0], seed=3)
    assert a[0] <= 4.0 <= a[1]


def test_bootstrap_ci_against_the_exact_bootstrap_distribution() -> None:
    values = [0.0, 1.0, 5.0]
    # All 27 equally likely resamples: their means' exact 2.5%/97.5% quantiles (each
    # extreme, 0 and 5, has probability 1/27 > 2.5%, so the interval is [0, 5]).
    means = sorted(np.mean(c) for c in itertools.product(values, repeat=3))
    exact = tuple(np.quantile(means, q, method="inverted_cdf") for q in (0.025, 0.975))
    assert exact == (0.0, 5.0)
    assert bootstrap_mean_ci(values, n_resamples=20000) == pytest.approx(exact)


def test_stat() -> None:
    s = stat([1.0, 2.0, 3.0])
    assert (s.n, s.mean, s.std) == (3, 2.0, 1.0)
    assert s.ci95 is not None and s.ci95[0] <= 2.0 <= s.ci95[1]
    one = stat([5.0])
    assert (one.n, one.mean, one.std, one.ci95) == (1, 5.0, None, None)
    assert stat([]).mean is None


def test_rows_per_stack_with_means_and_counts() -> None:
    runs = [
        make_run(agent="sft", baseline=10, scores=[12, 14]),
        make_run(agent="sft", baseline=10, scores=[None, 18]),
        make_run(agent="sft", baseline=10, scores=[None], status="deadline"),
        make_run(agent="grpo", baseline=10, scores=[30]),
        make_run(agent="grpo", baseline=None, scores=[], status="harness_error", eval_hash=None),
    ]
    rows = {r.key.stack.agent: r for r in leaderboard(runs)}
    sft, grpo = rows["sft"], rows["grpo"]
    assert (sft.runs, sft.scored, sft.no_valid) == (3, 3, 1)
    assert sft.improvement.mean == pytest.approx((4 + 8 + 0) / 3)
    assert sft.best.mean == pytest.approx((14 + 18 + 10) / 3)
    assert sft.improvement.std == pytest.approx(np.std([4, 8, 0], ddof=1))
    assert sft.valid_rate == pytest.approx((1 + 0.5 + 0) / 3)
    assert (sft.submissions, sft.valid_submissions) == (5, 3)
    # The run that failed before its baseline joins its task's only hash and counts in n.
    assert (grpo.runs, grpo.scored) == (2, 1)
    assert grpo.statuses == {"deadline": 1, "harness_error": 1}
    assert grpo.improvement.ci95 is None  # one scored run
    assert [r.key.stack.agent for r in leaderboard(runs)] == ["grpo", "sft"]  # best first
    assert sft.tokens.mean is None and sft.cost_usd.mean is None  # no LLM


def test_a_task_under_two_eval_settings_is_split_not_pooled() -> None:
    runs = [
        make_run(agent="a", baseline=10, scores=[20], eval_hash="h1"),
        make_run(agent="a", baseline=50, scores=[52], eval_hash="h2"),
    ]
    rows = leaderboard(runs)
    assert len(rows) == 2
    assert {r.key.eval_hash for r in rows} == {"h1", "h2"}
    assert mixed_tasks(runs) == {"arith-lite": ["h1", "h2"]}
