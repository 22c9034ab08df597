"""Files that another process reads: atomic writes, JSON-lines readers, directory swaps.

Everything the harness writes for another process (a run directory, the task store, the
workspace) goes through :func:`write_text_atomic` and friends: the data lands in a temporary
file beside the target and is renamed over it, so a reader sees the old file or the new one,
never half of one, and a failed write leaves neither a torn target nor a stray temp file.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterable
from itertools import islice
from pathlib import Path
from typing import Any


def write_text_atomic(path: Path, text: str, mode: int | None = None) -> None:
    """Write ``text`` (UTF-8) to ``path`` through a temp file and an atomic rename.

    Parent directories are created. ``mode`` sets the file's permission bits (default:
    mkstemp's 0600 widened to 0644, so that a sandboxed reader of another uid can read what
    the harness wrote).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(tmp, 0o644 if mode is None else mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json_atomic(path: Path, data: Any) -> None:
    """``data`` as indented, key-sorted JSON, written with :func:`write_text_atomic`."""
    write_text_atomic(path, json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")


def write_jsonl(path: Path, rows: Iterable[dict[str, Any]]) -> None:
    """One JSON object per line, written with :func:`write_text_atomic`."""
    write_text_atomic(path, "".join(json.dumps(row) + "\n" for row in rows))


def read_json(path: Path) -> Any:
    """A JSON file (as written by :func:`write_json_atomic`)."""
    return json.loads(Path(path).read_text())


def read_jsonl(path: Path, limit: int | None = None) -> list[dict[str, Any]]:
    """The rows of a JSON-lines file the harness wrote, the first ``limit`` when given.

    Strict: a malformed line raises ``json.JSONDecodeError``, since a split or a result file
    written by :func:`write_jsonl` is never torn. Blank lines are skipped.
    """
    with open(path, encoding="utf-8") as fh:
        return list(islice((json.loads(line) for line in fh if line.strip()), limit))


def read_jsonl_tolerant(path: Path) -> list[dict[str, Any]]:
    """The JSON objects of a JSON-lines file that a live writer appends to.

    Blank, malformed and non-object lines are skipped rather than raised, because a writer
    killed mid-line (a sampler at the deadline, a proxy on SIGKILL) leaves a torn last line
    and a report must still come out. A missing file gives ``[]``.
    """
    try:
        fh = open(path, encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return []
    with fh:
        return [obj for line in fh if (obj := json_object(line)) is not None]


def json_object(raw: str | bytes) -> dict[str, Any] | None:
    """``raw`` parsed as JSON when it is an object; None when it is blank, malformed or
    another JSON value."""
    try:
        obj = json.loads(raw)
    except ValueError:
        return None
    return obj if isinstance(obj, dict) else None


def append_jsonl_line(path: Path, row: dict[str, Any]) -> None:
    """Append ``row`` as one JSON line with a single ``write`` on an ``O_APPEND`` file, so a
    concurrent reader never sees half a line (lines here are far below a page)."""
    line = json.dumps(row, separators=(",", ":"), default=str) + "\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def swap_in_dir(tmp: Path, root: Path) -> None:
    """Replace the directory ``root`` by the finished tree ``tmp`` (a sibling): the earlier
    ``root`` stays whole until the last moment and is removed after the swap."""
    old = root.with_name(f".{root.name}.old")
    shutil.rmtree(old, ignore_errors=True)
    if root.exists():
        root.rename(old)
    tmp.rename(root)
    shutil.rmtree(old, ignore_errors=True)


class SubPath:
    """A class attribute naming a path below an instance's directory attribute ``base``:
    ``SubPath("record", "env.db")`` reads as ``obj.root / "record" / "env.db"``."""

    def __init__(self, *parts: str, base: str = "root") -> None:
        self.parts, self.base = parts, base

    def __get__(self, obj: object, owner: type | None = None) -> Path:
        return Path(getattr(obj, self.base)).joinpath(*self.parts)
