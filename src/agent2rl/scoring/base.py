"""The scorer interface and what it produces: per-item results and the task-level score."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from agent2rl.dataset import Sample
from agent2rl.solvers.base import Output
from agent2rl.statistics import MEAN, Metric


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
    """A task-level score with the per-item results behind it. ``metrics`` holds every
    declared metric's value by name, the score's first (empty for a result built by hand)."""

    score: float
    items: list[ItemResult]
    seconds: float = 0.0
    eval_hash: str = ""
    details: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)

    @property
    def n_items(self) -> int:
        return len(self.items)

    @staticmethod
    def from_items(
        items: list[ItemResult], metrics: Sequence[Metric] | None = None, **kw: Any
    ) -> EvalResult:
        """Score = the first of ``metrics`` (the scorer's declared ones, see
        :func:`agent2rl.scoring.metrics.declared_metrics`) over the items' records; without
        ``metrics``, 100 x mean item score (0 for an empty list)."""
        metrics = list(metrics or [MEAN])
        records = [i.to_dict() for i in items]
        values = {m.name: float(m.value(records)) for m in metrics}
        return EvalResult(score=values[metrics[0].name], items=items, metrics=values, **kw)


class Scorer(Protocol):
    """Judges a solver's outputs against the samples' targets; never calls the policy model.

    A scorer may also declare ``metrics``, a list of :class:`~agent2rl.statistics.Metric`
    (:mod:`agent2rl.scoring.metrics`): the first is the task's score, computed from the items'
    records, and gives its interval. Without it the score is 100 x the mean item ``score``.
    A declared metric other than the default belongs in :meth:`settings` (it changes what
    the score means, so the eval hash must see it)."""

    def score(self, samples: list[Sample], outputs: list[Output]) -> list[ItemResult]:
        """One result per sample, in order."""
        ...

    def settings(self) -> dict[str, Any]:
        """Everything about the scorer that can change a score: part of the evaluation hash."""
        ...

    def details(self, items: list[ItemResult], outputs: list[Output]) -> dict[str, Any]:
        """Facts for the report beyond the score (a breakdown, the isolation used)."""
        ...
