"""A task's store set written whole: built in a temporary sibling of its root, its manifest
last, then swapped in at once, so a reader finds the old set or the new one, never half of
one."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from agent2rl.files import swap_in_dir

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
