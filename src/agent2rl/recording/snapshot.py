"""Code snapshots of the agent's workspace, committed into a bare git repository, and the one
reader of that repository, :class:`SnapshotReader` (the report, the dashboard and the viewer
read through it).

The repository (``record/code.git``) lives outside the workspace, so the agent can neither see
nor rewrite its own history, and the agent's own ``.git`` (if it makes one) is never touched:
we walk the workspace ourselves, write blobs into our repository and build the tree in a
private, throw-away index file.

Two processes snapshot the same repository (the grading service at each submission and the
orchestrator's :class:`PeriodicSnapshotter`), so every snapshot runs under an ``fcntl.flock``
on a lock file inside the repository.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import stat
import subprocess
import tempfile
import threading
import zlib
from collections.abc import Iterator
from dataclasses import astuple, dataclass
from functools import partial
from pathlib import Path
from typing import Any

from agent2rl.locks import file_lock

log = logging.getLogger(__name__)

MAX_FILE_BYTES = 512 * 1024
"""Files larger than this are not snapshotted (checkpoints, logs, datasets)."""

BINARY_SNIFF_BYTES = 8 * 1024
"""A NUL byte within this prefix marks a file as binary (the heuristic git itself uses)."""

TOP_LEVEL_EXCLUDES = frozenset({"output", "data", "models"})
"""Workspace dirs excluded only at the top level: submissions, read-only data, the base model."""

ANYWHERE_EXCLUDES = frozenset({".git", "__pycache__", ".venv", "venv", ".cache", ".home"})
"""Names excluded at any depth: VCS metadata, bytecode, environments, caches, the agent's HOME."""

EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
"""git's well-known id of the empty tree (every sha1 repository knows it without storing it)."""

#: a snapshot id must look like a commit id before it reaches git: a bad ledger value can
#: neither be read as an option nor name an arbitrary ref
COMMIT_ID = re.compile(r"[0-9a-fA-F]{4,64}")

LOCK_NAME = "agent2rl-snapshot.lock"
#: the snapshot commits' author and committer
_RECORDER = {
    "GIT_AUTHOR_NAME": "agent2rl recorder",
    "GIT_AUTHOR_EMAIL": "recorder@agent2rl.invalid",
    "GIT_COMMITTER_NAME": "agent2rl recorder",
    "GIT_COMMITTER_EMAIL": "recorder@agent2rl.invalid",
}
_GIT_TIMEOUT_S = 300.0


