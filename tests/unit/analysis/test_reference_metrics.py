"""The reference implementation's process metrics under its names, agent2rl's variants under
their own (issue #26 item 5), and metrics.json files written before the split."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_analysis import BUDGET, HALF, Sub, make_run

from agent2rl.analysis.report.compute_metrics import (
    compute_metrics,
    monotonic_ratio,
    non_decreasing_ratio,
)
from agent2rl.analysis.report.run_metrics import RunMetrics


def test_monotonic_ratio_counts_strict_increases_only() -> None:
    # 10 -> 10 is a tie: the reference does not count it, agent2rl's variant does.
    assert monotonic_ratio([10.0, 10.0, 20.0, 15.0]) == pytest.approx(1 / 3)
    assert non_decreasing_ratio([10.0, 10.0, 20.0, 15.0]) == pytest.approx(2 / 3)
    assert monotonic_ratio([5.0]) is None and non_decreasing_ratio([]) is None


def test_a_zero_score_is_graded_but_not_valid_in_the_reference_sense(tmp_path: Path) -> None:
    zero = [0.0] * 40
    paths = make_run(
        tmp_path / "r",
        HALF,
        [Sub(t=60, items=zero), Sub(t=120, items=zero), Sub(t=180, items=HALF)],
        ended_after=200,
    )
    m = compute_metrics(paths)
    assert m.valid_submissions == 3 and m.graded_submission_rate == pytest.approx(1.0)
    assert m.first_graded_idx == 1
    assert m.valid_submission_rate == pytest.approx(1 / 3) and m.first_valid_idx == 3
    # first_valid_delay: the start to that submission (core/metrics.py 51-55)
    assert m.first_valid_delay == pytest.approx(180.0)
    assert m.monotonic_ratio == pytest.approx(1 / 2)  # 0 -> 0 (tie), 0 -> 50
    assert m.non_decreasing_ratio == pytest.approx(1.0)
    assert m.last_submit_gap == pytest.approx(20.0)  # to the run's end
    assert m.last_submit_to_deadline == pytest.approx(BUDGET - 180)


def test_an_older_metrics_json_keeps_its_numbers_under_the_new_names(tmp_path: Path) -> None:
    paths = make_run(tmp_path / "r", HALF, [Sub(t=60, items=HALF), Sub(t=90, items=HALF)])
    old = compute_metrics(paths).to_json()
    for key in ("non_decreasing_ratio", "last_submit_to_deadline", "graded_submission_rate",
                "first_graded_idx"):  # fmt: skip
        old.pop(key)
    old.update(monotonic_ratio=1.0, last_submit_gap=510.0, valid_submission_rate=1.0,
               first_valid_idx=1)  # fmt: skip
    f = tmp_path / "metrics.json"
    f.write_text(json.dumps(old))
    m = RunMetrics.read(f)
    assert (m.non_decreasing_ratio, m.last_submit_to_deadline) == (1.0, 510.0)
    assert (m.graded_submission_rate, m.first_graded_idx) == (1.0, 1)
    # The old file did not compute the reference's quantities: unknown, not agent2rl's.
    assert m.monotonic_ratio is None and m.last_submit_gap is None
    assert m.valid_submission_rate is None and m.first_valid_idx is None
