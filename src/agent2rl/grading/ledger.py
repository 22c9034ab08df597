"""The run's ledger: the only source of scores.

SQLite in WAL mode, in the run directory (never inside the workspace). The grading service is
its only writer during a run; the orchestrator writes the baseline into ``meta`` before the
service starts, and the analysis reads it afterwards. Tables:

``meta(key, value)``
    JSON values: ``task``, ``task_version``, ``eval_hash``, ``baseline`` (a score record: score,
    n_items, items_path, eval_seconds), ``base_weights_hash``, ``base_fingerprint``. Under the
    ``validation`` feedback protocol (:mod:`agent2rl.grading.final`) also ``feedback``
    (``validation``), ``validation_baseline`` (the base model's score record on the validation
    split, what the agent's improvements are measured against), ``marked_final`` (the
    submission the agent marked final: ``{submission_id, at}``) and ``final_grade`` (the
    end-of-run grade on the private split: :class:`~agent2rl.grading.final.FinalGrade`).
``submissions``
    one row per accepted submission (graded, failed, duplicate or copy), in order. A failed
    row says whose fault it was (``failure_kind``: ``model`` or ``harness``, see
    :mod:`agent2rl.grading.evaluator`); only graded rows and model failures are reused for a
    later submission with the same fingerprint (``duplicate_of``). The same files after a
    harness failure are evaluated again, and that row's ``retry_of`` names the failed one.
    ``identity`` is the model-identity report (:mod:`agent2rl.integrity.identity`) as JSON.
    ``timings`` is where the grading time went, as JSON seconds: ``queue_wait_s`` (behind
    the run's other evaluations), ``staging_s`` (checking, copying and hashing the files),
    the worker's own (:func:`~agent2rl.grading.worker.evaluate_to`) and ``grader``
    (``warm`` | ``cold``); None for a row settled without an evaluation in an older ledger.
    ``split`` is the split ``score`` is on; NULL in an older ledger, read as ``private``.
``rejections``
    one row per refused attempt (bad path, bad files, bad token...), for the report. The
    attempt may be unauthenticated: its ``path`` and ``reason`` are cut (:func:`cap_text`),
    so each row's size is bounded (and :mod:`agent2rl.grading.app` rate-limits the rows).

A ledger written by an older version gains the newer columns when it is opened
(:data:`ADDED_COLUMNS`); its failed rows have no ``failure_kind`` and count as retryable.
"""

from __future__ import annotations

import json
import sqlite3
import time
from dataclasses import dataclass, fields
from enum import StrEnum
from typing import Any

