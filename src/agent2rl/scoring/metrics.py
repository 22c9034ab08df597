"""Metrics a scorer declares (Inspect's ``@scorer(metrics=[...])``): what the task's score is.

A scorer may set ``metrics``, a list of :class:`~agent2rl.statistics.Metric` (registered here
by name); the first is the task's score, the others are reported beside it. A scorer that
declares none is scored by :data:`~agent2rl.statistics.MEAN`, 100 x the mean item score, the
harness's score since its first version. The grading worker records the names and values in
``result.json`` (``"metrics": {name: value}``, the score's first); whoever later needs the
score's interval or a paired improvement (the grading service, the report, ``agent2rl eval``)
reads the name back (:func:`metric_for`) and asks that metric, never averaging ``score``.

Declaring a metric::

    from agent2rl.scoring.metrics import ResampledMetric, metric

    @metric
    class Median(ResampledMetric):
        name = "median"

        def value(self, records):
            return 100.0 * float(np.median([r["score"] for r in records])) if records else 0.0

    class MyScorer:
        metrics = [Median()]      # or [metric_named("median")]
        ...

Registering one makes its name resolvable where the grader's records are read: a metric
in a task module is registered when the task is imported (every consumer imports the task
registry); an installed distribution may add one through the ``agent2rl.metrics`` entry-point
group. A name taken by another metric is refused (:class:`~agent2rl.registry.RegistryConflict`).
A metric is part of what the score means: a scorer whose declared metric is not the default
names it in its ``settings()`` (the eval hash), as :class:`~agent2rl.scoring.Judge` does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

from agent2rl.files import read_json
from agent2rl.registry import Registry
from agent2rl.statistics import (
    MEAN,
    MeanMetric,
    Metric,
    Record,
    ResampledMetric,
    item_score,
)


def _instance(obj: Any) -> Metric:
    """A metric class's one instance (made once, with no arguments); an instance as is."""
    if not isinstance(obj, type):
        return obj
    if "_registered_metric" not in obj.__dict__:
        obj._registered_metric = obj()  # type: ignore[attr-defined]
    return obj.__dict__["_registered_metric"]


#: every metric by name (an entry point of group ``agent2rl.metrics`` names a Metric class or
#: instance, or a module whose import registers its metrics)
METRICS: Registry[Metric] = Registry("metrics", "metric", coerce=_instance)

M = TypeVar("M")


def metric(obj: M) -> M:
    """Register a metric (an instance, or a class: its one instance, made with no arguments)
    under its ``name``; returns ``obj`` unchanged, so it works as a class decorator. Another
    metric under a taken name raises :class:`~agent2rl.registry.RegistryConflict`; the same
    class or instance again is a no-op (a module imported twice)."""
    instance = _instance(obj)
    METRICS.register(instance.name, instance)
    return obj


def metric_named(name: str) -> Metric:
    """The registered metric ``name``; :class:`~agent2rl.registry.UnknownName` (a
    :class:`~agent2rl.errors.UserError` listing the known ones) for another name."""
    return METRICS[name]


def declared_metrics(scorer: Any) -> list[Metric]:
    """The metrics ``scorer`` declares (its ``metrics`` attribute), or ``[MEAN]`` when it
    declares none (or an empty list). Raises ``TypeError`` for an entry that is not a
    :class:`~agent2rl.statistics.Metric` (a scorer's bug, found on its first evaluation)."""
    metrics = list(getattr(scorer, "metrics", None) or [MEAN])
    for m in metrics:
        if not isinstance(m, Metric):
            raise TypeError(f"{type(scorer).__name__}.metrics: {m!r} is not a Metric")
    return metrics


def metric_for(items_path: Path | None) -> Metric | None:
    """The metric the score of the evaluation that wrote ``items_path`` is, read from the
    ``result.json`` beside it.

    :data:`~agent2rl.statistics.MEAN` when that file names no metric (an evaluation recorded
    before scorers declared metrics, when the score was the mean item score) or cannot be
    read; None when it names a metric no module registered here (the caller then has no
    interval to give, rather than a wrong one).
    """
    if items_path is None:
        return MEAN
    try:
        result = read_json(Path(items_path).with_name("result.json"))
    except (OSError, ValueError):
        return MEAN
    names = result.get("metrics") if isinstance(result, dict) else None
    if not isinstance(names, dict | list) or not names:
        return MEAN
    first = next(iter(names))
    return METRICS.get(first) if isinstance(first, str) else None


metric(MEAN)

__all__ = [
    "MEAN",
    "METRICS",
    "MeanMetric",
    "Metric",
    "Record",
    "ResampledMetric",
    "declared_metrics",
    "item_score",
    "metric",
    "metric_for",
    "metric_named",
]
