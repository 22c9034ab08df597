"""The per-run report: a finished run directory -> ``report/metrics.json``, ``report.md``,
``report.html`` and ``diffs/``.

Modules:

``run_metrics``
    :class:`RunMetrics`, the typed per-run metrics (``metrics.json`` is its JSON dump), its
    parts (trajectory points, code changes, rejected attempts, resources, LLM and environment
    usage, scores per item group) and :func:`run_flags`.
``compute_metrics``
    :func:`compute_metrics`: a finished run directory -> :class:`RunMetrics`.
``code_changes``
    lines changed per submission and the diffs between code snapshots (``record/code.git``).
``judging``, ``searching``
    a judge's cost over the run's gradings; a search task's backend and query counts.
``charts``
    the report's figures as chart data (score over time, environment steps over time).
``document``
    the report's section model and its two renderings, Markdown and one self-contained page.
``render``
    the sections of ``report.md`` and ``report.html``; :func:`write_report` writes them all.
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
