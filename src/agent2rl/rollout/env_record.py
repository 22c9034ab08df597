"""The rollout record: every session and step the agent ran through the rollout service.

SQLite in WAL mode at ``record/env.db`` (outside the workspace). The rollout service is its
only writer; the analysis reads it after the run. It is the evidence of online RL: how many
episodes and environment steps the agent collected, and when. Tables:

``sessions``
    one row per episode: game, the game's group (column ``task_type``, its name when only
    ALFWorld had a rollout service), opened/closed times, steps, reward, won, done.
``steps``
    one row per step: time, session, whether the action was one the game admitted, reward,
    and its kind (``search``, ``click``, ``answer``...; ``step`` where a task has no kinds).
``searches``
    one row per query a step sent to a search engine: session, step number (the step it
    was, or would have been for a failed search, which plays no step), time, backend,
    the query (cut to :data:`~agent2rl.rollout.env.MAX_RECORDED_QUERY_CHARS`; ``query_chars``
    its full length), hits, seconds, and the error of a failed one ('' otherwise).
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent2rl.rollout.env import SearchRecord
from agent2rl.sqlite_store import TypedStore

SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    id INTEGER PRIMARY KEY,
    game_id TEXT NOT NULL,
    task_type TEXT,
    opened_at REAL NOT NULL,
    closed_at REAL,
    steps INTEGER NOT NULL DEFAULT 0,
    reward REAL NOT NULL DEFAULT 0,
    won INTEGER NOT NULL DEFAULT 0,
    done INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS steps (
    id INTEGER PRIMARY KEY,
    session_id INTEGER NOT NULL,
    at REAL NOT NULL,
    admissible INTEGER NOT NULL,
    reward REAL NOT NULL,
    kind TEXT NOT NULL DEFAULT 'step'
);
CREATE TABLE IF NOT EXISTS searches (
    id INTEGER PRIMARY KEY,
    session_id INTEGER NOT NULL,
    step INTEGER NOT NULL,
    at REAL NOT NULL,
    backend TEXT NOT NULL,
    query TEXT NOT NULL,
    query_chars INTEGER NOT NULL,
    hits INTEGER NOT NULL,
    seconds REAL NOT NULL,
    error TEXT NOT NULL DEFAULT ''
);
"""

_INSERT_SEARCH = (
    "INSERT INTO searches(session_id, step, at, backend, query, query_chars, hits, seconds,"
    " error) VALUES (:session_id, :step, :at, :backend, :query, :query_chars, :hits, :seconds,"
    " :error)"
)


@dataclass(frozen=True)
class SessionRow:
    id: int
    game_id: str
    group: str | None
    opened_at: float
    closed_at: float | None
    steps: int
    reward: float
    won: bool
    done: bool


def _add_kind(conn: sqlite3.Connection) -> None:
    """Give a record written before steps had kinds its ``kind`` column."""
    columns = {r[1] for r in conn.execute("PRAGMA table_info(steps)")}
    if "kind" not in columns:
        conn.execute("ALTER TABLE steps ADD COLUMN kind TEXT NOT NULL DEFAULT 'step'")


