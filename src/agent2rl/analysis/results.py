"""The cross-run results ledger: one row per run in ``<runs_dir>/results.db``.

SQLite in WAL mode with a busy timeout, because a sweep finalises many runs at once from
different processes. A run's row is keyed by ``run_id`` and replaced on every report, so
regenerating a report never duplicates it. Cross-run analysis reads this table and the run
directories, never live state.
"""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

RESULTS_DB = "results.db"

COLUMNS = (
    "run_id",
    "finished_at",
    "task",
    "task_version",
    "agent",
    "driver",
    "model",
    "baseline",
    "best",
    "improvement",
    "ci_lo",
    "ci_hi",
    "submissions",
    "duration_s",
    "status",
    "run_dir",
    "eval_hash",
    "within_noise",
    "mode",
    "total_tokens",
    "cost_usd",
)

SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY,
    finished_at REAL,
    task TEXT,
    task_version TEXT,
    agent TEXT,
    driver TEXT,
    model TEXT,
    baseline REAL,
    best REAL,
    improvement REAL,
    ci_lo REAL,
    ci_hi REAL,
    submissions INTEGER,
    duration_s REAL,
    status TEXT,
    run_dir TEXT,
    eval_hash TEXT,
    within_noise INTEGER,
    mode TEXT,
    total_tokens INTEGER,
    cost_usd REAL
);
"""

# Columns added after the first release: an older results.db gains them on open.
ADDED_COLUMNS = {
    "eval_hash": "TEXT",
    "within_noise": "INTEGER",
    "mode": "TEXT",
    "total_tokens": "INTEGER",
    "cost_usd": "REAL",
}


def results_db_path(runs_dir: Path) -> Path:
    """Where the results ledger of ``runs_dir`` lives."""
    return Path(runs_dir) / RESULTS_DB


def _connect(path: Path) -> sqlite3.Connection:
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path, timeout=30, isolation_level=None)
    conn.row_factory = sqlite3.Row
    conn.execute("PRAGMA busy_timeout=30000")
    conn.execute("PRAGMA journal_mode=WAL")
    conn.executescript(SCHEMA)
    have = {r["name"] for r in conn.execute("PRAGMA table_info(runs)")}
    for name, kind in ADDED_COLUMNS.items():
        if name not in have:
            conn.execute(f"ALTER TABLE runs ADD COLUMN {name} {kind}")
    return conn


def _row(run_dir: Path, metrics: dict[str, Any]) -> tuple[Any, ...]:
    ci = metrics.get("improvement_ci95") or (None, None)
    usage = metrics.get("llm_usage") or {}
    values = {
        "run_id": metrics["run_id"],
        "finished_at": metrics.get("ended_at"),
        "task": metrics.get("task"),
        "task_version": metrics.get("task_version"),
        "agent": metrics.get("agent"),
        "driver": metrics.get("driver"),
        "model": metrics.get("model"),
        "baseline": metrics.get("baseline"),
        "best": metrics.get("best_score"),
        "improvement": metrics.get("improvement"),
        "ci_lo": ci[0],
        "ci_hi": ci[1],
        "submissions": metrics.get("submissions"),
        "duration_s": metrics.get("duration_s"),
        "status": metrics.get("status"),
        "run_dir": str(Path(run_dir).resolve()),
        "eval_hash": metrics.get("eval_hash"),
        "within_noise": metrics.get("within_noise"),
        "mode": metrics.get("mode"),
        # LLM agents only: what the driver consumed, for scaling analyses across runs.
        "total_tokens": usage.get("total_tokens"),
        "cost_usd": usage.get("cost_usd"),
    }
    return tuple(values[c] for c in COLUMNS)


def record_run(runs_dir: Path, run_dir: Path, metrics: dict[str, Any]) -> None:
    """Insert or replace the row of ``metrics['run_id']`` in ``<runs_dir>/results.db``.

    ``metrics`` is a dict from ``compute_metrics``; keys other than ``run_id`` may be missing
    (stored as NULL). ``finished_at`` is the run's ``ended_at``, not the time of this call, so
    re-recording a run leaves its row unchanged. Raises ``KeyError`` without ``run_id``.
    """
    row = _row(run_dir, metrics)
    placeholders = ", ".join("?" for _ in COLUMNS)
    with closing(_connect(results_db_path(runs_dir))) as conn:
        conn.execute(
            f"INSERT OR REPLACE INTO runs ({', '.join(COLUMNS)}) VALUES ({placeholders})", row
        )


def list_runs(runs_dir: Path) -> list[dict[str, Any]]:
    """Every recorded run as a dict of the ``runs`` columns, oldest ``finished_at`` first
    (runs without one last), ties by ``run_id``. An absent ledger gives ``[]`` and is not
    created."""
    path = results_db_path(runs_dir)
    if not path.is_file():
        return []
    with closing(_connect(path)) as conn:
        rows = conn.execute(
            "SELECT * FROM runs ORDER BY finished_at IS NULL, finished_at, run_id"
        ).fetchall()
    return [dict(r) for r in rows]
