"""The SQLite connection helper every store uses: transactions are all-or-nothing and never
interleave between threads, reads see one snapshot, the schema and migrations run once, and
the settings (WAL, busy timeout, autocommit) are the project's."""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
from pathlib import Path

import pytest

from agent2rl import sqlite_store
from agent2rl.errors import UserError
from agent2rl.sqlite_store import (
    JOURNAL_MODE_ENV,
    SQLiteStore,
    filesystem_type,
    journal_mode,
    schema_statements,
)

SCHEMA = """
CREATE TABLE IF NOT EXISTS pairs (id INTEGER PRIMARY KEY, half TEXT NOT NULL, -- a; comment
    note TEXT DEFAULT 'x;y');
CREATE INDEX IF NOT EXISTS pairs_half ON pairs(half);
"""


def test_settings_and_schema(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "a" / "s.db", schema=SCHEMA) as store:
        assert store.fetchone("PRAGMA journal_mode")[0] == "wal"
        assert store.fetchone("PRAGMA busy_timeout")[0] == 30000
        assert isinstance(store.fetchone("SELECT 1 AS one"), sqlite3.Row)
        rowid = store.write("INSERT INTO pairs(half) VALUES ('a')")
        assert store.fetchone("SELECT note FROM pairs WHERE id = ?", (rowid,))["note"] == "x;y"
    assert schema_statements(SCHEMA)[0].endswith("'x;y');")
    assert len(schema_statements(SCHEMA + "\n-- trailing comment")) == 2


