"""pass@k expected best improvement (the paper's Fig. 9).

With ``n`` repeated runs of a stack on a task, the expected maximum improvement of ``k`` runs
drawn without replacement from them (:func:`agent2rl.statistics.expected_max_of_k`, the
unbiased estimator; ``k = 1`` gives the mean, ``k = n`` the maximum), improvements as
:mod:`agent2rl.analysis.dashboard.counting` counts them; each curve counts its flagged runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from agent2rl.analysis.dashboard.counting import counted
from agent2rl.analysis.dashboard.runset import GroupKey, StudyRun, group_runs
from agent2rl.statistics import pass_at_k_curve


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
