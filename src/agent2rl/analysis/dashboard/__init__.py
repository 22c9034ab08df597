"""Cross-run analysis: the results ledger, ``agent2rl compare`` and the study dashboard.

Reads only finished run directories (``report/metrics.json`` and the records beside it) and
``results.db``, never live state. Everything that consumes :class:`StudyRun`\\ s is a pure
function, so tests build them by hand with known answers; the shared rules (stack, group,
best of budget) are ``runset``'s, how a flagged run counts is ``counting``'s.
"""

from agent2rl.analysis.dashboard.page import (
    DASHBOARD,
    Overview,
    render_dashboard,
    report_links,
    write_dashboard,
)
from agent2rl.analysis.dashboard.results import ResultsRow, list_runs, record_run, results_db_path

__all__ = [
    "DASHBOARD",
    "Overview",
    "ResultsRow",
    "list_runs",
    "record_run",
    "render_dashboard",
    "report_links",
    "results_db_path",
    "write_dashboard",
]