from agent2rl.grading import comparison
from agent2rl.sqlite_store import TypedStore

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS submissions (
    id INTEGER PRIMARY KEY,
    submitted_at REAL NOT NULL,
    finished_at REAL,
    path TEXT NOT NULL,
    weights_hash TEXT,
    fingerprint TEXT,              -- weights + config + tokenizer (equal => same outputs)
    status TEXT NOT NULL,          -- evaluating | graded | failed
    score REAL,
    n_items INTEGER,
    items_path TEXT,               -- per-item results (JSONL), relative to the run directory
    eval_seconds REAL,
    error TEXT,
    snapshot TEXT,                 -- commit id in record/code.git
    is_copy INTEGER NOT NULL DEFAULT 0,
    duplicate_of INTEGER,
    eval_hash TEXT,
    failure_kind TEXT,             -- failed rows: model | harness (NULL: an older ledger)
    retry_of INTEGER,              -- the harness-failed row with the same fingerprint
    identity TEXT,                 -- JSON: the model-identity report
    timings TEXT,                  -- JSON: the grading latency breakdown (seconds)
    split TEXT                     -- the split score is on: private | validation
);
CREATE TABLE IF NOT EXISTS rejections (
    id INTEGER PRIMARY KEY,
    at REAL NOT NULL,
    path TEXT,
    http_status INTEGER NOT NULL,
    reason TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS rejections_at ON rejections(at);
"""


ADDED_COLUMNS = {
    "failure_kind": "TEXT",
    "retry_of": "INTEGER",
    "identity": "TEXT",
    "timings": "TEXT",
    "split": "TEXT",
}
#: Columns stored as JSON text and read back as Python values.
JSON_COLUMNS = frozenset({"identity", "timings"})
#: The most UTF-8 bytes a rejection stores of its path and of its reason (each).
MAX_REJECTION_FIELD_BYTES = 1024
#: What ends a value :func:`cap_text` cut; ``{n}`` is the original length in bytes.
TRUNCATION_MARK = "...[truncated: {n} bytes]"


class SubmissionStatus(StrEnum):
    """A submission row's ``status``, as stored (a ``str``: ``SubmissionStatus.GRADED ==
    "graded"``, so older ledgers and JSON read the same). ``EVALUATING`` until its grading
    settles it ``GRADED`` (with a score) or ``FAILED`` (with ``failure_kind``)."""

    EVALUATING = "evaluating"
    GRADED = "graded"
    FAILED = "failed"


@dataclass
class Submission:
    """One row of ``submissions``. ``score`` is None unless ``status == 'graded'``;
    ``failure_kind`` is set only on failed rows (and None on those of an older ledger)."""

    id: int
    submitted_at: float
    path: str
    status: SubmissionStatus
    finished_at: float | None = None
    weights_hash: str | None = None
    fingerprint: str | None = None
    score: float | None = None
    n_items: int | None = None
    items_path: str | None = None
    eval_seconds: float | None = None
    error: str | None = None
    snapshot: str | None = None
    is_copy: bool = False
    duplicate_of: int | None = None
    eval_hash: str | None = None
    failure_kind: str | None = None
    retry_of: int | None = None
    identity: dict[str, Any] | None = None
    timings: dict[str, Any] | None = None
    split: str | None = None

    @property
    def score_split(self) -> str:
        """The split ``score`` is on (``private`` for a row of an older ledger)."""
        return self.split or "private"

    @property
    def valid(self) -> bool:
        """Graded with a score (copies and duplicates of valid submissions count as valid)."""
        return self.status == SubmissionStatus.GRADED and self.score is not None


@dataclass
class Rejection:
    id: int
    at: float
    path: str | None
    http_status: int
    reason: str


_SUB_FIELDS = [f.name for f in fields(Submission)]


def _add_columns(conn: sqlite3.Connection) -> None:
    """Give a ledger written by an older version the :data:`ADDED_COLUMNS` (runs inside the
    store's opening transaction, so two processes never both add one)."""
    have = {r["name"] for r in conn.execute("PRAGMA table_info(submissions)")}
    for name, kind in ADDED_COLUMNS.items():
        if name not in have:
            conn.execute(f"ALTER TABLE submissions ADD COLUMN {name} {kind}")


def cap_text(text: str, limit: int = MAX_REJECTION_FIELD_BYTES) -> str:
    """``text`` if its UTF-8 form has at most ``limit`` bytes; else its longest prefix that,
    followed by :data:`TRUNCATION_MARK` (which names the original length), fits in ``limit``
    bytes (``limit`` must exceed the mark's length, about 40 bytes). A character is never
    split. Lone surrogates (valid in JSON, not in UTF-8) are stored escaped, as ``\\ud800``:
    SQLite would refuse them."""
    data = text.encode("utf-8", "backslashreplace")
    if len(data) <= limit:
        return data.decode("utf-8")
    mark = TRUNCATION_MARK.format(n=len(data))
    keep = data[: max(0, limit - len(mark.encode()))]
    return keep.decode("utf-8", "ignore") + mark  # "ignore": drops a cut last character


class Ledger(TypedStore):
    """A connection to one run's ledger. Safe to share between threads (one connection
    behind one lock, :class:`~agent2rl.sqlite_store.SQLiteStore`) and to open from several
    processes (WAL + busy timeout); :meth:`reader` opens it read-only.

    Each method is its own transaction; readers never see a half-written submission.
    """

    options = {"schema": SCHEMA, "migrate": _add_columns}

    # -- meta -----------------------------------------------------------------------------
    def set_meta(self, key: str, value: Any) -> None:
        self._db.write(
            "INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", (key, json.dumps(value))
        )

    def get_meta(self, key: str, default: Any = None) -> Any:
        row = self._db.fetchone("SELECT value FROM meta WHERE key = ?", (key,))
        return json.loads(row["value"]) if row else default

    def contents(self) -> tuple[list[Submission], list[Rejection], dict[str, Any]]:
        """Every submission, rejection and meta value (decoded; a torn one reads as None),
        read in one transaction: one snapshot, however the grader writes meanwhile."""
        with self._db.read():
            meta = self._db.fetchall("SELECT key, value FROM meta")
            return self.submissions(), self.rejections(), {k: _from_json(v) for k, v in meta}

    # -- submissions ----------------------------------------------------------------------
    def add_submission(
        self,
        path: str,
        weights_hash: str | None,
        eval_hash: str | None,
        snapshot: str | None = None,
        at: float | None = None,
        split: str = "private",
    ) -> int:
        """Insert a row ``evaluating`` whose score will be on ``split``; returns its id."""
        at = time.time() if at is None else at
        status = SubmissionStatus.EVALUATING
        rowid = self._db.write(
            "INSERT INTO submissions(submitted_at, path, weights_hash, status, eval_hash,"
            " snapshot, split) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (at, path, weights_hash, status, eval_hash, snapshot, split),
        )
        return int(rowid or 0)

    def update_submission(self, submission_id: int, **values: Any) -> None:
        """Set columns of one row; unknown column names raise ``ValueError``. Booleans are
        stored as 0/1 and the :data:`JSON_COLUMNS` as JSON text."""
        bad = set(values) - set(_SUB_FIELDS)
        if bad:
            raise ValueError(f"unknown submission columns: {sorted(bad)}")
        if not values:
            return
        cols = ", ".join(f"{k} = ?" for k in values)
        with self._db.transaction() as c:
            c.execute(
                f"UPDATE submissions SET {cols} WHERE id = ?",
                (*[_to_sql(k, v) for k, v in values.items()], submission_id),
            )

    def submission(self, submission_id: int) -> Submission | None:
        row = self._db.fetchone("SELECT * FROM submissions WHERE id = ?", (submission_id,))
        return _row_to_submission(row) if row else None

    def submissions(self) -> list[Submission]:
        """All accepted submissions, oldest first."""
        rows = self._db.fetchall("SELECT * FROM submissions ORDER BY id")
        return [_row_to_submission(r) for r in rows]

    def graded_with_fingerprint(self, fingerprint: str) -> Submission | None:
        """The first original submission with this fingerprint whose outcome is the model's
        own and so stands for the same files submitted again: graded, or failed by the
        model's fault. A harness failure (or an older ledger's failure of unknown kind) is
        never returned: those files deserve another evaluation."""
        row = self._db.fetchone(
            "SELECT * FROM submissions WHERE fingerprint = ? AND duplicate_of IS NULL"
            " AND (status = ? OR (status = ? AND failure_kind = 'model')) ORDER BY id LIMIT 1",
            (fingerprint, SubmissionStatus.GRADED, SubmissionStatus.FAILED),
        )
        return _row_to_submission(row) if row else None

    def retryable_failure(self, fingerprint: str) -> Submission | None:
        """The latest failed submission with this fingerprint that was not the model's fault
        (a harness failure, or a failure of unknown kind in an older ledger), if any: the one
        a new evaluation of the same files retries."""
        row = self._db.fetchone(
            "SELECT * FROM submissions WHERE fingerprint = ? AND status = ?"
            " AND (failure_kind IS NULL OR failure_kind != 'model') ORDER BY id DESC LIMIT 1",
            (fingerprint, SubmissionStatus.FAILED),
        )
        return _row_to_submission(row) if row else None

    def in_flight(self) -> list[Submission]:
        return [s for s in self.submissions() if s.status == SubmissionStatus.EVALUATING]

    def best(self) -> Submission | None:
        """The valid submission with the highest score (earliest wins ties; see
        :func:`agent2rl.grading.comparison.best`)."""
        return comparison.best(self.submissions())

    # -- rejections -----------------------------------------------------------------------
    def add_rejection(
        self, path: str | None, http_status: int, reason: str, at: float | None = None
    ) -> int:
        """Record a refused attempt and return its row id. ``path`` and ``reason`` are
        stored cut by :func:`cap_text` (at most :data:`MAX_REJECTION_FIELD_BYTES` each, the
        cut marked): the attempt may be unauthenticated and its values arbitrary."""
        with self._db.transaction() as c:
            return _insert_rejection(c, path, http_status, reason, at)

    def rejection_count(self, since: float | None = None) -> int:
        """How many rejections are recorded (at or after time ``since``, if given): an
        index count, cheap enough to call on every request (to rate-limit them)."""
        where, args = ("WHERE at >= ?", (since,)) if since is not None else ("", ())
        row = self._db.fetchone(f"SELECT COUNT(*) AS n FROM rejections {where}", args)
        return int(row["n"]) if row else 0

    def rejections(self) -> list[Rejection]:
        rows = self._db.fetchall("SELECT * FROM rejections ORDER BY id")
        return [Rejection(**dict(r)) for r in rows]

    # -- settling (the grading service's submission lifecycle) ----------------------------
    def withdraw_submission(
        self, submission_id: int, rejection: tuple[str | None, int, str] | None
    ) -> None:
        """A recorded submission that turned out to be a refusal (bad files found while
        staging, no disk space): in one transaction, delete its row if it is still
        ``evaluating`` and record ``rejection`` (path, HTTP status, reason; cut as in
        :meth:`add_rejection`), or nothing when ``rejection`` is None (rate-limited).
        Edge case: the id of a deleted last row is given to the next submission."""
        with self._db.transaction() as c:
            c.execute(
                "DELETE FROM submissions WHERE id = ? AND status = ?",
                (submission_id, SubmissionStatus.EVALUATING),
            )
            if rejection is not None:
                _insert_rejection(c, *rejection)

    def fail_unfinished(self, reason: str, ids: list[int] | None = None) -> list[int]:
        """End every row still ``evaluating`` (only those in ``ids``, if given) as
        ``failed``/``harness`` with ``reason``; returns their ids. For the run's end: the
        grading service stopped, so nothing will settle them; being harness failures, the
        same files submitted again later are evaluated."""
        if ids is not None and not ids:
            return []
        where = "status = ?"
        params: list[Any] = [SubmissionStatus.EVALUATING]
        if ids is not None:
            where += f" AND id IN ({', '.join('?' for _ in ids)})"
            params += list(ids)
        with self._db.transaction() as c:
            found = [
                int(r["id"]) for r in c.execute(f"SELECT id FROM submissions WHERE {where}", params)
            ]
            c.execute(
                f"UPDATE submissions SET status = ?, failure_kind = 'harness', error = ?,"
                f" finished_at = ? WHERE {where}",
                (SubmissionStatus.FAILED, reason, time.time(), *params),
            )
        return found


def _insert_rejection(
    c: sqlite3.Connection, path: str | None, status: int, reason: str, at: float | None = None
) -> int:
    cur = c.execute(
        "INSERT INTO rejections(at, path, http_status, reason) VALUES (?, ?, ?, ?)",
        (
            time.time() if at is None else at,
            None if path is None else cap_text(str(path)),
            status,
            cap_text(str(reason)),
        ),
    )
    return int(cur.lastrowid)


def _to_sql(column: str, value: Any) -> Any:
    if column in JSON_COLUMNS and value is not None:
        return json.dumps(value, sort_keys=True)
    return int(value) if isinstance(value, bool) else value


def _from_json(text: str | None) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:  # a torn value must not make the whole ledger unreadable
        return None


def _row_to_submission(row: sqlite3.Row) -> Submission:
    d = dict(row)
    d["is_copy"] = bool(d["is_copy"])
    d["status"] = SubmissionStatus(d["status"])
    for name in JSON_COLUMNS:
        d[name] = _from_json(d.get(name))
    return Submission(**{k: d.get(k) for k in _SUB_FIELDS})
