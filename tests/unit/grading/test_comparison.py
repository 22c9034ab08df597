"""The one rule for comparing a score with the baseline, the best submission, the improvement."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from agent2rl.grading.comparison import best, comparable, improvement
from agent2rl.grading.ledger import Ledger


@pytest.mark.parametrize(
    "eval_hash,baseline_hash,expected",
    [
        ("E1", "E1", True),
        ("E2", "E1", False),  # other settings
        (None, "E1", False),  # the submission's settings are unknown
        ("E1", None, False),  # the baseline's settings are unknown (an older ledger)
        (None, None, False),  # both unknown: still not claimed comparable
        ("", "", False),
    ],
)
def test_comparable_needs_both_hashes_known_and_equal(
    eval_hash: str | None, baseline_hash: str | None, expected: bool
) -> None:
    assert comparable(eval_hash, baseline_hash) is expected


def test_improvement_only_when_comparable() -> None:
    assert improvement(70.0, 50.0, True) == 20.0
    assert improvement(70.0, 50.0, False) is None
    assert improvement(None, 50.0, True) is None
    assert improvement(70.0, None, True) is None


@dataclass
class _Sub:
    id: int
    score: float | None
    valid: bool = True


def test_best_is_the_highest_score_and_the_earliest_on_a_tie() -> None:
    subs = [_Sub(1, 50.0), _Sub(2, 70.0), _Sub(3, 90.0, valid=False), _Sub(4, 70.0)]
    assert best(subs).id == 2
    assert best([]) is None and best([_Sub(1, None, valid=False)]) is None


def test_the_ledger_uses_the_same_best(tmp_path) -> None:
    with Ledger(tmp_path / "ledger.db") as ledger:
        for score in (50.0, 70.0, 70.0):
            sid = ledger.add_submission("output/m", "h", "E1")
            ledger.update_submission(sid, status="graded", score=score)
        failed = ledger.add_submission("output/x", "h", "E1")
        ledger.update_submission(failed, status="failed", error="boom")
        assert ledger.best().id == 2
        assert ledger.best() == best(ledger.submissions())
