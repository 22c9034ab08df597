"""Cross-run analysis: the results ledger, ``agent2rl compare`` and the study dashboard.

Reads only finished run directories (``report/metrics.json`` and the records beside it) and
``results.db``, never live state. Everything that consumes :class:`StudyRun`\\ s is a pure
function, so tests build them by hand with known answers.

Modules:

``results``
    ``results.db``: one row per run (:class:`ResultsRow`), written when a run is finalised.
``compare``
    cross-run tables over those rows; refuses runs graded under different settings.
``runset``, ``evidence``
    :class:`StudyRun` (one run as the analyses see it) and the shared rules (stack, group,
    best of budget), and the evidence read from a run directory to build one.
``counting``
    how a run counts in any aggregate: a flagged run counts as its base model unless raw.
``leaderboard``, ``passk``, ``heatmap``, ``curves``, ``trajectories``
    the aggregates (the paper's tables and figures); intervals and pass@k math are
    :mod:`agent2rl.statistics`'.
``routes``, ``failures``, ``summary``
    which training route a run took, what failed, and post-hoc summaries citing artifacts.
``page``
    the self-contained ``dashboard.html`` over all of them.
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
