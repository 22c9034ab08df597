"""The scorer interface and what it produces: per-item results and the task-level score."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from agent2rl.dataset import Sample
from agent2rl.solvers.base import Output


@dataclass(frozen=True)
class ItemResult:
    """One graded item. ``score`` is in [0, 1]; ``correct`` is ``score >= 1`` for binary tasks.
    ``meta`` holds task-specific facts for the report (an episode's group and steps);
    ``meta["group"]``, when set, is the category the report breaks scores down by."""

    id: str
    prediction: str
    target: str
    correct: bool
    score: float
    meta: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        if d["meta"] is None:
            del d["meta"]
        return d


@dataclass
class EvalResult:
    """A task-level score (0-100) with the per-item results behind it."""

    score: float
    items: list[ItemResult]
    seconds: float = 0.0
    eval_hash: str = ""
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def n_items(self) -> int:
        return len(self.items)

    @staticmethod
    def from_items(items: list[ItemResult], **kw: Any) -> EvalResult:
        """Score = 100 x mean item score (0 for an empty list)."""
        score = 100.0 * sum(i.score for i in items) / len(items) if items else 0.0
        return EvalResult(score=score, items=items, **kw)


class Scorer(Protocol):
    """Judges a solver's outputs against the samples' targets; never calls the policy model."""

    def score(self, samples: list[Sample], outputs: list[Output]) -> list[ItemResult]:
        """One result per sample, in order."""
        ...

    def settings(self) -> dict[str, Any]:
        """Everything about the scorer that can change a score: part of the evaluation hash."""
        ...

    def details(self, items: list[ItemResult], outputs: list[Output]) -> dict[str, Any]:
        """Facts for the report beyond the score (a breakdown, the isolation used)."""
        ...
