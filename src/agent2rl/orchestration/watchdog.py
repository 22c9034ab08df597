"""The watchdog: the agent's caps that the kernel does not enforce itself.

One thread per run, checking every ``interval_s``:

- **workspace disk**: the bytes on disk under the workspace's writable parts (``data/`` and
  the base model's links are the harness's, not counted) against the quota, and the entries
  there (files, directories, links: each takes an inode) against the file cap. A full disk,
  or a filesystem out of inodes, would stop the ledger's writes and other runs'; the agent
  is stopped first. Either breach is ``disk_quota``; the detail says which.
- **memory, without a cgroup**: the resident memory of the agent's process tree against the
  cap (with a cgroup the kernel enforces it; the watchdog then only notices the cgroup's OOM
  kills).

On a breach it records why (:attr:`Watchdog.breach`: ``disk_quota`` or ``oom``, with a
one-line :attr:`Watchdog.detail`) and calls ``on_breach`` once; the supervisor stops the
agent and the run ends with that status. Graded submissions and the ledger are untouched.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable
from pathlib import Path

import psutil

from agent2rl.formatting import format_bytes
from agent2rl.rundir import RunStatus
from agent2rl.sandbox import Cgroup, ResourceCaps


def workspace_usage(
    root: Path, skip: tuple[Path, ...] = (), max_entries: int | None = None
) -> tuple[int, int]:
    """(bytes, entries) under ``root``: the bytes allocated on disk to its files
    (``st_blocks``: a sparse file counts what it really takes) and the number of entries
    (files, directories, links, each an inode; a hard link counts again), not following
    symlinks and leaving out ``skip`` subtrees (neither counted). Entries that vanish during
    the walk are ignored. With ``max_entries`` the walk stops once it has counted more than
    that (the counts are then partial, the entries over the cap): a workspace of millions of
    files costs the watchdog no more than its cap."""
    total = entries = 0
    stack = [root]
    while stack:
        try:
            # Iterated, not listed: one directory of millions of entries is never in memory.
            with os.scandir(stack.pop()) as found:
                for e in found:
                    try:
                        if e.is_dir(follow_symlinks=False):
                            if Path(e.path) in skip:
                                continue
                            stack.append(Path(e.path))
                        else:
                            total += e.stat(follow_symlinks=False).st_blocks * 512
                    except OSError:
                        continue
                    entries += 1
                    if max_entries is not None and entries > max_entries:
                        return total, entries
        except OSError:  # a directory that vanished or cannot be read
            continue
    return total, entries


def tree_rss(pid: int) -> int:
    """Resident bytes of ``pid`` and all its descendants (0 when it is gone)."""
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return 0
    total = 0
    for p in procs:
        with contextlib.suppress(psutil.Error):
            total += p.memory_info().rss
    return total


class Watchdog:
    """Checks ``caps`` on the agent rooted at ``pid`` (see the module docstring)."""

    def __init__(
        self,
        workspace: Path,
        skip: tuple[Path, ...],
        caps: ResourceCaps,
        cgroup: Cgroup | None,
        pid: int,
        on_breach: Callable[[str, str], None],
        interval_s: float = 2.0,
    ) -> None:
        self.workspace, self.skip, self.caps = workspace, skip, caps
        self.cgroup, self.pid, self.on_breach = cgroup, pid, on_breach
        self.interval_s = interval_s
        self.breach: str | None = None
        self.detail = ""
        self.peak_files = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="watchdog", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)

    def check(self) -> str | None:
        """One check; the breach found now (``disk_quota`` / ``oom``) or None."""
        caps = self.caps
        if caps.disk_bytes is not None or caps.max_files is not None:
            used, files = workspace_usage(self.workspace, self.skip, caps.max_files)
            self.peak_files = max(self.peak_files, files)
            if caps.max_files is not None and files > caps.max_files:
                self.detail = (
                    f"the workspace holds more than {caps.max_files:,} files and directories, "
                    "over its cap"
                )
                return RunStatus.DISK_QUOTA
            if caps.disk_bytes is not None and used > caps.disk_bytes:
                self.detail = (
                    f"the workspace holds {format_bytes(used)}, over its quota of "
                    f"{format_bytes(caps.disk_bytes)}"
                )
                return RunStatus.DISK_QUOTA
        if self.cgroup is not None:
            if self.cgroup.oom_kills():
                self.detail = (
                    f"the agent went over its memory cap of {format_bytes(caps.memory_bytes)} "
                    "and the kernel killed it"
                )
                return RunStatus.OOM
        elif caps.memory_bytes is not None:
            rss = tree_rss(self.pid)
            if rss > caps.memory_bytes:
                self.detail = (
                    f"the agent's processes held {format_bytes(rss)}, over the memory cap of "
                    f"{format_bytes(caps.memory_bytes)}"
                )
                return RunStatus.OOM
        return None

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            found = self.check()
            if found:
                self.breach = found
                self.on_breach(found, self.detail)
                return
