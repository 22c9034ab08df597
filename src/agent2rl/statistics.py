"""Statistics every layer shares: metrics and their bootstrap intervals, per-item result
files and pass@k.

The bottom of the package's layers (it imports only numpy and :mod:`agent2rl.files`), so the
grading service, ``agent2rl eval`` and the cross-run analyses compute their intervals with the
same code and none of them imports another to get it.

**Evaluation noise.** A score on a few hundred items moves by several points between equally
good models, so every score the harness shows comes with its 95% interval, and an improvement
with a *paired* interval over the items both evaluations share. An improvement whose interval
contains 0 is "within noise". Deterministic: the bootstrap uses a fixed seed. Whether a
submission is paired with the baseline at all is
:func:`agent2rl.grading.comparison.comparable`'s decision.

**Metrics.** A :class:`Metric` summarises one evaluation's per-item records (its
``items.jsonl``) into the task's score (0-100) and its interval; the scorer declares its
metrics (:mod:`agent2rl.scoring.metrics`) and every reader asks the declared one instead of
averaging ``score``.

**Over repeats.** :func:`bootstrap_mean_ci` is the interval of a mean over a few repeated runs
(the leaderboard's), and :func:`expected_max_of_k` the pass@k estimator: with ``n`` repeats
and their values sorted ascending, ``x_(1) <= ... <= x_(n)``, the expected maximum of ``k``
drawn without replacement is the unbiased

    E[max of k] = sum_{i=k}^{n} C(i-1, k-1) / C(n, k) * x_(i)

(``x_(i)`` is the maximum of a k-subset exactly when the other k-1 come from the i-1 below
it). ``k = 1`` gives the mean, ``k = n`` the maximum.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from math import comb
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from agent2rl.files import read_jsonl_tolerant

N_RESAMPLES = 2000
#: resamples for an interval over repeats (few values: cheap)
N_RESAMPLES_REPEATS = 4000
SEED = 0

# Bounds the bootstrap's index matrix (resamples x items) to ~32 MB of int64 per chunk.
_MAX_CHUNK_CELLS = 4_000_000


# -- bootstrap ---------------------------------------------------------------------------------
def bootstrap_ci(
    values: Sequence[float] | np.ndarray,
    *,
    n_resamples: int = N_RESAMPLES,
    confidence: float = 0.95,
    seed: int = SEED,
    rng: np.random.Generator | None = None,
) -> tuple[float, float] | None:
    """Percentile bootstrap interval for the mean of ``values`` (:func:`bootstrap_stat_ci`).

    Deterministic for a given ``seed`` (or ``rng``, drawn from instead: ``new_rng(seed)``
    gives the same interval as ``seed``). Returns None for an empty input; a single value (or
    all values equal) gives a zero-width interval at that value.
    """
    arr = np.asarray(values, dtype=float).ravel()
    return bootstrap_stat_ci(
        arr.size,
        lambda idx: arr[idx].mean(axis=1),
        n_resamples=n_resamples,
        confidence=confidence,
        rng=rng if rng is not None else new_rng(seed),
    )


def new_rng(seed: int = SEED) -> np.random.Generator:
    """The generator an interval draws from. Give every interval a fresh one: an interval
    then does not depend on which were computed before it."""
    return np.random.default_rng(seed)


def bootstrap_stat_ci(
    n: int,
    stat: Callable[[np.ndarray], np.ndarray],
    *,
    n_resamples: int = N_RESAMPLES,
    confidence: float = 0.95,
    rng: np.random.Generator | None = None,
) -> tuple[float, float] | None:
    """Percentile bootstrap interval of any statistic of ``n`` items.

    ``stat`` gets a ``(resamples, n)`` matrix of item indices drawn with replacement (in
    chunks of at most a few million cells) and returns the statistic of each row. Returns None
    for ``n == 0``; raises ``ValueError`` for ``n_resamples < 1`` or a confidence outside
    (0, 1). Deterministic for a given ``rng`` state (default: ``new_rng()``).
    """
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be >= 1, got {n_resamples}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if n == 0:
        return None
    rng = rng if rng is not None else new_rng()
    stats = np.empty(n_resamples, dtype=float)
    chunk = max(1, min(n_resamples, _MAX_CHUNK_CELLS // n))
    for lo in range(0, n_resamples, chunk):
        hi = min(n_resamples, lo + chunk)
        idx = rng.integers(0, n, size=(hi - lo, n))
        stats[lo:hi] = stat(idx)
    alpha = (1.0 - confidence) / 2.0
    q_lo, q_hi = np.quantile(stats, [alpha, 1.0 - alpha])
    # "+ 0.0" turns a -0.0 into 0.0 so an all-zero difference prints as [0.0, 0.0].
    return float(q_lo) + 0.0, float(q_hi) + 0.0


def paired_bootstrap_ci(
    a: Sequence[float] | np.ndarray,
    b: Sequence[float] | np.ndarray,
    *,
    rng: np.random.Generator | None = None,
) -> tuple[float, float] | None:
    """Paired bootstrap interval for ``mean(a - b)``; ``a[i]`` and ``b[i]`` are the same item.

    Resampling the per-item differences (not ``a`` and ``b`` independently) keeps the pairing,
    so item difficulty cancels out and the interval is much tighter than two separate ones.
    Returns None when the inputs are empty; raises ``ValueError`` if their lengths differ.
    """
    arr_a = np.asarray(a, dtype=float).ravel()
    arr_b = np.asarray(b, dtype=float).ravel()
    if arr_a.shape != arr_b.shape:
        raise ValueError(f"paired samples differ in length: {arr_a.size} vs {arr_b.size}")
    return bootstrap_ci(arr_a - arr_b, rng=rng)


# -- metrics -----------------------------------------------------------------------------------
#: one graded item as ``items.jsonl`` holds it: ``id``, ``score`` (in [0, 1]), ``correct``,
#: ``meta`` (the scorer's facts, e.g. a judge's preference)
Record = Mapping[str, Any]


def item_score(record: Record) -> float:
    """A record's ``score``; ``correct`` (1.0 / 0.0) when it has no numeric score (a bool is
    not a score: it is read as ``correct`` is)."""
    score = record.get("score")
    if isinstance(score, bool) or not isinstance(score, int | float):
        return 1.0 if record.get("correct") else 0.0
    return float(score)


@runtime_checkable
class Metric(Protocol):
    """What a task's score is, computed from its per-item records (never from the model).

    ``name`` is how it is registered and recorded (``result.json``'s ``metrics``).
    ``value`` is the score in points (0-100 for a rate); ``interval`` its 95% interval over the
    items, drawing from ``rng`` (None without records); ``paired_interval`` the interval of
    ``value(records) - value(base_records)`` where ``records[i]`` and ``base_records[i]`` are
    the same item (None without pairs). A metric must accept an empty list for ``value``.
    """

    name: str

    def value(self, records: Sequence[Record]) -> float: ...

    def interval(
        self, records: Sequence[Record], rng: np.random.Generator
    ) -> tuple[float, float] | None: ...

    def paired_interval(
        self, records: Sequence[Record], base_records: Sequence[Record], rng: np.random.Generator
    ) -> tuple[float, float] | None: ...


@dataclass(frozen=True)
class MeanMetric:
    """100 x the mean of a per-item value (``item``, default the record's ``score``): the
    harness's score since its first version, and the default of every scorer. The value is
    0 for no records, summed in order as the harness always summed."""

    name: str = "mean"
    item: Callable[[Record], float] = item_score

    def values(self, records: Sequence[Record]) -> list[float]:
        """The per-item values (0-1)."""
        return [self.item(r) for r in records]

    def value(self, records: Sequence[Record]) -> float:
        values = self.values(records)
        return 100.0 * sum(values) / len(values) if values else 0.0

    def interval(
        self, records: Sequence[Record], rng: np.random.Generator
    ) -> tuple[float, float] | None:
        return bootstrap_ci([100.0 * v for v in self.values(records)], rng=rng)

    def paired_interval(
        self, records: Sequence[Record], base_records: Sequence[Record], rng: np.random.Generator
    ) -> tuple[float, float] | None:
        return paired_bootstrap_ci(
            [100.0 * v for v in self.values(records)],
            [100.0 * v for v in self.values(base_records)],
            rng=rng,
        )


class ResampledMetric:
    """A metric that is not a mean of per-item values (a median, a fitted model's rate):
    subclasses set ``name`` and implement :meth:`value`; the intervals resample the items
    with replacement and recompute :meth:`value` on each resample (2000 times: keep
    ``value`` cheap, or override the intervals), the paired one on both sides' same items."""

    name: str = ""

    def value(self, records: Sequence[Record]) -> float:
        raise NotImplementedError

    def interval(
        self, records: Sequence[Record], rng: np.random.Generator
    ) -> tuple[float, float] | None:
        rows = list(records)
        return bootstrap_stat_ci(
            len(rows),
            lambda idx: np.array([self.value([rows[i] for i in r]) for r in idx]),
            rng=rng,
        )

    def paired_interval(
        self, records: Sequence[Record], base_records: Sequence[Record], rng: np.random.Generator
    ) -> tuple[float, float] | None:
        a, b = list(records), list(base_records)
        if len(a) != len(b):
            raise ValueError(f"paired samples differ in length: {len(a)} vs {len(b)}")

        def diff(idx: np.ndarray) -> np.ndarray:
            return np.array(
                [self.value([a[i] for i in r]) - self.value([b[i] for i in r]) for r in idx]
            )

        return bootstrap_stat_ci(len(a), diff, rng=rng)


#: the default metric: 100 x the mean item score
MEAN = MeanMetric()


# -- per-item files ---------------------------------------------------------------------------
def load_item_records(path: Path) -> dict[str, Record] | None:
    """Per-item records keyed by item id, from a per-item results JSONL file (what a
    :class:`Metric` reads).

    Lines without an ``id`` (or not an object) are skipped; a repeated id keeps its last
    record, in the place of its first. Returns None when the file does not exist (so callers
    can tell "no per-item data" from "zero items").
    """
    path = Path(path)
    if not path.is_file():
        return None
    # Tolerant: an evaluation killed mid-write leaves a torn last line, and the items
    # before it still carry an honest interval.
    return {str(obj["id"]): obj for obj in read_jsonl_tolerant(path) if "id" in obj}


def load_item_scores(path: Path) -> dict[str, float] | None:
    """Per-item scores in [0, 1] keyed by item id (:func:`item_score` of each record of
    :func:`load_item_records`); None when the file does not exist."""
    records = load_item_records(path)
    return None if records is None else {k: item_score(r) for k, r in records.items()}


@dataclass(frozen=True)
class Intervals:
    """A score's 95% interval and its paired interval against the baseline, in score points.

    ``score_ci95`` is None without per-item results; ``improvement_ci95`` and
    ``within_noise`` are None without a comparable baseline or without an item in common;
    ``n_items_paired`` is None when nothing was paired.
    """

    score_ci95: tuple[float, float] | None = None
    improvement_ci95: tuple[float, float] | None = None
    within_noise: bool | None = None
    n_items_paired: int | None = None


def _record(value: Record | float) -> Record:
    return {"score": value} if isinstance(value, int | float) else value


def compare_items(
    items: Mapping[str, Record | float] | None,
    base_items: Mapping[str, Record | float] | None,
    *,
    comparable: bool = True,
    metric: Metric = MEAN,
) -> Intervals:
    """The score's interval and the paired interval of ``items`` minus ``base_items``, by
    ``metric`` (the scorer's declared one; default 100 x the mean item score).

    Both map item id -> record (:func:`load_item_records`; a bare number is a record holding
    only that score). The paired interval is None (:class:`Intervals`) also when the two
    were not graded under the same settings (``comparable`` False). Only ids present in both
    are paired, so a partial file still yields an honest interval over what it holds. Each
    interval draws from a fresh :func:`new_rng`, so it does not depend on the other.
    """
    records = [_record(v) for v in items.values()] if items else []
    score_ci = metric.interval(records, new_rng()) if records else None
    common = sorted(set(items) & set(base_items)) if items and base_items and comparable else []
    if not common:
        return Intervals(score_ci95=score_ci)
    ci = metric.paired_interval(
        [_record(items[i]) for i in common], [_record(base_items[i]) for i in common], new_rng()
    )
    return Intervals(
        score_ci95=score_ci,
        improvement_ci95=ci,
        within_noise=bool(ci[0] <= 0.0 <= ci[1]) if ci is not None else None,
        n_items_paired=len(common),
    )


# -- over repeated runs -------------------------------------------------------------------------
def bootstrap_mean_ci(
    values: Sequence[float],
    *,
    n_resamples: int = N_RESAMPLES_REPEATS,
    seed: int = SEED,
) -> tuple[float, float] | None:
    """Percentile bootstrap interval of the mean over repeats; None with fewer than two
    values (a single run says nothing about the spread). Deterministic for a ``seed``; equal
    values give a zero-width interval at that value."""
    if len(values) < 2:
        return None
    return bootstrap_ci(values, n_resamples=n_resamples, seed=seed)


def expected_max_of_k(values: Sequence[float], k: int) -> float:
    """The unbiased estimate of E[max of k draws] from ``values`` (module docstring).

    Ties need no care (the sum runs over sorted positions). Raises ``ValueError`` unless
    ``1 <= k <= len(values)``.
    """
    n = len(values)
    if not 1 <= k <= n:
        raise ValueError(f"k must be in 1..{n} (the number of runs), got {k}")
    xs = sorted(float(v) for v in values)
    return sum(comb(i - 1, k - 1) * xs[i - 1] for i in range(k, n + 1)) / comb(n, k)


def pass_at_k_curve(values: Sequence[float]) -> list[tuple[int, float]]:
    """``[(k, E[max of k]) for k in 1..n]``; empty for no values."""
    return [(k, expected_max_of_k(values, k)) for k in range(1, len(values) + 1)]
