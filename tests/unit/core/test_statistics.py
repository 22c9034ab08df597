"""Bootstrap intervals for a score and for a paired difference, and the per-item files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent2rl.statistics import (
    Intervals,
    bootstrap_ci,
    compare_items,
    load_item_scores,
    paired_bootstrap_ci,
)


def test_bootstrap_ci_edges_and_determinism() -> None:
    assert bootstrap_ci([]) is None
    assert bootstrap_ci([3.0] * 10) == pytest.approx((3.0, 3.0))
    values = [(i * 37 % 101) / 100 for i in range(100)]  # spread over [0, 1], mean ~0.5
    lo, hi = bootstrap_ci(values)
    assert lo < 0.5 < hi and hi - lo < 0.3
    assert bootstrap_ci(values) == (lo, hi)  # fixed seed
    assert bootstrap_ci(values, seed=1) != (lo, hi)
    with pytest.raises(ValueError):
        paired_bootstrap_ci([1.0, 2.0], [1.0])
    with pytest.raises(ValueError):
        bootstrap_ci(values, confidence=1.5)


def test_paired_bootstrap_is_tighter_than_unpaired() -> None:
    # b is a plus a constant shift: pairing removes item variance entirely
    a = [float(i % 7) for i in range(60)]
    b = [x + 1.0 for x in a]
    assert paired_bootstrap_ci(b, a) == pytest.approx((1.0, 1.0))


def test_compare_items_pairs_only_comparable_common_items() -> None:
    base = {f"q{i}": float(i % 2) for i in range(40)}  # 50
    better = base | {f"q{i}": 1.0 for i in range(0, 40, 2)} | {"extra": 1.0}  # 100
    paired = compare_items(better, base)
    assert paired.n_items_paired == 40  # "extra" has no baseline item
    assert paired.improvement_ci95[0] > 0 and paired.within_noise is False
    assert paired.score_ci95 is not None
    # graded under other settings: its own interval, nothing against the baseline
    apart = compare_items(better, base, comparable=False)
    assert apart == Intervals(score_ci95=paired.score_ci95)
    assert compare_items(None, base) == Intervals()
    assert compare_items(better, {"nope": 1.0}) == Intervals(score_ci95=paired.score_ci95)


def test_item_scores_skip_torn_lines(tmp_path: Path) -> None:
    path = tmp_path / "items.jsonl"
    rows = [{"id": "a", "score": 0.5}, {"id": "b", "correct": True}, {"score": 1.0}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"id": "c", "sco')
    assert load_item_scores(path) == {"a": 0.5, "b": 1.0}
    assert load_item_scores(tmp_path / "missing.jsonl") is None
