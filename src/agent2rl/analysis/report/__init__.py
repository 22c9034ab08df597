"""The per-run report: a finished run directory -> ``report/metrics.json``, ``report.md``,
``report.html`` and ``diffs/``.

Modules: ``run_metrics`` (:class:`RunMetrics`, the typed metrics that ``metrics.json`` dumps,
and :func:`run_flags`), ``compute_metrics`` (a run directory -> :class:`RunMetrics`),
``code_changes`` (lines changed per submission, diffs between code snapshots), ``judging`` and
``searching`` (a judge's cost, a search task's query counts), ``charts`` (the figures as chart
data), ``document`` (the section model and its two renderings) and ``render`` (the report's
sections; :func:`write_report` writes every file).
"""

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
