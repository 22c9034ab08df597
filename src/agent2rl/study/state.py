"""The study's state database: ``<study dir>/study.db`` (SQLite, WAL).

It is what makes a study resumable. Each run slot of the matrix has one row; each time a
slot is started, an attempt row. The study driver is the only writer; ``study status``,
``study export`` and the dashboard read it. A slot is ``finished`` once one of its attempts
ended with a run the benchmark counts (the agent's own failures count: a crash or an OOM is
a result), and that attempt's run is the slot's run: a later ``study run`` never starts it
again, so a study never has two runs of one slot.

Attempt outcomes (:func:`attempt_outcome`):

``finished``
    the run ended as ``completed``, ``deadline``, ``agent_error``, ``oom`` or ``disk_quota``;
``failed``
    the harness failed (``harness_error``, a run that could not start, a lost worker), or
    the run's infrastructure did (an ``agent_error`` the study classed as
    :data:`~agent2rl.orchestration.infra.INFRASTRUCTURE`: the provider answered 401/403/5xx, the
    agent's command could not run; see :mod:`agent2rl.orchestration.infra`): the slot is retried, up
    to ``--retries`` times per ``study run``;
``interrupted``
    the study was stopped (Ctrl-C, a signal, a killed driver): the slot is run again by the
    next ``study run`` and the attempt does not count against its retries.
"""

from __future__ import annotations

import json
import time
from contextlib import AbstractContextManager
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from agent2rl.errors import UserError
from agent2rl.rundir import FINISHED_RUN_STATUSES, RunStatus
from agent2rl.sqlite_store import SQLiteStore, StoreHandle
from agent2rl.study.spec import RunSlot, StudySpec

STATE_DB = "study.db"


class SlotStatus(StrEnum):
    """A slot's ``status`` in study.db (a ``str``, as stored): ``PENDING`` until an attempt
    is queued, ``RUNNING`` while one is, then ``FINISHED`` (its run counts) or ``FAILED``; an
    interrupted attempt puts it back to ``PENDING``."""

    PENDING = "pending"
    RUNNING = "running"
    FINISHED = "finished"
    FAILED = "failed"


class AttemptStatus(StrEnum):
    """An attempt's ``status`` in study.db: queued, running, then :func:`attempt_outcome`."""

    QUEUED = "queued"
    RUNNING = "running"
    FINISHED = "finished"
    FAILED = "failed"
    INTERRUPTED = "interrupted"