class CodeRecorder:
    """Snapshots ``workspace`` into the bare git repository ``git_dir`` (created on first use).

    What is recorded: every regular file and symlink (the link itself, never its target) under
    the workspace, except :data:`TOP_LEVEL_EXCLUDES`, :data:`ANYWHERE_EXCLUDES`, files over
    :data:`MAX_FILE_BYTES`, binary files, and anything odd: unreadable files and dirs, files
    that vanish mid-walk, FIFOs/sockets/devices, and names that are not valid UTF-8 or that
    git refuses to store. Odd files are skipped, never raised.
    """

    def __init__(self, git_dir: Path, workspace: Path) -> None:
        self.git_dir = Path(git_dir).absolute()
        self.workspace = Path(workspace).absolute()

    def snapshot(self, message: str) -> str:
        """Commit the current workspace contents and return the commit id.

        If the tree is identical to HEAD's tree, no commit is made and HEAD's id is returned.
        The very first snapshot always commits, even an empty tree (e.g. a missing workspace),
        so that every later diff has a base. Safe to call concurrently from several processes.
        """
        with file_lock(self.git_dir / LOCK_NAME):  # creates git_dir
            if not (self.git_dir / "HEAD").exists():
                self._git("init", "--quiet", "--bare", "--initial-branch=main", str(self.git_dir))
            tree = self._write_tree(self._collect_entries())
            head = self.head()
            if head is not None and self._tree_of(head) == tree:
                return head
            return self._commit(tree, head, message)

    def head(self) -> str | None:
        """The id of the latest snapshot commit, or None if there is none (or no repository)."""
        if not (self.git_dir / "HEAD").exists():
            return None
        proc = self._git("rev-parse", "--verify", "-q", "HEAD^{commit}", check=False)
        if proc.returncode != 0:
            return None  # unborn branch: repository created, nothing committed yet
        return proc.stdout.decode().strip()

    def _git(
        self,
        *args: str,
        input: bytes | None = None,
        index_file: str | None = None,
        check: bool = True,
    ) -> subprocess.CompletedProcess[bytes]:
        # core.protectNTFS/HFS would reject names that are legal here (e.g. "GIT~1"); off.
        argv = ["git", "-c", "core.protectNTFS=false", "-c", "core.protectHFS=false", *args]
        env = _git_env(self.git_dir) | _RECORDER
        if index_file is not None:
            env["GIT_INDEX_FILE"] = index_file
        proc = subprocess.run(
            argv,
            input=input,
            capture_output=True,
            env=env,
            cwd=self.git_dir,
            timeout=_GIT_TIMEOUT_S,
        )
        if check and proc.returncode != 0:
            err = proc.stderr.decode(errors="replace").strip()
            raise RuntimeError(f"git {args[0]} failed in {self.git_dir}: {err}")
        return proc

    def _tree_of(self, commit: str) -> str:
        return self._git("rev-parse", f"{commit}^{{tree}}").stdout.decode().strip()

    def _commit(self, tree: str, parent: str | None, message: str) -> str:
        parents = ["-p", parent] if parent else []
        proc = self._git("commit-tree", tree, *parents, input=message.encode() + b"\n")
        commit = proc.stdout.decode().strip()
        # Compare-and-swap on the old value: a writer that bypassed our lock cannot be clobbered.
        self._git("update-ref", "-m", "snapshot", "HEAD", commit, parent or "")
        return commit

    def _write_tree(self, entries: list[tuple[str, str, str]]) -> str:
        with tempfile.TemporaryDirectory(prefix="index.", dir=self.git_dir) as tmp:
            index = os.path.join(tmp, "index")
            add = partial(self._git, "update-index", "-z", "--index-info", index_file=index)
            lines = [f"{mode} {sha}\t{rel}".encode() + b"\0" for mode, sha, rel in entries]
            if add(input=b"".join(lines), check=False).returncode != 0:
                # Some path was refused by git's own checks; add one by one, skipping refusals.
                Path(index).unlink(missing_ok=True)
                for line in lines:
                    add(input=line, check=False)
            return self._git("write-tree", index_file=index).stdout.decode().strip()

    def _collect_entries(self) -> list[tuple[str, str, str]]:
        """Walk the workspace, store every new blob, and return the tree entries: (git mode,
        blob id, workspace-relative path) per file."""
        candidates = list(_walk(self.workspace))
        existing = self._existing_objects({sha for _, _, sha, _ in candidates})
        entries = []
        for rel, mode, sha, abs_path in candidates:
            if sha not in existing:
                # Re-read: the file may have changed or vanished since the hashing pass.
                blob = _read_blob(abs_path, mode)
                if blob is None:
                    continue
                sha = self._store_blob(blob)
                existing.add(sha)
            entries.append((mode, sha, rel))
        return entries

    def _existing_objects(self, shas: set[str]) -> set[str]:
        if not shas:
            return set()
        query = "".join(sha + "\n" for sha in sorted(shas)).encode()
        out = self._git("cat-file", "--batch-check=%(objectname) %(objecttype)", input=query)
        rows = (line.split() for line in out.stdout.decode().splitlines())
        return {parts[0] for parts in rows if len(parts) == 2 and parts[1] == "blob"}

    def _store_blob(self, data: bytes) -> str:
        """Write ``data`` as a loose git object and return its id.

        Done in-process rather than by one ``git hash-object`` per file, which made a first
        snapshot of a few thousand files take many seconds. The loose-object format (zlib of
        ``blob <size>\0`` + content at ``objects/xx/yyyy``) is git's stable on-disk format;
        a temp file + rename keeps a concurrent reader from seeing a partial object.
        """
        sha = _blob_sha(data)
        obj_dir = self.git_dir / "objects" / sha[:2]
        target = obj_dir / sha[2:]
        if target.exists():
            return sha
        obj_dir.mkdir(exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix="tmp_obj_", dir=obj_dir)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(zlib.compress(b"blob %d\0" % len(data) + data))
            os.chmod(tmp, 0o444)  # git's own loose objects are read-only
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return sha


