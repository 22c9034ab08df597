"""A task's store set written whole: built in a temporary sibling of its root, its manifest
last, then swapped in at once, so a reader finds the old set or the new one, never half of
one; and the official data files an import reads into it (:func:`read_rows`)."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from agent2rl.errors import UserError
from agent2rl.files import read_jsonl, swap_in_dir

MANIFEST = "manifest.json"


def is_built(root: Path) -> bool:
    """Whether ``root`` holds a complete store set (its manifest is written last)."""
    return (root / MANIFEST).exists()


@contextmanager
def building(root: Path) -> Iterator[Path]:
    """A new temporary folder beside ``root`` to write a store set into; when the block ends
    without an error, it replaces ``root`` whole. The folder is removed either way."""
    root.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{root.name}.", dir=root.parent))
    try:
        yield tmp
        swap_in_dir(tmp, root)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def read_rows(path: Path) -> list[dict[str, Any]]:
    """Rows of a parquet (read with pyarrow), JSON-lines or JSON-list file: an official data
    file, read directly rather than through ``datasets`` so an import writes nothing outside
    the task store (no dataset cache). :class:`UserError` naming a file that does not read."""
    try:
        if path.suffix == ".parquet":
            import pyarrow.parquet as pq

            return pq.read_table(path).to_pylist()
        if path.suffix == ".jsonl":
            return read_jsonl(path)
        data = json.loads(path.read_text(encoding="utf-8"))
    except Exception as err:  # pyarrow and json raise many kinds for a corrupt file
        raise UserError(f"could not read {path}: {type(err).__name__}: {err}") from None
    if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
        raise UserError(f"{path} is not a JSON list of objects")
    return data
