"""The one read model of a run directory, :class:`RunRecord`: every reader of a run (report,
viewer, export, recovery, studies, dashboard) reads through it; only the harness's writers
(the grader's Ledger, ``RunInfo.save``, the code recorder) write.

It reads ``run.json``; the ledger and the rollout record read-only (``Ledger.reader``: no
schema, no migrations, no file created; immutable once the run ended, so reading a finished
run leaves its directory byte for byte as it was); the code snapshots through the one git
reader (:attr:`RunRecord.git`); JSON-lines files live writers append to (:class:`JsonlTail`).
A run still being written reads as such: no ``run.json`` yet gives ``info()`` None, no ledger
yet an empty :class:`LedgerRecord` whose ``exists`` is False (True, empty, for a ledger whose
tables are not created yet).
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent2rl.files import json_object
from agent2rl.grading import comparison
from agent2rl.grading.ledger import Ledger, Rejection, Submission
from agent2rl.recording.snapshot import SnapshotReader
from agent2rl.rollout.env_record import EnvLedger, SessionRow
from agent2rl.rundir import RunInfo, RunPaths, RunStatus

if TYPE_CHECKING:
    from agent2rl.grading.final import FinalGrade


@dataclass(frozen=True)
class LedgerRecord:
    """What a run's ledger holds, read in one snapshot. ``meta`` values are decoded JSON.
    ``exists``: there is a ledger file (a run that failed before grading has none)."""

    exists: bool = False
    submissions: list[Submission] = field(default_factory=list)
    rejections: list[Rejection] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)

    def record(self, key: str) -> dict[str, Any] | None:
        """The meta value ``key`` when it is a record (a dict); None otherwise."""
        value = self.meta.get(key)
        return value if isinstance(value, dict) else None

    @property
    def baseline(self) -> dict[str, Any] | None:
        """The baseline's score record (score, n_items, items_path, eval_seconds, eval_hash)."""
        return self.record("baseline")

    @property
    def best(self) -> Submission | None:
        """The valid submission with the highest score (:func:`comparison.best`)."""
        return comparison.best(self.submissions)

    @property
    def final_grade(self) -> FinalGrade | None:
        """The validation protocol's end-of-run grade (None: none recorded)."""
        # Imported here: grading.final pulls in the evaluator, which the viewer never needs.
        from agent2rl.grading.final import FinalGrade

        data = self.record("final_grade")
        return FinalGrade.from_dict(data) if data is not None else None


@dataclass(frozen=True)
class EnvRecord:
    """The rollout record of a level-3 run: its sessions and how many steps were played."""

    sessions: list[SessionRow] = field(default_factory=list)
    steps: int = 0


class RunRecord:
    """Reads one run directory (nothing is opened or created by constructing it)."""

    def __init__(self, root: Path) -> None:
        self.paths = RunPaths(Path(root))
        self.git = SnapshotReader(self.paths.code_git)

    def info(self) -> RunInfo | None:
        """``run.json``; None when it is missing, unreadable or not a run's (no run yet)."""
        try:
            return RunInfo.load(self.paths)
        except (OSError, ValueError, TypeError, AttributeError):
            return None

    def status(self) -> RunStatus | None:
        """How the run stands; None without a readable ``run.json`` or an unknown status."""
        info = self.info()
        return RunStatus(info.status) if info and info.status in set(RunStatus) else None

    def settled(self) -> bool:
        """Whether the run ended: its databases have no writer any more (not without a
        ``run.json``: it may be being created)."""
        status = self.status()
        return status is not None and not status.live

    def ledger(self) -> LedgerRecord:
        """The ledger's submissions, rejections and meta, in one read transaction."""
        ledger = Ledger.reader(self.paths.ledger, settled=self.settled())
        if ledger is None:
            return LedgerRecord()
        with ledger:
            try:
                subs, rejections, meta = ledger.contents()
            except sqlite3.Error:  # its tables not created yet, or a torn file
                return LedgerRecord(exists=True)
        return LedgerRecord(True, subs, rejections, meta)

    def env(self) -> EnvRecord:
        """The rollout record (empty for a run without one, or one not yet created)."""
        env = EnvLedger.reader(self.paths.env_db, settled=self.settled())
        if env is None:
            return EnvRecord()
        with env:
            try:
                return EnvRecord(env.sessions(), len(env.step_times()))
            except sqlite3.Error:
                return EnvRecord()


class JsonlTail:
    """A JSON-lines file read incrementally: complete lines only (a line being written is
    read on the next refresh), each parsed once, with its byte offset kept for random
    access. ``summarize`` turns a parsed line into what is kept in memory. A replaced or
    truncated file is read again from its start; a line that is not a JSON object is
    skipped."""

    def __init__(
        self, path: Path, summarize: Callable[[dict[str, Any]], Any] = lambda d: d
    ) -> None:
        self.path = path
        self.summarize = summarize
        self.items: list[Any] = []
        self.offsets: list[int] = []
        self._pos = 0
        self._ino: int | None = None
        self._lock = threading.Lock()

    def refresh(self) -> list[Any]:
        with self._lock:
            try:
                st = self.path.stat()
            except OSError:
                return self.items
            if st.st_ino != self._ino or st.st_size < self._pos:
                self.items, self.offsets, self._pos, self._ino = [], [], 0, st.st_ino
            if st.st_size == self._pos:
                return self.items
            with open(self.path, "rb") as f:
                f.seek(self._pos)
                data = f.read(st.st_size - self._pos)
            end = data.rfind(b"\n")
            if end < 0:
                return self.items
            for raw in data[:end].split(b"\n"):
                obj = json_object(raw)
                if obj is not None:
                    self.items.append(self.summarize(obj))
                    self.offsets.append(self._pos)
                self._pos += len(raw) + 1
            return self.items

    def line(self, index: int) -> dict[str, Any] | None:
        """The whole parsed line ``index`` (as counted in :attr:`items`)."""
        with self._lock:
            if not 0 <= index < len(self.offsets):
                return None
            offset = self.offsets[index]
        with open(self.path, "rb") as f:
            f.seek(offset)
            return json_object(f.readline())