def _git_env(git_dir: Path) -> dict[str, str]:
    # Drop inherited GIT_* variables (a GIT_WORK_TREE or GIT_INDEX_FILE from the caller would
    # redirect us) and ignore user/system config, so behaviour never depends on the host.
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(
        GIT_DIR=str(git_dir),
        GIT_CONFIG_NOSYSTEM="1",
        GIT_CONFIG_GLOBAL=os.devnull,
        GIT_TERMINAL_PROMPT="0",
        LC_ALL="C",
    )
    return env


def is_commit_id(value: Any) -> bool:
    """Whether ``value`` looks like a (possibly abbreviated) commit id."""
    return isinstance(value, str) and COMMIT_ID.fullmatch(value) is not None


@dataclass(frozen=True)
class Snapshot:
    """One snapshot commit: id, parent's id (None for the first), commit time (epoch seconds),
    message and git's ``--shortstat`` line ("" when it changed nothing)."""

    sha: str
    parent: str | None
    t: float
    message: str
    stat: str = ""


class SnapshotReader:
    """Reads the snapshot repository ``git_dir`` without writing it (``GIT_OPTIONAL_LOCKS=0``),
    with no user or system config and no external diff drivers or text conversions (a file of
    the agent's can never make git run anything). Each method answers None for a missing or
    unreadable repository or an id that does not look like a commit id, never raises; diffs
    detect renames and summarise binary files.
    ``limit``: the most bytes of one output kept (a longer one is cut with a note)."""

    def __init__(self, git_dir: Path, *, timeout_s: float = 120.0) -> None:
        self.git_dir = Path(git_dir)
        self.timeout_s = timeout_s

    def _git(self, *args: str, data: bytes | None = None, limit: int | None = None) -> str | None:
        # ``args``: options, ``--``, then the ids they name, each of which must look like a
        # commit id (a ledger value can never become an option or a ref expression).
        cut = args.index("--")
        if not self.git_dir.is_dir() or not all(map(is_commit_id, args[cut + 1 :])):
            return None
        argv = ["git", *args[:cut], *args[cut + 1 :]]
        env = {**_git_env(self.git_dir), "GIT_OPTIONAL_LOCKS": "0"}
        try:
            proc = subprocess.run(
                argv, input=data, capture_output=True, env=env, timeout=self.timeout_s
            )
        except (OSError, subprocess.TimeoutExpired):
            return None
        out = proc.stdout
        if limit is not None and len(out) > limit:
            out = out[:limit] + b"\n... (diff cut at %d bytes)\n" % limit
        return out.decode("utf-8", "replace") if proc.returncode == 0 else None

    def log(self) -> list[Snapshot]:
        """Every snapshot, oldest first (``[]``: no repository, or nothing committed)."""
        out = self._git("log", "--all", "--format=%H%x09%P%x09%ct%x09%s", "--shortstat", "--")
        snaps: list[Snapshot] = []
        for line in (out or "").splitlines():
            parts = line.split("\t")
            if len(parts) == 4 and is_commit_id(parts[0]):
                sha, parents, ct, subject = parts
                snaps.append(Snapshot(sha, parents.split(" ")[0] or None, float(ct), subject))
            elif snaps and line.strip():
                snaps[-1] = Snapshot(*astuple(snaps[-1])[:4], stat=line.strip())
        return snaps[::-1]

    def show(self, sha: str, *, limit: int | None = None) -> str | None:
        """The change snapshot ``sha`` made (against its parent; the whole tree for the
        first): its id and message, a stat and the unified diff."""
        return self._git(
            "show", "--format=%H %s%n", "--stat", "--patch", *_DIFF, "--", sha, limit=limit
        )

    def diff(self, old: str, new: str) -> str | None:
        """The unified diff between two commits (or trees); "" when they hold the same code."""
        return self._git("diff", *_DIFF, "--", old, new)

    def numstat(self, old: str, new: str) -> tuple[int, int] | None:
        """(lines added, lines removed) between two commits (or trees); binary files are not
        counted, a moved file counts only its edits."""
        out = self._git("diff", "--numstat", *_DIFF, "--", old, new)
        if out is None:
            return None
        rows = [ln.split("\t", 2) for ln in out.splitlines()]
        counted = [
            (int(r[0]), int(r[1]))
            for r in rows
            if len(r) == 3 and r[0].isdigit() and r[1].isdigit()
        ]
        return sum(a for a, _ in counted), sum(d for _, d in counted)

    def files_text(self, sha: str, under: str, suffixes: tuple[str, ...]) -> str | None:
        """The text of the files under ``under/`` in snapshot ``sha`` whose names end in one
        of ``suffixes``, concatenated ("" when there are none)."""
        names = self._git("ls-tree", "-r", "--name-only", "--", sha)
        files = [
            n
            for n in (names or "").splitlines()
            if n.startswith(f"{under}/") and n.endswith(suffixes)
        ]
        if names is None or not files:
            return None if names is None else ""
        return self._git(
            "cat-file", "--batch", "--", data="".join(f"{sha}:{f}\n" for f in files).encode()
        )


