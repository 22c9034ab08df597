"""One way to open and use a SQLite database, for every store of the harness.

Every database of the harness (the run's ledger, the rollout record, the results ledger, the
study state, the judgment and LLM response caches) is a :class:`SQLiteStore`. It opens the
file with the project's settings (WAL journal, a busy timeout, ``isolation_level=None`` so that this
module, not Python's ``sqlite3``, decides where transactions begin and end, rows as
:class:`sqlite3.Row`), creates the schema and runs a store's migrations in one transaction.

The thread rule: one connection per store object, guarded by one re-entrant lock that is held
for the whole of every transaction and every read.

- Why not a connection per thread (``threading.local``)? A server answering from a
  threadpool (FastAPI's has 40 threads) would open one connection per worker thread, and
  :meth:`SQLiteStore.close`, called from one thread, could not close the others: they leak
  until the threads die, each holding WAL read marks that stall checkpoints. A single
  connection is closed exactly once.
- What the lock costs: SQLite admits one writer at a time anyway, so writes lose nothing;
  reads of the same store in one process wait for each other instead of running side by side.
  Every read here takes milliseconds, far below a request's other costs.
- Why re-entrant: a method that holds a transaction may call the store's readers (or another
  method that opens a transaction, which then joins the outer one: see
  :meth:`SQLiteStore.transaction`).
- Several processes: each opens its own store; WAL lets readers run beside one writer, and a
  writer waits up to the busy timeout for another's ``BEGIN IMMEDIATE`` to end. It waits
  holding the lock, so while another process writes, this store's readers in this process
  wait too (for as long as that write transaction lasts: every store keeps them short).
- ``fork``: a SQLite connection must not be used in a child it was inherited by. A store
  used in a forked child opens a fresh connection and lock there (the parent's connection is
  kept referenced, never closed, in the child: closing it there could disturb the parent's
  locks).

Networked filesystems: WAL keeps its index in a ``<db>-shm`` file that every process maps in
shared memory, so WAL is unsafe on NFS, SMB/CIFS, sshfs, Lustre and the like (readers can see
stale or torn pages; the database can be corrupted), and processes on different hosts can
never share one WAL database. Keep ``AGENT2RL_HOME`` and the runs directory on a local disk
(opening a store on one of :data:`NETWORK_FILESYSTEMS` logs a warning), or, on a networked
filesystem whose ``fcntl`` locks work (NFSv4), set ``AGENT2RL_SQLITE_JOURNAL_MODE=DELETE``:
the rollback journal needs only file locks, at the price of readers blocking the writer.
"""

from __future__ import annotations

import logging
import os
import re
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar, Self
from urllib.parse import quote

from agent2rl.errors import UserError

log = logging.getLogger(__name__)

#: seconds a statement waits for another process's lock before ``database is locked``
DEFAULT_TIMEOUT_S = 30.0

#: environment variable naming the journal mode (``WAL`` unless set; see the module docstring)
JOURNAL_MODE_ENV = "AGENT2RL_SQLITE_JOURNAL_MODE"
_JOURNAL_MODES = frozenset({"WAL", "DELETE", "TRUNCATE", "PERSIST"})

#: filesystem types (as ``/proc/self/mounts`` names them) on which WAL is unsafe
NETWORK_FILESYSTEMS = frozenset(
    {
        "nfs", "nfs4", "cifs", "smb3", "smbfs", "ncpfs", "afs", "9p", "lustre", "gpfs",
        "beegfs", "glusterfs", "ceph", "fuse.sshfs", "fuse.glusterfs", "fuse.s3fs",
        "fuse.gcsfuse", "fuse.rclone", "fuse.cephfs", "fuse.juicefs",
    }
)  # fmt: skip

Params = Sequence[Any] | dict[str, Any]
Migration = Callable[[sqlite3.Connection], None]

_OCTAL = re.compile(r"\\([0-7]{3})")
_warned_paths: set[str] = set()
# Connections inherited by a forked child: kept alive there so that the child never closes them.
_inherited: list[sqlite3.Connection] = []


def filesystem_type(path: Path) -> str | None:
    """The type of the filesystem holding ``path`` (``ext4``, ``nfs4``...) from
    ``/proc/self/mounts``, or None where that file cannot be read (not Linux)."""
    try:
        mounts = Path("/proc/self/mounts").read_text().splitlines()
    except OSError:
        return None
    target = str(Path(path).resolve())
    best, kind = "", None
    for line in mounts:
        parts = line.split()
        if len(parts) < 3:
            continue
        # /proc/mounts escapes spaces and the like in mount points as octal (\040)
        point = _OCTAL.sub(lambda m: chr(int(m.group(1), 8)), parts[1])
        inside = target == point or target.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best):
            best, kind = point, parts[2]
    return kind


