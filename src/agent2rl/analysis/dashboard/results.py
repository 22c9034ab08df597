"""The cross-run results ledger: one row per run in ``<runs_dir>/results.db``.

SQLite in WAL mode with a busy timeout, because a sweep finalises many runs at once from
different processes. A run's row is keyed by ``run_id`` and replaced on every report, so
regenerating a report never duplicates it. Cross-run analysis reads this table and the run
directories, never live state.

:class:`ResultsRow` names the columns once: the table's schema is derived from it, and
:func:`results_row` is the one place that maps a run's :class:`RunMetrics` to them.
"""

from __future__ import annotations

import sqlite3
import typing
from contextlib import closing
from pathlib import Path
from typing import Any, TypedDict

from agent2rl.analysis.report.run_metrics import RunMetrics
from agent2rl.sqlite_store import SQLiteStore

RESULTS_DB = "results.db"


class ResultsRow(TypedDict):
    """One row of the ``runs`` table, as :func:`list_runs` returns it (a plain dict). A new
    column goes at the end (:data:`ADDED_COLUMNS`).

    The columns ``run_id``, ``task``, ``task_version``, ``agent``, ``driver``, ``mode``,
    ``model``, ``feedback``, ``provider_tools``, ``sandbox`` and ``network`` are the run's
    :class:`~agent2rl.rundir.RunIdentity` (filled from it; declared here too because the
    table's columns and their order are derived from this class)."""

    run_id: str
    finished_at: float | None
    """The run's ``ended_at`` (not the time the row was written)."""
    task: str | None
    task_version: str | None
    agent: str | None
    driver: str | None
    model: str | None
    baseline: float | None
    best: float | None
    improvement: float | None
    ci_lo: float | None
    """The improvement's 95% interval (paired with the baseline)."""
    ci_hi: float | None
    submissions: int | None
    duration_s: float | None
    status: str | None
    run_dir: str | None
    """Absolute path of the run directory."""
    eval_hash: str | None
    """The baseline's evaluation settings: runs of one task compare only when equal."""
    within_noise: int | None
    """1 within noise, 0 beyond, NULL unknown (SQLite has no booleans)."""
    mode: str | None
    total_tokens: int | None
    """LLM agents only: what the driver consumed, for scaling analyses across runs."""
    cost_usd: float | None
    integrity_flags: str | None
    """The run's integrity flags, comma-separated (``model_not_derived``, ``contaminated``,
    ``mode_violation``, ...; ``chat_template_changed`` in a row recorded before a submitted
    template stopped being a flag); ``""`` when none was raised."""
    not_derived: int | None
    """Submissions whose model does not derive from the base model."""
    contaminated: int | None
    """1: the contamination check flagged the run, 0: it did not, NULL: it did not run."""
    contaminated_items: int | None
    """Private items found in the workspace (NULL: the check did not run)."""
    feedback: str | None
    """The grading protocol (:mod:`agent2rl.grading.final`): ``private`` (NULL in a row
    recorded before it existed) or ``validation``, where ``best`` is the one submission
    graded on the private split at the end, selected on validation scores."""
    validation_score: float | None
    """``validation`` runs: that submission's validation-split score (NULL otherwise)."""
    provider_tools: int | None
    """1: the LLM provider's own tools (web search, URL fetches) were allowed; 0: refused;
    NULL in a row recorded before it existed."""
    sandbox: str | None
    """The sandbox the agent actually ran in (``bwrap`` or ``none``); NULL in a row recorded
    before it existed. ``agent2rl compare`` never pools runs of different confinement."""
    network: str | None
    """The agent's network as it ran (``services`` or ``host``); NULL as ``sandbox``."""


_SQL_TYPES = {str: "TEXT", int: "INTEGER", float: "REAL"}


def _sql_type(hint: Any) -> str:
    """``TEXT``/``INTEGER``/``REAL`` for a column hint such as ``float | None``."""
    (kind,) = set(typing.get_args(hint) or (hint,)) - {type(None)}
    return _SQL_TYPES[kind]


#: Column name -> SQL type, in table order.
COLUMN_TYPES: dict[str, str] = {
    name: _sql_type(hint) for name, hint in typing.get_type_hints(ResultsRow).items()
}
COLUMNS = tuple(COLUMN_TYPES)

