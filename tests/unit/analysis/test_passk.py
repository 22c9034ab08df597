"""pass@k: the unbiased estimator against brute force and hand-computed answers."""

from __future__ import annotations

import itertools
from statistics import mean

import pytest
from support.studyruns import make_run

from agent2rl.analysis.dashboard.passk import pass_at_k
from agent2rl.statistics import expected_max_of_k, pass_at_k_curve


def brute_force(values, k):
    return mean(max(c) for c in itertools.combinations(values, k))


def test_known_answers() -> None:
    xs = [1.0, 2.0, 3.0]
    assert expected_max_of_k(xs, 1) == pytest.approx(2.0)  # the mean
    assert expected_max_of_k(xs, 2) == pytest.approx(8 / 3)  # maxes 2, 3, 3
    assert expected_max_of_k(xs, 3) == pytest.approx(3.0)  # the max
    assert expected_max_of_k([3.0, 1.0, 2.0], 2) == pytest.approx(8 / 3)  # order-free


@pytest.mark.parametrize(
    "values", [[5.0], [0.0, 0.0, 4.0], [-2.0, 7.5, 7.5, 1.0, 3.0], [2.0, -1.0, 0.5, 9.0, 4.0, 4.0]]
)
def test_matches_the_mean_over_all_subsets(values) -> None:
    for k in range(1, len(values) + 1):
        assert expected_max_of_k(values, k) == pytest.approx(brute_force(values, k))


def test_curve_is_non_decreasing_from_mean_to_max() -> None:
    values = [0.5, -3.0, 4.0, 2.0]
    curve = pass_at_k_curve(values)
    assert [k for k, _ in curve] == [1, 2, 3, 4]
    ys = [v for _, v in curve]
    assert ys == sorted(ys)
    assert ys[0] == pytest.approx(mean(values)) and ys[-1] == pytest.approx(max(values))
    assert pass_at_k_curve([]) == []


@pytest.mark.parametrize("k", [0, 4])
def test_k_out_of_range_is_refused(k) -> None:
    with pytest.raises(ValueError, match="k must be in 1..3"):
        expected_max_of_k([1.0, 2.0, 3.0], k)


def test_per_stack_with_the_best_of_budget_rule() -> None:
    runs = [
        make_run(agent="a", baseline=10, scores=[12, 15]),  # +5
        make_run(agent="a", baseline=10, scores=[11]),  # +1
        make_run(agent="a", baseline=10, scores=[None]),  # no valid submission: 0
        make_run(agent="b", baseline=10, scores=[20]),  # +10
        make_run(agent="b", baseline=None, scores=[], status="harness_error"),  # no outcome
    ]
    curves = {c.key.stack.agent: c for c in pass_at_k(runs)}
    a, b = curves["a"], curves["b"]
    assert a.n == 3 and a.points[0][1] == pytest.approx(2.0)
    assert a.points[1][1] == pytest.approx(brute_force([5, 1, 0], 2))
    assert a.points[2][1] == pytest.approx(5.0)
    assert b.n == 1 and b.points == [(1, 10.0)]