def journal_mode() -> str:
    """The journal mode stores open with: ``AGENT2RL_SQLITE_JOURNAL_MODE`` or ``WAL``.

    Raises :class:`~agent2rl.errors.UserError` naming the allowed values for anything else."""
    mode = (os.environ.get(JOURNAL_MODE_ENV) or "WAL").strip().upper()
    if mode not in _JOURNAL_MODES:
        raise UserError(
            f"{JOURNAL_MODE_ENV}={mode!r} is not a journal mode: use one of "
            f"{', '.join(sorted(_JOURNAL_MODES))} (WAL unless the database is on a network "
            "filesystem)"
        )
    return mode


def _warn_if_networked(path: Path, mode: str) -> None:
    kind = filesystem_type(path.parent)
    key = str(path)
    if mode == "WAL" and kind in NETWORK_FILESYSTEMS and key not in _warned_paths:
        _warned_paths.add(key)
        log.warning(
            "%s is on a %s filesystem, where SQLite's WAL mode is unsafe (it needs shared "
            "memory): keep AGENT2RL_HOME and the runs directory on a local disk, or set "
            "%s=DELETE if this filesystem's file locks work",
            path,
            kind,
            JOURNAL_MODE_ENV,
        )


def connect(
    path: Path, *, timeout: float = DEFAULT_TIMEOUT_S, synchronous: str | None = None
) -> sqlite3.Connection:
    """A connection to ``path`` (its directory created) with the project's settings (the
    module docstring) and, if given, ``PRAGMA synchronous`` (``NORMAL`` trades the last
    commits before a power cut for speed). Usable from any thread: the caller must serialise
    its use (:class:`SQLiteStore` does)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = journal_mode()
    _warn_if_networked(path, mode)
    conn = sqlite3.connect(path, timeout=timeout, isolation_level=None, check_same_thread=False)
    try:
        conn.row_factory = sqlite3.Row
        conn.execute(f"PRAGMA busy_timeout={int(timeout * 1000)}")
        conn.execute(f"PRAGMA journal_mode={mode}")
        if synchronous is not None:
            conn.execute(f"PRAGMA synchronous={synchronous}")
    except BaseException:
        conn.close()
        raise
    return conn


def schema_statements(script: str) -> list[str]:
    """``script`` split into its complete SQL statements (``;`` inside a string literal or a
    comment does not split); text after the last ``;`` that is not a statement is dropped."""
    out: list[str] = []
    buf = ""
    for piece in script.split(";"):
        buf += piece + ";"
        if sqlite3.complete_statement(buf):
            if buf.strip(" \t\r\n;"):
                out.append(buf.strip())
            buf = ""
    return out


@contextmanager
def _immediate(conn: sqlite3.Connection) -> Iterator[None]:
    """A ``BEGIN IMMEDIATE`` transaction for the block: committed at its end, rolled back if
    it raises."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:  # a failed COMMIT may have ended it already
            conn.execute("ROLLBACK")
        raise


