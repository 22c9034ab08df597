"""Cross-run analysis: the results ledger, ``agent2rl compare`` and the study dashboard.

Reads only finished run directories (``report/metrics.json`` and the records beside it) and
``results.db``, never live state. Everything that consumes :class:`StudyRun`\\ s is a pure
function, so tests build them by hand with known answers.

Modules: ``results`` (``results.db``, one :class:`ResultsRow` per finalised run), ``compare``
(tables over those rows; refuses runs graded under different settings), ``runset`` and
``evidence`` (:class:`StudyRun` and the shared rules: stack, group, best of budget; the evidence
read from a run directory), ``counting`` (a flagged run counts as its base model unless raw),
``leaderboard``, ``passk``, ``heatmap``, ``coverage``, ``curves``, ``trajectories`` (the paper's
tables and figures; the statistics are :mod:`agent2rl.statistics`'), ``routes``, ``failures``,
``summary`` (the training route, what failed, post-hoc summaries citing artifacts) and ``page``
(the self-contained ``dashboard.html``).
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
