"""Per-run metrics and reports, and the cross-run results ledger.

Everything here reads finished run directories (``RunPaths``) and ``results.db``; nothing
reads live state. A run is finalised as: ``compute_metrics`` once, then ``write_report`` and
``record_run`` from that same :class:`RunMetrics`.

Modules:

``run_metrics``
    :class:`RunMetrics`, the typed per-run metrics (``report/metrics.json`` is its JSON dump),
    and its parts: trajectory points, code changes, rejected attempts, resources, LLM and
    environment usage, scores per item group.
``metrics``
    :func:`compute_metrics`: a finished run directory -> :class:`RunMetrics`.
``code_changes``
    lines changed per submission and the diffs between code snapshots (``record/code.git``).
``judging``, ``searching``
    a judge's cost over the run's gradings; a search task's backend and query counts.
``report``
    ``metrics.json``, ``report.md``, the self-contained ``report.html`` and ``diffs/``.
``plot``
    the report's inline SVG figures (score over time, environment steps over time).
``results``
    ``results.db``: one row per run (:class:`ResultsRow`), for cross-run analysis.
``compare``
    cross-run tables over those rows; refuses runs graded under different settings.
``counting``
    how a run counts in any cross-run aggregate: its flags (a flagged run counts as its base
    model unless raw figures are asked for), the selected best and the final submission.

Comparability with the baseline, the best submission and the bootstrap intervals are the
grading service's (:mod:`agent2rl.grading.comparison`, :mod:`agent2rl.grading.noise`): the
report applies the rule the agent was answered with during the run. The bootstrap functions
are re-exported here for the analyses that use them.
"""

from agent2rl.analysis.code_changes import code_changes, diff_numstat, snapshot_diff
from agent2rl.analysis.metrics import compute_metrics, resource_summary
from agent2rl.analysis.plot import env_steps_svg, score_plot_svg
from agent2rl.analysis.report import collect_diffs, render_html, render_markdown, write_report
from agent2rl.analysis.results import ResultsRow, list_runs, record_run, results_db_path
from agent2rl.analysis.run_metrics import RunMetrics
from agent2rl.grading.noise import (
    bootstrap_ci,
    compare_items,
    load_item_scores,
    paired_bootstrap_ci,
)
from agent2rl.recording.snapshot import EMPTY_TREE

__all__ = [
    "EMPTY_TREE",
    "ResultsRow",
    "RunMetrics",
    "bootstrap_ci",
    "code_changes",
    "collect_diffs",
    "compare_items",
    "compute_metrics",
    "diff_numstat",
    "env_steps_svg",
    "list_runs",
    "load_item_scores",
    "paired_bootstrap_ci",
    "record_run",
    "render_html",
    "render_markdown",
    "resource_summary",
    "results_db_path",
    "score_plot_svg",
    "snapshot_diff",
    "write_report",
]