class EnvLedger(TypedStore):
    """A connection to one run's rollout record; thread-safe (one connection behind one
    lock, :class:`~agent2rl.sqlite_store.SQLiteStore`); :meth:`reader` opens it read-only."""

    # A lost last step on a power cut is acceptable; a slow commit per step is not.
    options = {"schema": SCHEMA, "migrate": _add_kind, "synchronous": "NORMAL"}

    def open_session(self, game_id: str, group: str | None, at: float | None = None) -> int:
        rowid = self._db.write(
            "INSERT INTO sessions(game_id, task_type, opened_at) VALUES (?, ?, ?)",
            (game_id, group, at if at is not None else time.time()),
        )
        return int(rowid or 0)

    def record_step(
        self,
        session_id: int,
        admissible: bool,
        reward: float,
        won: bool,
        done: bool,
        kind: str = "step",
        search: SearchRecord | None = None,
        step: int | None = None,
    ) -> None:
        """One step, the query it sent to a search engine (``search``, recorded as step
        number ``step``) and the session's running totals, in one transaction."""
        now = time.time()
        with self._db.transaction() as db:
            db.execute(
                "INSERT INTO steps(session_id, at, admissible, reward, kind)"
                " VALUES (?, ?, ?, ?, ?)",
                (session_id, now, int(admissible), reward, kind),
            )
            if search is not None:
                row = {"session_id": session_id, "step": step or 0, "at": now}
                db.execute(_INSERT_SEARCH, {**row, **search.to_row()})
            db.execute(
                "UPDATE sessions SET steps = steps + 1, reward = reward + ?, won = ?,"
                " done = ? WHERE id = ?",
                (reward, int(won), int(done), session_id),
            )

    def record_search(self, session_id: int, step: int, search: SearchRecord) -> None:
        """A query that played no step (its search failed): recorded as step ``step``."""
        row = {"session_id": session_id, "step": step, "at": time.time(), **search.to_row()}
        self._db.write(_INSERT_SEARCH, row)

    def searches(self, session_id: int | None = None) -> list[dict[str, Any]]:
        """The recorded queries (of one session, or all), oldest first: dicts of the
        ``searches`` columns."""
        sql = "SELECT * FROM searches"
        args: tuple[Any, ...] = ()
        if session_id is not None:
            sql, args = sql + " WHERE session_id = ?", (session_id,)
        return [dict(r) for r in self._db.fetchall(sql + " ORDER BY id", args)]

    def search_counts(self) -> dict[str, Any]:
        """``queries`` (all), ``failed``, ``sessions`` (that searched) and ``by_backend``
        (queries per backend)."""
        with self._db.read() as db:  # one snapshot: the totals agree with the breakdown
            total, failed, sessions = db.execute(
                "SELECT COUNT(*), COALESCE(SUM(error != ''), 0), COUNT(DISTINCT session_id)"
                " FROM searches"
            ).fetchone()
            rows = db.execute("SELECT backend, COUNT(*) FROM searches GROUP BY backend").fetchall()
        return {
            "queries": int(total),
            "failed": int(failed),
            "sessions": int(sessions),
            "by_backend": dict(sorted((str(b), int(n)) for b, n in rows)),
        }

    def close_session(self, session_id: int) -> None:
        self._db.write(
            "UPDATE sessions SET closed_at = ? WHERE id = ? AND closed_at IS NULL",
            (time.time(), session_id),
        )

    def sessions(self) -> list[SessionRow]:
        rows = self._db.fetchall("SELECT * FROM sessions ORDER BY id")
        return [SessionRow(*r[:7], bool(r[7]), bool(r[8])) for r in rows]

    def step_times(self) -> list[tuple[float, bool]]:
        """(time, admissible) of every step, oldest first."""
        rows = self._db.fetchall("SELECT at, admissible FROM steps ORDER BY id")
        return [(float(at), bool(ok)) for at, ok in rows]

    def step_kinds(self) -> dict[str, int]:
        """How many steps of each kind were played."""
        rows = self._db.fetchall("SELECT kind, COUNT(*) FROM steps GROUP BY kind")
        return dict(sorted((str(kind), int(n)) for kind, n in rows))


def summarize_env(path: Path, t0: float, buckets: int = 30) -> dict[str, Any] | None:
    """The rollout record of a finished run as report figures, or None if there is no
    record (read-only, see :meth:`EnvLedger.reader`).

    Times are seconds since ``t0`` (the budget clock). ``timeline`` splits the span from
    ``t0`` to the last step into at most ``buckets`` equal bins: ``[start_s, steps]`` each.
    """
    led = EnvLedger.reader(path, settled=True)
    if led is None:
        return None
    with led:
        sessions = led.sessions()
        steps = led.step_times()
        kinds = led.step_kinds()
        searches = led.search_counts()
    by_group: dict[str, dict[str, int]] = {}
    for s in sessions:
        entry = by_group.setdefault(s.group or "?", {"episodes": 0, "won": 0, "steps": 0})
        entry["episodes"] += 1
        entry["won"] += int(s.won)
        entry["steps"] += s.steps
    timeline: list[list[float]] = []
    if steps:
        end = max(steps[-1][0] - t0, 1e-9)
        width = end / buckets
        counts = [0] * buckets
        for at, _ in steps:
            counts[min(buckets - 1, max(0, int((at - t0) / width)))] += 1
        timeline = [[round(i * width, 3), c] for i, c in enumerate(counts)]
    return {
        "episodes": len(sessions),
        "finished_episodes": sum(1 for s in sessions if s.done),
        "won_episodes": sum(1 for s in sessions if s.won),
        "steps": len(steps),
        "admissible_steps": sum(1 for _, ok in steps if ok),
        "games": len({s.game_id for s in sessions}),
        "first_step_t": steps[0][0] - t0 if steps else None,
        "last_step_t": steps[-1][0] - t0 if steps else None,
        "by_group": by_group,
        "by_kind": kinds,
        "searches": searches,
        "timeline": timeline,
    }
