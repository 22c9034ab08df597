"""The per-run report: a finished run directory -> ``report/metrics.json``, ``report.md``,
``report.html`` and ``diffs/`` (:func:`compute_metrics` builds the :class:`RunMetrics` that
``metrics.json`` dumps; :func:`write_report` writes every file)."""

from agent2rl.analysis.report.code_changes import code_changes, diff_numstat, snapshot_diff
from agent2rl.analysis.report.compute_metrics import compute_metrics, resource_summary
from agent2rl.analysis.report.render import (
    collect_diffs,
    render_html,
    render_markdown,
    write_report,
)
from agent2rl.analysis.report.run_metrics import RunMetrics, run_flags

__all__ = [
    "RunMetrics",
    "code_changes",
    "collect_diffs",
    "compute_metrics",
    "diff_numstat",
    "render_html",
    "render_markdown",
    "resource_summary",
    "run_flags",
    "snapshot_diff",
    "write_report",
]
