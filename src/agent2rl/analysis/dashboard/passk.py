"""pass@k expected best improvement (the paper's Fig. 9).

With ``n`` repeated runs of a stack on a task and their improvements sorted ascending,
``x_(1) <= ... <= x_(n)``, the expected maximum improvement of ``k`` runs drawn without
replacement from them is the unbiased estimator

    E[max of k] = sum_{i=k}^{n} C(i-1, k-1) / C(n, k) * x_(i)

(``x_(i)`` is the maximum of a k-subset exactly when the other k-1 come from the i-1 below
it). ``k = 1`` gives the mean, ``k = n`` the maximum. Improvements follow the best of budget
rule of :func:`~agent2rl.analysis.runset.outcome`; a flagged run counts as improvement 0
unless ``raw`` (:mod:`agent2rl.analysis.counting`), and each curve counts its flagged runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from math import comb

from agent2rl.analysis.counting import counted
from agent2rl.analysis.runset import GroupKey, StudyRun, group_runs


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


@dataclass(frozen=True)
class PassAtK:
    """One group's curve: ``points`` is ``[(k, expected best improvement)]`` for k = 1..n."""

    key: GroupKey
    n: int
    points: list[tuple[int, float]]
    flagged: int = 0
    """Runs of the ``n`` with a flag (counted as improvement 0 unless ``raw``)."""


def pass_at_k(runs: Sequence[StudyRun], *, raw: bool = False) -> list[PassAtK]:
    """A curve per group (task, eval hash, model, stack) over its runs with an outcome;
    groups without any are left out. ``raw`` counts flagged runs as graded."""
    out = []
    for key, members in group_runs(runs).items():
        outs = [o for r in members if (o := counted(r.metrics, raw=raw)) is not None]
        if outs:
            values = [o.improvement for o in outs]
            flagged = sum(1 for o in outs if o.flagged)
            out.append(PassAtK(key, len(values), pass_at_k_curve(values), flagged))
    return out


__all__ = ["PassAtK", "expected_max_of_k", "pass_at_k", "pass_at_k_curve"]