#: how every diff is made: renames detected, no colour, no external drivers or text filters
_DIFF = ("-M", "--no-color", "--no-ext-diff", "--no-textconv")


def _walk(workspace: Path) -> Iterator[tuple[str, str, str, str]]:
    """Yield ``(relative path, git mode, blob sha, absolute path)`` for each file to record."""
    stack: list[tuple[str, str]] = [(str(workspace), "")]
    while stack:
        dir_path, rel_dir = stack.pop()
        try:
            with os.scandir(dir_path) as it:
                dir_entries = list(it)
        except OSError:
            continue  # unreadable or vanished dir
        for entry in dir_entries:
            rel = f"{rel_dir}{entry.name}"
            if not _name_ok(entry.name, top_level=not rel_dir):
                continue
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISDIR(st.st_mode):
                stack.append((entry.path, rel + "/"))
                continue
            mode = _git_mode(st.st_mode)
            if mode is None or (mode != "120000" and st.st_size > MAX_FILE_BYTES):
                continue
            blob = _read_blob(entry.path, mode)
            if blob is not None:
                yield rel, mode, _blob_sha(blob), entry.path


def _name_ok(name: str, top_level: bool) -> bool:
    if name in ANYWHERE_EXCLUDES or (top_level and name in TOP_LEVEL_EXCLUDES):
        return False
    if name.lower() == ".git":  # git refuses ".GIT" etc. in any case
        return False
    try:
        name.encode("utf-8")  # undecodable names arrive as lone surrogates and fail here
    except UnicodeEncodeError:
        return False
    return "\n" not in name and "\0" not in name


def _git_mode(st_mode: int) -> str | None:
    if stat.S_ISLNK(st_mode):
        return "120000"
    if stat.S_ISREG(st_mode):
        return "100755" if st_mode & 0o111 else "100644"
    return None  # FIFO, socket, device: never opened (a FIFO would block the walk)


def _read_blob(path: str, mode: str) -> bytes | None:
    """The blob content of ``path``, or None if it must be skipped (gone, too big, binary)."""
    try:
        if mode == "120000":
            return os.fsencode(os.readlink(path))
        # O_NONBLOCK: if a FIFO was swapped in after stat(), open() must not hang.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
        with os.fdopen(fd, "rb") as fh:
            if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
                return None
            data = fh.read(MAX_FILE_BYTES + 1)
    except OSError:
        return None
    if len(data) > MAX_FILE_BYTES or b"\0" in data[:BINARY_SNIFF_BYTES]:
        return None
    return data


def _blob_sha(data: bytes) -> str:
    # git's blob id: sha1 over "blob <size>\0" + content; lets us skip re-writing known blobs.
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class PeriodicSnapshotter:
    """Calls ``recorder.snapshot("periodic")`` every ``interval_s`` on a daemon thread.

    Commits only happen when something changed (see :meth:`CodeRecorder.snapshot`). A failing
    snapshot is logged and retried at the next tick; it never kills the thread.
    """

    def __init__(self, recorder: CodeRecorder, interval_s: float = 60.0) -> None:
        self.recorder = recorder
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start the thread (the first snapshot is taken one interval from now)."""
        if self._thread is not None:
            raise RuntimeError("PeriodicSnapshotter already started")
        self._thread = threading.Thread(target=self._loop, name="code-snapshots", daemon=True)
        self._thread.start()

    def stop(self) -> str | None:
        """Stop and join the thread, then take a final snapshot and return its commit id (None
        if it failed: the error is logged). Safe to call twice."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        return self._safe_snapshot("final")

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._safe_snapshot("periodic")

    def _safe_snapshot(self, message: str) -> str | None:
        try:
            return self.recorder.snapshot(message)
        except Exception:
            log.warning("code snapshot failed", exc_info=True)
            return None
