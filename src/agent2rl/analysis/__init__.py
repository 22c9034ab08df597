"""Per-run metrics and reports, and the cross-run results ledger.

Everything here reads finished run directories (``RunPaths``) and ``results.db``; nothing
reads live state.
"""

from agent2rl.analysis.metrics import (
    EMPTY_TREE,
    code_changes,
    compute_metrics,
    diff_numstat,
    resource_summary,
    snapshot_diff,
)
from agent2rl.analysis.noise import (
    bootstrap_ci,
    compare_items,
    load_item_scores,
    paired_bootstrap_ci,
)
from agent2rl.analysis.report import (
    collect_diffs,
    render_html,
    render_markdown,
    score_plot_svg,
    write_report,
)
from agent2rl.analysis.results import list_runs, record_run, results_db_path

__all__ = [
    "EMPTY_TREE",
    "bootstrap_ci",
    "code_changes",
    "collect_diffs",
    "compare_items",
    "compute_metrics",
    "diff_numstat",
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