SCHEMA = (
    "\nCREATE TABLE IF NOT EXISTS runs (\n    "
    + ",\n    ".join(
        f"{name} {kind}" + (" PRIMARY KEY" if name == "run_id" else "")
        for name, kind in COLUMN_TYPES.items()
    )
    + "\n);\n"
)

# Columns added after the first release, ``eval_hash`` and every one after it (a new column
# goes at the end of ResultsRow): an older results.db gains them on open.
ADDED_COLUMNS = dict(list(COLUMN_TYPES.items())[COLUMNS.index("eval_hash") :])


def results_db_path(runs_dir: Path) -> Path:
    """Where the results ledger of ``runs_dir`` lives."""
    return Path(runs_dir) / RESULTS_DB


def _add_columns(conn: sqlite3.Connection) -> None:
    """Give a results.db written by an older version the :data:`ADDED_COLUMNS` (inside the
    store's opening transaction: two processes opening it at once never both add one)."""
    have = {r["name"] for r in conn.execute("PRAGMA table_info(runs)")}
    for name, kind in ADDED_COLUMNS.items():
        if name not in have:
            conn.execute(f"ALTER TABLE runs ADD COLUMN {name} {kind}")


def _open(path: Path) -> SQLiteStore:
    """The results ledger at ``path`` (created, or migrated, if need be). Each call opens
    its own connection: the ledger is written by many processes, rarely by one twice."""
    return SQLiteStore(path, schema=SCHEMA, migrate=_add_columns)


def results_row(run_dir: Path, metrics: RunMetrics) -> ResultsRow:
    """The results-ledger row of a run: the run's identity, its scores against the baseline,
    what its LLM used and its integrity flags. ``within_noise`` is stored as 1/0; the LLM
    columns are None for a run without a metering proxy, the contamination columns for a run
    whose check did not run."""
    lo, hi = metrics.improvement_ci95 or (None, None)
    usage, contam = metrics.llm_usage, metrics.contamination
    # The identity columns (run_id, task, task_version, agent, driver, mode, model) come
    # from the one RunIdentity record; a test checks each of its fields is a column here.
    return ResultsRow(
        **metrics.identity().model_dump(),  # type: ignore[typeddict-item]
        finished_at=metrics.ended_at,
        baseline=metrics.baseline,
        best=metrics.best_score,
        improvement=metrics.improvement,
        ci_lo=lo,
        ci_hi=hi,
        submissions=metrics.submissions,
        duration_s=metrics.duration_s,
        status=metrics.status,
        run_dir=str(Path(run_dir).resolve()),
        eval_hash=metrics.eval_hash,
        within_noise=None if metrics.within_noise is None else int(metrics.within_noise),
        total_tokens=usage.total_tokens if usage else None,
        cost_usd=usage.cost_usd if usage else None,
        integrity_flags=",".join(metrics.integrity_flags),
        not_derived=len(metrics.not_derived_submissions),
        contaminated=int(contam.flagged) if contam else None,
        contaminated_items=contam.matched_items if contam else None,
        validation_score=metrics.selected_validation_score,
    )


def record_run(runs_dir: Path, run_dir: Path, metrics: RunMetrics) -> None:
    """Insert or replace the row of ``metrics.run_id`` in ``<runs_dir>/results.db``.

    ``finished_at`` is the run's ``ended_at``, not the time of this call, so re-recording a
    run leaves its row unchanged.
    """
    row = results_row(run_dir, metrics)
    placeholders = ", ".join("?" for _ in COLUMNS)
    with closing(_open(results_db_path(runs_dir))) as db:
        db.write(
            f"INSERT OR REPLACE INTO runs ({', '.join(COLUMNS)}) VALUES ({placeholders})",
            tuple(row[c] for c in COLUMNS),  # type: ignore[literal-required]
        )


def list_runs(runs_dir: Path) -> list[ResultsRow]:
    """Every recorded run as a dict of the ``runs`` columns, oldest ``finished_at`` first
    (runs without one last), ties by ``run_id``. An absent ledger gives ``[]`` and is not
    created."""
    path = results_db_path(runs_dir)
    if not path.is_file():
        return []
    with closing(_open(path)) as db:
        rows = db.fetchall("SELECT * FROM runs ORDER BY finished_at IS NULL, finished_at, run_id")
    return [typing.cast(ResultsRow, dict(r)) for r in rows]
