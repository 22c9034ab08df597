"""How one run counts in a cross-run aggregate: its flags, and the figures it contributes.

**Flagged runs.** A run is flagged when an integrity check raised something against it
(:func:`run_flags`): ``model_not_derived``, ``contaminated`` (private items in its workspace,
or a fetch of the task's data), ``mode_violation`` (methods that contradict its mode), or any
flag a check adds later. :func:`counts_as_flagged` is the one place that decides; every
aggregate (leaderboard, heatmap, pass@k, coverage, ``agent2rl compare``, ``study export``)
asks it. A submitted chat template (``chat_template_changed`` in an older ``metrics.json``) is
recorded, not flagged: the renderer rule checks it when it is submitted. By default (the
anchors' policy: PostTrainBench scores a flagged run as the base model) a flagged run counts
with its baseline as its best and final score, improvement 0; ``raw=True`` (``--raw``) counts
it as graded; every aggregate says how many flagged runs it holds either way. The run's own
report and ``metrics.json`` always keep the scores as graded: the policy is applied only here.

**Best and final.** ``best`` follows the best of budget rule
(:func:`agent2rl.analysis.dashboard.runset.outcome`): a selection over every valid submission,
so optimistic. ``final``, shown beside it, is the last valid submission's score, the one a
deployment would get without looking at the private split; a run without a valid comparable
final submission keeps its base model there too (final = baseline, improvement 0).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from agent2rl.analysis.dashboard.runset import outcome
from agent2rl.analysis.report.run_metrics import RunMetrics, run_flags

#: Flags that are recorded but do not make a run flagged: a submission's own chat template
#: passed the renderer rule when it was graded (a template that computes the answer from the
#: content fails that rule as the model's fault), so a role-marker template an honest SFT
#: run adds keeps its gain. Older ``metrics.json`` files still carry it.
RECORDED_ONLY = frozenset({"chat_template_changed"})


def counts_as_flagged(flags: Iterable[str]) -> bool:
    """The flag policy of every aggregate: whether a run with these integrity flags counts
    as flagged (as its base model unless ``raw``). Any flag does but the
    :data:`RECORDED_ONLY` ones; an unknown flag (a check added later, such as a check that
    could not run) counts as flagged: a run is clean only when nothing was raised. Empty
    strings (from splitting an empty results-ledger cell) are ignored."""
    return any(f and f not in RECORDED_ONLY for f in flags)


def final_of(m: RunMetrics) -> tuple[float | None, float | None]:
    """``(score, improvement)`` of the run's last valid submission (ledger order), the
    improvement None when that score is not comparable with the baseline. Read from
    ``final_score``/``final_improvement`` when the metrics have them, else from the
    trajectory (a ``metrics.json`` written before those fields existed). ``(None, None)``
    without a valid submission."""
    if m.final_submission_id is not None:
        return m.final_score, m.final_improvement
    valid = [tr for tr in m.trajectory if tr.score is not None]
    if not valid:
        return None, None
    last = valid[-1]
    gain = (
        last.score - m.baseline
        if m.baseline is not None and last.comparable and last.score is not None
        else None
    )
    return last.score, gain


class Counted(NamedTuple):
    """What one run contributes to an aggregate (see the module docstring)."""

    baseline: float
    best: float
    """Best of budget: selected over every graded submission (optimistic)."""
    improvement: float
    final: float
    """The last valid submission's score (not selected)."""
    final_improvement: float
    has_valid: bool
    """False: no valid comparable best, the base model stands (improvement 0)."""
    flagged: bool
    """The run has a flag (:func:`run_flags`), whether or not it was zeroed."""
    zeroed: bool
    """Flagged and counted as its base model (the default, not ``raw``)."""


def counted(m: RunMetrics, *, raw: bool = False) -> Counted | None:
    """The run's figures under the counting policy (module docstring); None for a run
    without a baseline (it counts only in ``n``). ``raw`` counts a flagged run as graded."""
    o = outcome(m)
    if o is None:
        return None
    flagged = counts_as_flagged(run_flags(m))
    final, final_gain = final_of(m)
    if final is None or final_gain is None:
        final, final_gain = o.baseline, 0.0
    if flagged and not raw:
        return Counted(o.baseline, o.baseline, 0.0, o.baseline, 0.0, o.has_valid, True, True)
    return Counted(
        o.baseline, o.best, o.improvement, final, final_gain, o.has_valid, flagged, False
    )
