"""Inter-process file locks for the shared stores under ``AGENT2RL_HOME``.

Concurrent runs on one machine (a study runs several at once) share the task store, the
model store and the baseline cache. Each writer there is atomic (temp + rename), but two
runs that prepare the same task or evaluate the same baseline at once would both do the
work and race on the rename. :func:`file_lock` serialises them: the first holder does the
work, the others wait and then find it done.

``fcntl.flock`` locks belong to the open file: the kernel releases them when the holder
exits or is killed, so a crashed run never leaves a stale lock behind. The lock files
themselves stay (empty, a few bytes of directory entry) and are reused.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path`` (created, with its parents) for the block.

    Blocks as long as another process holds it; not re-entrant within one process (a nested
    ``file_lock`` on the same path through a second open file would wait on itself), so
    callers take it around one step only.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the last descriptor releases the lock
