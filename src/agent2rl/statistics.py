"""Statistics every layer shares: bootstrap intervals, per-item score files and pass@k.

The bottom of the package's layers (it imports only numpy and :mod:`agent2rl.files`), so the
grading service, ``agent2rl eval`` and the cross-run analyses compute their intervals with the
same code and none of them imports another to get it.

**Evaluation noise.** A score on a few hundred items moves by several points between equally
good models, so every score the harness shows comes with its 95% interval, and an improvement
with a *paired* interval over the items both evaluations share. An improvement whose interval
contains 0 is "within noise". Deterministic: the bootstrap uses a fixed seed. Whether a
submission is paired with the baseline at all is
:func:`agent2rl.grading.comparison.comparable`'s decision.

**Over repeats.** :func:`bootstrap_mean_ci` is the interval of a mean over a few repeated runs
(the leaderboard's), and :func:`expected_max_of_k` the pass@k estimator: with ``n`` repeats
and their values sorted ascending, ``x_(1) <= ... <= x_(n)``, the expected maximum of ``k``
drawn without replacement is the unbiased

    E[max of k] = sum_{i=k}^{n} C(i-1, k-1) / C(n, k) * x_(i)

(``x_(i)`` is the maximum of a k-subset exactly when the other k-1 come from the i-1 below
it). ``k = 1`` gives the mean, ``k = n`` the maximum.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from math import comb
from pathlib import Path

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
) -> tuple[float, float] | None:
    """Percentile bootstrap interval for the mean of ``values``.

    Resamples the values with replacement ``n_resamples`` times and returns the
    ``(1 - confidence) / 2`` and ``1 - (1 - confidence) / 2`` quantiles of the resampled means.
    Deterministic for a given ``seed``. Returns None for an empty input; a single value (or all
    values equal) gives a zero-width interval at that value. Raises ``ValueError`` for
    ``n_resamples < 1`` or a confidence outside (0, 1).
    """
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be >= 1, got {n_resamples}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    arr = np.asarray(values, dtype=float).ravel()
    n = arr.size
    if n == 0:
        return None
    rng = np.random.default_rng(seed)
    means = np.empty(n_resamples, dtype=float)
    chunk = max(1, min(n_resamples, _MAX_CHUNK_CELLS // n))
    for lo in range(0, n_resamples, chunk):
        hi = min(n_resamples, lo + chunk)
        idx = rng.integers(0, n, size=(hi - lo, n))
        means[lo:hi] = arr[idx].mean(axis=1)
    alpha = (1.0 - confidence) / 2.0
    q_lo, q_hi = np.quantile(means, [alpha, 1.0 - alpha])
    # "+ 0.0" turns a -0.0 into 0.0 so an all-zero difference prints as [0.0, 0.0].
    return float(q_lo) + 0.0, float(q_hi) + 0.0


def paired_bootstrap_ci(
    a: Sequence[float] | np.ndarray,
    b: Sequence[float] | np.ndarray,
    *,
    n_resamples: int = N_RESAMPLES,
    confidence: float = 0.95,
    seed: int = SEED,
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
    return bootstrap_ci(arr_a - arr_b, n_resamples=n_resamples, confidence=confidence, seed=seed)


# -- per-item files ---------------------------------------------------------------------------
def load_item_scores(path: Path) -> dict[str, float] | None:
    """Per-item scores in [0, 1] keyed by item id, from a per-item results JSONL file.

    Uses each line's ``score``; falls back to ``correct`` (1.0/0.0) when ``score`` is missing.
    Lines without an ``id`` are skipped, a repeated id keeps its last value. Returns None when
    the file does not exist (so callers can tell "no per-item data" from "zero items").
    """
    path = Path(path)
    if not path.is_file():
        return None
    scores: dict[str, float] = {}
    # Tolerant: an evaluation killed mid-write leaves a torn last line, and the items
    # before it still carry an honest interval.
    for obj in read_jsonl_tolerant(path):
        if "id" not in obj:
            continue
        score = obj.get("score")
        if isinstance(score, bool) or not isinstance(score, int | float):
            score = 1.0 if obj.get("correct") else 0.0
        scores[str(obj["id"])] = float(score)
    return scores


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


def compare_items(
    items: dict[str, float] | None,
    base_items: dict[str, float] | None,
    *,
    comparable: bool = True,
) -> Intervals:
    """The score's interval and the paired interval of ``items`` minus ``base_items``.

    Both map item id -> score in [0, 1]; intervals are in score points (0-100). Gives
    ``score_ci95`` (None without items), ``improvement_ci95`` and ``within_noise`` (None
    without base items, without an item id in common, or when the two were not graded under
    the same settings: ``comparable`` False), ``n_items_paired``. Only ids present in both are
    paired, so a partial file still yields an honest interval over what it holds.
    """
    score_ci = bootstrap_ci([100.0 * v for v in items.values()]) if items else None
    if not (items and base_items and comparable):
        return Intervals(score_ci95=score_ci)
    common = sorted(set(items) & set(base_items))
    if not common:
        return Intervals(score_ci95=score_ci)
    ci = paired_bootstrap_ci(
        [100.0 * items[i] for i in common], [100.0 * base_items[i] for i in common]
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
    confidence: float = 0.95,
    n_resamples: int = N_RESAMPLES_REPEATS,
    seed: int = SEED,
) -> tuple[float, float] | None:
    """Percentile bootstrap interval of the mean over repeats; None with fewer than two
    values (a single run says nothing about the spread). Deterministic for a ``seed``; equal
    values give a zero-width interval at that value."""
    if len(values) < 2:
        return None
    return bootstrap_ci(values, n_resamples=n_resamples, confidence=confidence, seed=seed)


def expected_max_of_k(values: Sequence[float], k: int) -> float:
    """The unbiased estimate of E[max of k draws] from ``values`` (module docstring).

    Ties need no care (the sum runs over sorted positions). Raises ``ValueError`` unless
    ``1 <= k <= len(values)``.
    """
    n = len(values)
    if not 1 <= k <= n:
        raise ValueError(f"k must be in 1..{n} (the number of runs), got {k}")
    xs = sorted(float(v) for v in values)
    total = comb(n, k)
    return sum(comb(i - 1, k - 1) * xs[i - 1] for i in range(k, n + 1)) / total


def pass_at_k_curve(values: Sequence[float]) -> list[tuple[int, float]]:
    """``[(k, E[max of k]) for k in 1..n]``; empty for no values."""
    return [(k, expected_max_of_k(values, k)) for k in range(1, len(values) + 1)]