def test_transaction_commits_rolls_back_and_nests(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s.db", schema=SCHEMA)
    with pytest.raises(RuntimeError), store.transaction() as db:
        db.execute("INSERT INTO pairs(half) VALUES ('lost')")
        raise RuntimeError("boom")
    assert store.fetchall("SELECT * FROM pairs") == []
    with store.transaction() as db:
        db.execute("INSERT INTO pairs(half) VALUES ('outer')")
        with store.transaction() as inner:  # joins the outer transaction
            inner.execute("INSERT INTO pairs(half) VALUES ('inner')")
        assert store.fetchone("SELECT COUNT(*) FROM pairs")[0] == 2  # its own writes
    with pytest.raises(ValueError), store.transaction():
        store.write("INSERT INTO pairs(half) VALUES ('nested write')")
        raise ValueError("the outer block fails: the nested write goes with it")
    assert [r["half"] for r in store.fetchall("SELECT half FROM pairs ORDER BY id")] == [
        "outer",
        "inner",
    ]
    with pytest.raises(RuntimeError, match="inside a read"), store.read():
        store.write("INSERT INTO pairs(half) VALUES ('from a snapshot')")
    assert store.fetchone("SELECT COUNT(*) FROM pairs")[0] == 2
    store.close()
    store.close()  # idempotent
    with pytest.raises(sqlite3.ProgrammingError):
        store.fetchall("SELECT * FROM pairs")


def test_lazy_store_touches_nothing_until_used_and_reopens(tmp_path: Path) -> None:
    path = tmp_path / "lazy" / "s.db"
    store = SQLiteStore(path, schema=SCHEMA, lazy=True)
    assert not path.exists()
    store.write("INSERT INTO pairs(half) VALUES ('a')")
    store.close()
    assert store.fetchone("SELECT COUNT(*) FROM pairs")[0] == 1  # reopened
    store.close()


def test_two_row_transactions_are_seen_whole_by_concurrent_readers(tmp_path: Path) -> None:
    """16 writer threads each commit 30 transactions of two rows while 16 readers count
    rows (one query) and compare halves (two queries in one :meth:`read`): nothing raises,
    no reader sees an odd count or unequal halves, no acknowledged pair is missing."""
    store = SQLiteStore(tmp_path / "s.db", schema=SCHEMA)
    start = threading.Barrier(32)
    errors: list[BaseException] = []
    torn: list[tuple[int, int]] = []
    acked: list[int] = []

    def writer(t: int) -> None:
        start.wait()
        for i in range(30):
            try:
                with store.transaction() as db:
                    db.execute("INSERT INTO pairs(half) VALUES ('a')")
                    db.execute("INSERT INTO pairs(half) VALUES ('b')")
                acked.append(t * 100 + i)
            except Exception as err:
                errors.append(err)

    def reader() -> None:
        start.wait()
        for _ in range(30):
            try:
                if store.fetchone("SELECT COUNT(*) FROM pairs")[0] % 2:
                    torn.append((-1, -1))
                with store.read() as db:
                    a = db.execute("SELECT COUNT(*) FROM pairs WHERE half = 'a'").fetchone()[0]
                    b = db.execute("SELECT COUNT(*) FROM pairs WHERE half = 'b'").fetchone()[0]
                if a != b:
                    torn.append((a, b))
            except Exception as err:
                errors.append(err)

    threads = [threading.Thread(target=writer, args=(t,)) for t in range(16)]
    threads += [threading.Thread(target=reader) for _ in range(16)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(60)
    assert not any(th.is_alive() for th in threads), "a deadlock"
    assert not errors, errors[0]
    assert not torn
    assert store.fetchone("SELECT COUNT(*) FROM pairs")[0] == 2 * len(acked) == 2 * 16 * 30
    store.close()


def test_schema_and_migration_run_in_one_transaction(tmp_path: Path) -> None:
    """A migration that fails leaves no half-migrated database behind, and the next open
    runs it again."""
    path = tmp_path / "s.db"
    SQLiteStore(path, schema=SCHEMA).close()

    def broken(conn: sqlite3.Connection) -> None:
        conn.execute("ALTER TABLE pairs ADD COLUMN extra TEXT")
        raise OSError("killed mid-migration")

    with pytest.raises(OSError):
        SQLiteStore(path, schema=SCHEMA, migrate=broken)

    def add(conn: sqlite3.Connection) -> None:
        if "extra" not in {r["name"] for r in conn.execute("PRAGMA table_info(pairs)")}:
            conn.execute("ALTER TABLE pairs ADD COLUMN extra TEXT")

    with SQLiteStore(path, schema=SCHEMA, migrate=add) as store:
        assert "extra" in {r["name"] for r in store.fetchall("PRAGMA table_info(pairs)")}


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_opens_its_own_connection(tmp_path: Path) -> None:
    """A store used in a forked child opens a fresh connection there; the parent's keeps
    working and both writes land."""
    store = SQLiteStore(tmp_path / "s.db", schema=SCHEMA)
    store.write("INSERT INTO pairs(half) VALUES ('parent')")
    pid = os.fork()
    if pid == 0:  # the child: never return into pytest
        code = 1
        try:
            store.write("INSERT INTO pairs(half) VALUES ('child')")
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    store.write("INSERT INTO pairs(half) VALUES ('parent again')")
    halves = [r["half"] for r in store.fetchall("SELECT half FROM pairs ORDER BY id")]
    assert halves == ["parent", "child", "parent again"]
    store.close()


def test_journal_mode_setting(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(JOURNAL_MODE_ENV, "delete")
    assert journal_mode() == "DELETE"
    with SQLiteStore(tmp_path / "s.db", schema=SCHEMA) as store:
        assert store.fetchone("PRAGMA journal_mode")[0] == "delete"
    monkeypatch.setenv(JOURNAL_MODE_ENV, "memory")
    with pytest.raises(UserError, match="WAL"):
        SQLiteStore(tmp_path / "t.db")


def test_a_store_on_a_network_filesystem_warns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """No NFS mount here: the filesystem type is what the test stands in for."""
    monkeypatch.setattr(sqlite_store, "filesystem_type", lambda path: "nfs4")
    with caplog.at_level(logging.WARNING, logger="agent2rl.sqlite_store"):
        SQLiteStore(tmp_path / "s.db").close()
        SQLiteStore(tmp_path / "s.db").close()  # once per path
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1 and "nfs4" in warnings[0] and "local disk" in warnings[0]


def test_filesystem_type() -> None:
    assert filesystem_type(Path("/proc/self")) == "proc"
    assert filesystem_type(Path("/")) is not None
