"""What a run, and many runs, came to: read from finished run directories, never live state.

Split by audience:

``report``
    one run: ``compute_metrics`` once, then ``write_report`` and ``record_run`` from that same
    :class:`RunMetrics`.
``dashboard``
    many runs: the results ledger (``results.db``), ``agent2rl compare``, the study dashboard.
``rendering``
    what both pages share: escaping and the interactive charts.

Layers: ``rendering`` imports neither of the others, ``report`` does not import
``dashboard``. The statistics (bootstrap intervals, paired comparisons, pass@k) live below
every package, in :mod:`agent2rl.statistics`, because the grading service computes the same
intervals; comparability with the baseline is :mod:`agent2rl.grading.comparison`'s rule, the
one the agent was answered with during the run.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agent2rl.analysis.dashboard import ResultsRow, list_runs, record_run, results_db_path
    from agent2rl.analysis.report import (
        RunMetrics,
        code_changes,
        collect_diffs,
        compute_metrics,
        diff_numstat,
        render_html,
        render_markdown,
        resource_summary,
        snapshot_diff,
        write_report,
    )

#: The public API (:data:`__all__`) is imported on first use (PEP 562), from ``dashboard`` for
#: these names and ``report`` for the rest: ``agent2rl.analysis.rendering`` alone (the
#: viewer's, the docs build's) must not load the report's dependencies (tasks, integrity
#: checks), which take seconds to import.
_FROM_DASHBOARD = frozenset({"ResultsRow", "list_runs", "record_run", "results_db_path"})


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    sub = "dashboard" if name in _FROM_DASHBOARD else "report"
    return getattr(importlib.import_module(f"{__name__}.{sub}"), name)


__all__ = [
    "ResultsRow",
    "RunMetrics",
    "code_changes",
    "collect_diffs",
    "compute_metrics",
    "diff_numstat",
    "list_runs",
    "record_run",
    "render_html",
    "render_markdown",
    "resource_summary",
    "results_db_path",
    "snapshot_diff",
    "write_report",
]
