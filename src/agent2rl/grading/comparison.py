"""Scores against the baseline: the one rule for when a score may be compared with it, which
submission is the best, and the improvement a score claims.

The grading service (its HTTP answers and their intervals), the ledger and the per-run
metrics all decide through these three functions, so an improvement shown to the agent during
the run and the one in the report can never disagree.

Every score is graded under evaluation settings (task version, data, prompt, generation
settings, backend) summarised by its ``eval_hash``. Two scores are comparable only when both
hashes are known and equal: a score whose settings were not recorded cannot be claimed
comparable, whichever side lacks the hash.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol, TypeVar


class Scored(Protocol):
    """What :func:`best` needs of a submission (``grading.ledger.Submission`` has it)."""

    @property
    def id(self) -> int: ...

    @property
    def score(self) -> float | None: ...

    @property
    def valid(self) -> bool: ...


S = TypeVar("S", bound=Scored)


def comparable(eval_hash: str | None, baseline_hash: str | None) -> bool:
    """True when a score graded under ``eval_hash`` may be compared with the baseline graded
    under ``baseline_hash``: both are known (neither None nor empty, as in an older ledger's
    baseline) and equal."""
    return bool(eval_hash) and bool(baseline_hash) and eval_hash == baseline_hash


def best(submissions: Iterable[S]) -> S | None:
    """The valid submission with the highest score; the earliest (lowest id) wins a tie, so a
    later duplicate or copy of the best never displaces it. None without a valid submission.

    Comparability plays no part: the best score is the best score, and whether it may claim
    an improvement is :func:`improvement`'s question.
    """
    valid = [s for s in submissions if s.valid and s.score is not None]
    return max(valid, key=lambda s: (s.score, -s.id)) if valid else None


def improvement(
    score: float | None, baseline_score: float | None, comparable: bool
) -> float | None:
    """``score - baseline_score`` in score points, or None when either is unknown or the two
    are not ``comparable`` (see :func:`comparable`): an improvement across evaluation
    settings would compare different tests."""
    if score is None or baseline_score is None or not comparable:
        return None
    return score - baseline_score