#: what an ended attempt makes of its slot
SLOT_AFTER = {
    AttemptStatus.FINISHED: SlotStatus.FINISHED,
    AttemptStatus.FAILED: SlotStatus.FAILED,
    AttemptStatus.INTERRUPTED: SlotStatus.PENDING,
}

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS slots (
    id INTEGER PRIMARY KEY,
    key TEXT NOT NULL UNIQUE,
    task TEXT NOT NULL, model TEXT NOT NULL, agent TEXT NOT NULL,
    driver TEXT, mode TEXT, repeat INTEGER NOT NULL, seed INTEGER NOT NULL,
    status TEXT NOT NULL DEFAULT 'pending',
    attempts INTEGER NOT NULL DEFAULT 0,
    run_id TEXT, run_dir TEXT, run_status TEXT, error TEXT,
    updated_at REAL
);
CREATE TABLE IF NOT EXISTS attempts (
    slot_id INTEGER NOT NULL REFERENCES slots(id),
    n INTEGER NOT NULL,
    status TEXT NOT NULL,
    queued_at REAL, started_at REAL, ended_at REAL,
    run_id TEXT, run_dir TEXT, run_status TEXT, error TEXT, node TEXT,
    PRIMARY KEY (slot_id, n)
);
"""


def attempt_outcome(run_status: str | None, failure: str | None = None) -> AttemptStatus:
    """What a run's final ``run.json`` status means for its slot (see the module docstring).
    None (no run directory, or a run that never wrote a final status) is ``failed``, and so
    is any run with a ``failure`` kind (``infrastructure``), whatever its status."""
    if failure is not None and run_status != RunStatus.INTERRUPTED:
        return AttemptStatus.FAILED
    if run_status in FINISHED_RUN_STATUSES:
        return AttemptStatus.FINISHED
    if run_status == RunStatus.INTERRUPTED:
        return AttemptStatus.INTERRUPTED
    return AttemptStatus.FAILED


@dataclass(frozen=True)
class SlotRow(RunSlot):
    """One slot as the database holds it: its :class:`RunSlot` (whose ``key`` is the row's)
    and its state."""

    id: int
    status: SlotStatus
    attempts: int
    run_id: str | None
    """The counted run (finished), else the last attempt's run, if it made one."""
    run_dir: str | None
    run_status: str | None
    error: str | None


@dataclass(frozen=True)
class AttemptRow:
    slot_id: int
    n: int
    status: AttemptStatus
    queued_at: float | None
    started_at: float | None
    ended_at: float | None
    run_id: str | None
    run_dir: str | None
    run_status: str | None
    error: str | None
    node: str | None


def state_path(study_dir: Path) -> Path:
    return Path(study_dir) / STATE_DB


def is_study_dir(path: Path) -> bool:
    return state_path(path).is_file()


def _not_a_study(study_dir: Path) -> UserError:
    return UserError(
        f"{study_dir} is not a study directory (no {STATE_DB}): "
        "pass the --out of `agent2rl study run`"
    )


class StudyReader(StoreHandle):
    """The state database of one study directory, opened only to read
    (:meth:`SQLiteStore.reader <agent2rl.sqlite_store.SQLiteStore.reader>`): no file is
    created, no schema or migration runs and no write lock is taken, so a live driver is
    never blocked (``study status``, ``study export``, the viewer). Raises
    :class:`UserError` when ``study_dir`` is not a study directory. :class:`StudyState`, the
    driver's writer, reads through the same methods.
    """

    def __init__(self, study_dir: Path) -> None:
        store = SQLiteStore.reader(state_path(study_dir))
        if store is None:
            raise _not_a_study(study_dir)
        self.path = store.path
        self._db = store

    def snapshot(self) -> AbstractContextManager[Any]:
        """A read transaction: the reads inside it see one state of the database."""
        return self._db.read()

    def get_meta(self, key: str) -> Any:
        row = self._db.fetchone("SELECT value FROM meta WHERE key = ?", (key,))
        return json.loads(row["value"]) if row else None

    def slots(self) -> list[SlotRow]:
        rows = self._db.fetchall(
            "SELECT id, task, model, agent, driver, mode, repeat, seed, status, attempts,"
            " run_id, run_dir, run_status, error FROM slots ORDER BY id"
        )
        return [SlotRow(**{**dict(r), "status": SlotStatus(r["status"])}) for r in rows]

    def slot(self, slot_id: int) -> SlotRow:
        return next(s for s in self.slots() if s.id == slot_id)

    def attempts(self, slot_id: int | None = None) -> list[AttemptRow]:
        where, args = ("WHERE slot_id = ?", (slot_id,)) if slot_id is not None else ("", ())
        rows = self._db.fetchall(f"SELECT * FROM attempts {where} ORDER BY slot_id, n", args)
        return [AttemptRow(**{**dict(r), "status": AttemptStatus(r["status"])}) for r in rows]

    def open_attempts(self) -> list[AttemptRow]:
        """Attempts a previous driver left ``queued`` or ``running`` (it was killed)."""
        return [
            a for a in self.attempts() if a.status in (AttemptStatus.QUEUED, AttemptStatus.RUNNING)
        ]

    def status_counts(self) -> dict[str, int]:
        """Slots per status, the statuses that have slots only."""
        rows = self._db.fetchall("SELECT status, COUNT(*) AS n FROM slots GROUP BY status")
        return {row["status"]: row["n"] for row in rows}

    def counts(self) -> dict[str, int]:
        """Slots per status (every status present, zero when none)."""
        return dict.fromkeys(list(SlotStatus), 0) | self.status_counts()

    def finished_runs(self) -> list[SlotRow]:
        """The counted runs: one per finished slot, in slot order."""
        return [s for s in self.slots() if s.status == SlotStatus.FINISHED and s.run_dir]


class StudyState(StudyReader):
    """The state database of one study directory, for its driver (created on first open
    for writing).

    Every write is one short transaction, so a study killed at any moment leaves the
    database as of its last completed write. Safe to share between threads (one connection
    behind one lock, :class:`~agent2rl.sqlite_store.SQLiteStore`).
    """

    def __init__(self, study_dir: Path, *, create: bool = False) -> None:
        if not create and not is_study_dir(study_dir):
            raise _not_a_study(study_dir)
        self.path = state_path(study_dir)
        self._db = SQLiteStore(self.path, schema=SCHEMA)

    # -- meta ----------------------------------------------------------------------------
    def set_meta(self, key: str, value: Any) -> None:
        self._db.write(
            "INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, json.dumps(value))
        )

    def bind(self, spec: StudySpec, spec_text: str) -> None:
        """Tie the directory to ``spec`` on first use; later, refuse a spec whose run
        settings differ (budget, seed, sandbox, backend, token budget, task options). The
        matrix itself may grow: new slots are added by :meth:`sync_slots`."""
        # one transaction: two drivers binding one directory at once cannot both pass the
        # check, and a killed driver leaves all of the binding or none of it
        with self._db.transaction():
            known = self.get_meta("settings_hash")
            if known is not None and known != spec.settings_hash():
                old = self.get_meta("run_settings") or {}
                new = spec.run_settings()
                changed = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
                raise UserError(
                    f"{self.path.parent} holds study {self.get_meta('name')!r} run with other "
                    f"settings (changed: {', '.join(changed) or 'settings'}): its runs would "
                    "not be comparable. Use another --out, or restore those settings"
                )
            self.set_meta("name", spec.name)
            self.set_meta("settings_hash", spec.settings_hash())
            self.set_meta("run_settings", spec.run_settings())
            self.set_meta("spec", spec.model_dump(mode="json"))
            self.set_meta("spec_text", spec_text)

    # -- slots ---------------------------------------------------------------------------
    def sync_slots(self, slots: list[RunSlot]) -> None:
        """Add the slots not yet known (existing ones keep their state)."""
        now = time.time()
        with self._db.transaction() as db:
            for s in slots:
                db.execute(
                    "INSERT OR IGNORE INTO slots (key, task, model, agent, driver, mode, repeat,"
                    " seed, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (s.key, s.task, s.model, s.agent, s.driver, s.mode, s.repeat, s.seed, now),
                )

    # -- attempts ------------------------------------------------------------------------
    def queue_attempt(self, slot_id: int) -> int:
        """A new attempt of ``slot_id`` (status ``queued``); the slot becomes ``running``.
        Returns the attempt number (1, 2, ...)."""
        now = time.time()
        with self._db.transaction() as db:  # the number read and the row written, atomically
            n = db.execute(
                "SELECT COALESCE(MAX(n), 0) + 1 FROM attempts WHERE slot_id = ?", (slot_id,)
            ).fetchone()[0]
            db.execute(
                "INSERT INTO attempts (slot_id, n, status, queued_at) VALUES (?, ?, ?, ?)",
                (slot_id, n, AttemptStatus.QUEUED, now),
            )
            db.execute(
                "UPDATE slots SET status = ?, attempts = attempts + 1, updated_at = ? WHERE id = ?",
                (SlotStatus.RUNNING, now, slot_id),
            )
        return n

    def mark_started(self, slot_id: int, n: int, started_at: float, node: str | None) -> None:
        self._db.write(
            "UPDATE attempts SET status = ?, started_at = ?, node = ?"
            " WHERE slot_id = ? AND n = ? AND status = ?",
            (AttemptStatus.RUNNING, started_at, node, slot_id, n, AttemptStatus.QUEUED),
        )

    def end_attempt(
        self,
        slot_id: int,
        n: int,
        *,
        run_id: str | None,
        run_dir: str | None,
        run_status: str | None,
        error: str | None,
        failure: str | None = None,
    ) -> AttemptStatus:
        """Close attempt ``n`` with what its run ended as; the slot becomes ``finished``
        (this run is its run), ``failed`` or, interrupted, ``pending`` again. ``failure``
        (``infrastructure``) makes a finished-looking run a failed attempt; ``error`` should
        then say why."""
        outcome = attempt_outcome(run_status, failure)
        now = time.time()
        run = (run_id, run_dir, run_status, error)
        with self._db.transaction() as db:
            db.execute(
                "UPDATE attempts SET status = ?, ended_at = ?, run_id = ?, run_dir = ?,"
                " run_status = ?, error = ? WHERE slot_id = ? AND n = ?",
                (outcome, now, *run, slot_id, n),
            )
            db.execute(
                "UPDATE slots SET status = ?, run_id = ?, run_dir = ?, run_status = ?,"
                " error = ?, updated_at = ? WHERE id = ? AND status != ?",
                (SLOT_AFTER[outcome], *run, now, slot_id, SlotStatus.FINISHED),
            )
        return outcome

    def failures_since(self, slot_id: int, since: float) -> int:
        """Failed attempts of ``slot_id`` queued at or after ``since`` (this ``study run``)."""
        row = self._db.fetchone(
            "SELECT COUNT(*) FROM attempts WHERE slot_id = ? AND status = ? AND queued_at >= ?",
            (slot_id, AttemptStatus.FAILED, since),
        )
        return int(row[0]) if row else 0


def read_state(study_dir: Path) -> tuple[dict[str, Any], list[SlotRow], list[AttemptRow]]:
    """Meta, slots and attempts of a study directory, read once (for status and export).
    Raises :class:`UserError` when ``study_dir`` is not a study directory."""
    with StudyReader(study_dir) as db, db.snapshot():
        meta = {k: db.get_meta(k) for k in ("name", "spec", "run_settings", "last_run")}
        return meta, db.slots(), db.attempts()