class SQLiteStore:
    """One SQLite database, safe to share between threads (see the module docstring).

    ``schema`` (``CREATE ... IF NOT EXISTS`` statements) and then ``migrate(conn)`` (for
    columns added since a database was first written) run in one ``BEGIN IMMEDIATE``
    transaction when the connection opens, so two processes opening an old database at once
    do not both alter it. ``lazy``: open the file on first use, not now (a store built only
    for its settings touches no file); a lazy store also reopens after :meth:`close`, while
    any other store raises :class:`sqlite3.ProgrammingError` when used after it. A store
    built by :meth:`reader` only reads.
    """

    def __init__(
        self,
        path: Path,
        *,
        schema: str = "",
        migrate: Migration | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
        synchronous: str | None = None,
        lazy: bool = False,
        read_only: bool = False,
        immutable: bool = False,
    ) -> None:
        self.path = Path(path)
        self._read_only = read_only
        self._immutable = immutable
        self._schema = schema_statements(schema)
        self._migrate = migrate
        self._timeout = timeout
        self._synchronous = synchronous
        self._lazy = lazy
        self._lock = threading.RLock()
        self._pid = os.getpid()
        self._conn: sqlite3.Connection | None = None
        self._closed = False
        self._reading = False  # the open transaction is a read() (no writes inside it)
        if not lazy:
            with self._lock:
                self._connection()

    @classmethod
    def reader(cls, path: Path, *, settled: bool = False, timeout: float = 2.0) -> Self | None:
        """The existing database ``path`` opened only to read (``mode=ro``), None when there is
        no such file: nothing is created, no schema or migration runs, no write lock is taken
        (a write raises ``attempt to write a readonly database``). ``settled``: its writer is
        gone for good; without a ``-wal`` left it is opened ``immutable``, so reading creates
        no ``-shm``/``-wal`` and leaves the directory as it was. A short ``timeout``: a
        checkpointing writer delays a reader rather than failing it."""
        path = Path(path)
        if not path.is_file():
            return None
        immutable = settled and not path.with_name(path.name + "-wal").exists()
        return cls(path, timeout=timeout, lazy=True, read_only=True, immutable=immutable)

    @property
    def lock(self) -> threading.RLock:
        """The lock every use of the connection holds (re-entrant)."""
        self._after_fork()
        return self._lock

    def _after_fork(self) -> None:
        """In a forked child: forget the parent's connection and lock (see the module
        docstring). The pid check needs no lock: only this process writes ``_pid``."""
        if self._pid != os.getpid():
            if self._conn is not None:
                _inherited.append(self._conn)
            self._conn = None
            self._lock = threading.RLock()  # the parent's may be held by a thread not here
            self._pid = os.getpid()

    def _connection(self) -> sqlite3.Connection:
        """The open connection, opened (schema and migrations applied) if need be. Callers
        hold the lock."""
        if self._conn is None:
            if self._closed:
                raise sqlite3.ProgrammingError(f"the store {self.path} is closed")
            if self._read_only:
                uri = f"file:{quote(str(self.path.absolute()))}?mode=ro"
                uri += "&immutable=1" if self._immutable else ""
                self._conn = sqlite3.connect(
                    uri, uri=True, timeout=self._timeout, isolation_level=None,
                    check_same_thread=False,
                )  # fmt: skip
                self._conn.row_factory = sqlite3.Row
                return self._conn
            conn = connect(self.path, timeout=self._timeout, synchronous=self._synchronous)
            try:
                if self._schema or self._migrate is not None:
                    with _immediate(conn):
                        for statement in self._schema:
                            conn.execute(statement)
                        if self._migrate is not None:
                            self._migrate(conn)
            except BaseException:
                conn.close()
                raise
            self._conn = conn
        return self._conn

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """Hold the lock and a write transaction (``BEGIN IMMEDIATE``: it takes the write lock
        at once, so it never fails half-way on ``database is locked``) for the block; commit
        at its end, roll back if it raises. Yields the connection.

        Nested in a transaction of the same thread, it joins the outer one: its writes commit
        or roll back with the outer block (an exception that escapes it rolls back all).
        Nested in a :meth:`read`, it raises ``RuntimeError``: a read snapshot turned into a
        write fails (``SQLITE_BUSY_SNAPSHOT``) whenever another process wrote meanwhile.
        Do not iterate a cursor after the block: fetch inside it."""
        with self.lock:
            conn = self._connection()
            if conn.in_transaction:
                if self._reading:
                    raise RuntimeError(
                        f"a write to {self.path} inside a read(): use transaction() instead"
                    )
                yield conn
                return
            with _immediate(conn):
                yield conn

    @contextmanager
    def read(self) -> Iterator[sqlite3.Connection]:
        """Hold the lock and a read transaction for the block: every statement in it sees one
        snapshot of the database, however other processes write meanwhile. Inside
        :meth:`transaction` it joins that transaction. Yields the connection; fetch inside."""
        with self.lock:
            conn = self._connection()
            if conn.in_transaction:
                yield conn
                return
            conn.execute("BEGIN")
            self._reading = True
            try:
                yield conn
            finally:
                self._reading = False
                if conn.in_transaction:
                    conn.execute("COMMIT")  # a read transaction: ends it, writes nothing

    def fetchone(self, sql: str, params: Params = ()) -> sqlite3.Row | None:
        """The first row of one query (None if none), read under the lock."""
        with self.lock:
            return self._connection().execute(sql, params).fetchone()

    def fetchall(self, sql: str, params: Params = ()) -> list[sqlite3.Row]:
        """All rows of one query, read under the lock."""
        with self.lock:
            return self._connection().execute(sql, params).fetchall()

    def write(self, sql: str, params: Params = ()) -> int | None:
        """Run one writing statement in its own transaction; return its ``lastrowid``."""
        with self.transaction() as conn:
            return conn.execute(sql, params).lastrowid

    def close(self) -> None:
        """Close the connection (idempotent; a lazy store reopens, the class docstring)."""
        with self.lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
            self._closed = not self._lazy

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class StoreHandle:
    """An object over one :class:`SQLiteStore`, ``self._db``: closed by :meth:`close` or
    ``with``."""

    _db: SQLiteStore

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class TypedStore(StoreHandle):
    """The base of a database's typed interface (the run's ledger, the rollout record): its
    methods use ``self._db``, a :class:`SQLiteStore` opened with :attr:`options` (schema,
    migrations...) or, by :meth:`reader`, only to read."""

    #: the keyword arguments of :class:`SQLiteStore` a writer opens the database with
    options: ClassVar[dict[str, Any]] = {}

    def __init__(self, path: Path, *, store: SQLiteStore | None = None) -> None:
        self.path = Path(path)
        self._db = store or SQLiteStore(self.path, **self.options)

    @classmethod
    def reader(cls, path: Path, *, settled: bool = False) -> Self | None:
        """The database ``path`` opened only to read (:meth:`SQLiteStore.reader`; None when
        there is none). Columns an older version lacks read as None; writers fail."""
        store = SQLiteStore.reader(path, settled=settled)
        return None if store is None else cls(path, store=store)
