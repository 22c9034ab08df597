"""RunRecord, the one read model of a run directory, over directories written by the real
writers (RunInfo, the grader's Ledger, the code recorder): reading never writes (the
ledger's bytes and mtime unchanged, no -wal or -shm created, an older ledger not migrated),
and a run that is missing pieces or still being written reads as such."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest
from support.rundirs import snapshot, write_run

from agent2rl.grading.ledger import Ledger, SubmissionStatus
from agent2rl.recording.snapshot import EMPTY_TREE
from agent2rl.run_record import JsonlTail, RunRecord
from agent2rl.rundir import RunPaths, RunStatus


def _listing(root: Path) -> dict[str, tuple[int, int]]:
    """Every file under ``root``: (size, mtime_ns)."""
    return {
        str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def _finished_run(root: Path) -> RunPaths:
    now = time.time()
    paths = write_run(root, status="completed", ended_at=now)
    first = snapshot(paths, {"train.py": "LR = 0.1\n"}, "start")
    second = snapshot(paths, {"train.py": "LR = 0.01\nEPOCHS = 2\n"}, "submission: output/v1")
    with Ledger(paths.ledger) as led:
        led.set_meta("baseline", {"score": 20.0, "eval_hash": "E"})
        a = led.add_submission("output/v1", "w1", "E", snapshot=first, at=now - 30)
        led.update_submission(a, status=SubmissionStatus.GRADED, score=40.0, eval_hash="E")
        b = led.add_submission("output/v2", "w2", "E", snapshot=second, at=now - 20)
        led.update_submission(b, status=SubmissionStatus.FAILED, failure_kind="model")
        led.add_rejection("../escape", 400, "path escapes output/")
    return paths


def test_reading_a_finished_run_leaves_its_directory_as_it_was(tmp_path: Path) -> None:
    paths = _finished_run(tmp_path / "run")
    assert not paths.ledger.with_name("ledger.db-wal").exists()  # the writer closed cleanly
    before = _listing(paths.root)
    ledger_bytes = paths.ledger.read_bytes()

    record = RunRecord(paths.root)
    assert record.status() == RunStatus.COMPLETED and record.settled()
    led = record.ledger()
    assert led.exists and [s.status for s in led.submissions] == ["graded", "failed"]
    assert led.baseline == {"score": 20.0, "eval_hash": "E"}
    assert led.best is not None and led.best.score == 40.0
    assert [(r.http_status, r.reason) for r in led.rejections] == [(400, "path escapes output/")]
    assert led.final_grade is None  # a private-protocol run has none
    snaps = record.git.log()
    assert [s.message for s in snaps] == ["start", "submission: output/v1"]
    assert snaps[0].parent is None and snaps[1].parent == snaps[0].sha
    assert record.git.numstat(EMPTY_TREE, snaps[1].sha) == (2, 0)
    assert "+EPOCHS = 2" in (record.git.show(snaps[1].sha) or "")
    assert record.env().sessions == [] and record.env().steps == 0

    assert paths.ledger.read_bytes() == ledger_bytes
    assert _listing(paths.root) == before  # no -wal, no -shm, no lock file, nothing touched
    # immutable: not even while the reader is open (a WAL reader would map a -shm file)
    reader = Ledger.reader(paths.ledger, settled=True)
    assert reader is not None
    with reader:
        assert len(reader.submissions()) == 2
        assert not any(paths.root.glob("ledger.db-*"))


def test_a_read_only_ledger_refuses_writes_and_never_migrates(tmp_path: Path) -> None:
    """An older ledger (no ``timings`` or ``split`` column) reads its missing columns as
    None and is left unmigrated; a write through the reader fails."""
    paths = write_run(tmp_path / "old", status="deadline", ended_at=time.time())
    with sqlite3.connect(paths.ledger) as con:
        con.executescript(
            "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);"
            "CREATE TABLE submissions (id INTEGER PRIMARY KEY, submitted_at REAL NOT NULL,"
            " path TEXT NOT NULL, status TEXT NOT NULL, score REAL, is_copy INTEGER NOT NULL"
            " DEFAULT 0, snapshot TEXT);"
            "CREATE TABLE rejections (id INTEGER PRIMARY KEY, at REAL NOT NULL, path TEXT,"
            " http_status INTEGER NOT NULL, reason TEXT NOT NULL);"
            "INSERT INTO submissions(submitted_at, path, status, score) VALUES"
            " (1.0, 'output/a', 'graded', 55.0);"
        )
    con.close()
    before = paths.ledger.read_bytes()
    (sub,) = RunRecord(paths.root).ledger().submissions
    assert sub.score == 55.0 and sub.timings is None and sub.score_split == "private"
    ledger = Ledger.reader(paths.ledger, settled=True)
    assert ledger is not None
    with ledger, pytest.raises(sqlite3.OperationalError, match="readonly"):
        ledger.add_rejection(None, 401, "bad token")
    assert paths.ledger.read_bytes() == before
    with sqlite3.connect(paths.ledger) as con:
        columns = {r[1] for r in con.execute("PRAGMA table_info(submissions)")}
    con.close()
    assert "timings" not in columns  # not migrated by reading


def test_missing_pieces_and_a_run_being_written_read_as_such(tmp_path: Path) -> None:
    root = tmp_path / "young"
    root.mkdir()
    record = RunRecord(root)
    # no run.json yet: no info, no status, not settled; no ledger: empty and not created
    assert record.info() is None and record.status() is None and not record.settled()
    led = record.ledger()
    assert not led.exists and led.submissions == [] and led.baseline is None
    assert not (root / "ledger.db").exists() and record.git.log() == []
    assert list(root.iterdir()) == []

    paths = write_run(root)  # running: its grader holds the ledger open
    with Ledger(paths.ledger) as writer:
        writer.add_submission("output/v1", "w1", "E")
        assert record.status() == RunStatus.RUNNING and not record.settled()
        (live,) = record.ledger().submissions
        assert live.status == SubmissionStatus.EVALUATING
        writer.add_submission("output/v2", "w2", "E")  # read as it grows, never blocking it
        assert [s.path for s in record.ledger().submissions] == ["output/v1", "output/v2"]

    # a ledger file whose tables are not created yet exists, and is empty
    empty = write_run(tmp_path / "empty")
    empty.ledger.touch()
    led = RunRecord(empty.root).ledger()
    assert led.exists and led.submissions == [] and led.meta == {}


def test_a_jsonl_tail_reads_complete_lines_only(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    tail = JsonlTail(path)
    assert tail.refresh() == []  # no file yet
    path.write_text('{"a": 1}\n[1]\n{"b": ')
    assert tail.refresh() == [{"a": 1}]  # a non-object line skipped, a torn one waits
    with open(path, "a") as fh:
        fh.write("2}\n")
    assert tail.refresh() == [{"a": 1}, {"b": 2}] and tail.line(1) == {"b": 2}
    path.write_text('{"c": 3}\n')  # replaced: read again from the start
    assert tail.refresh() == [{"c": 3}]
