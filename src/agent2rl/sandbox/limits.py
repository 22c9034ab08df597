"""Resource caps of one agent: memory, processes, workspace disk.

An agent is untrusted code on a shared machine: unbounded, it can take the harness down with
it (all the RAM, a fork bomb) or fill the disk so that the ledger can no longer be written.
Each run therefore caps its agent's

- **memory** (RSS + page cache of its whole process tree) and **processes** (pids, threads
  included) through a cgroup of its own, where the machine lets the harness create one: cgroup
  v2 (a delegated ``memory``/``pids`` subtree) or, on a host still on cgroup v1, the v1
  ``memory`` and ``pids`` hierarchies. The kernel enforces these: an allocation past the
  memory cap gets the tree OOM-killed inside its cgroup, and a fork past the pids cap fails
  with EAGAIN;
- **workspace disk**: a quota on the bytes the agent's writable workspace holds, and a cap
  on its files (inodes: a filesystem can run out of them long before it runs out of bytes),
  enforced by a watchdog (:mod:`agent2rl.orchestration.watchdog`) that stops the agent when
  it goes over.

The defaults (:func:`machine_caps`) give one run 75% of the machine's memory, 4,096
processes, half the free bytes and half the free inodes of the runs directory's
filesystem. Runs that share a machine (a study's) each get ``share`` of that: memory, disk
and files split so that together they take no more than one run alone; processes split
too, but never below :data:`MIN_SHARED_PIDS` (a process cap guards against a fork bomb, not
a scarce resource: the kernel's pid space is millions).

Fallbacks where no cgroup can be made (documented, and stated in the run's report):

- memory: the same watchdog samples the tree's RSS (every ``interval``) and stops the agent
  past the cap. Slower to react than the kernel: an allocation burst between two samples can
  overshoot.
- processes: ``RLIMIT_NPROC`` when the agent runs as a user of its own (a root harness with
  the bubblewrap sandbox drops the agent to a per-run uid): the kernel then counts exactly the
  agent's processes. Without a dedicated uid no process cap is applied (the limit would count
  every process of the harness's user).

:func:`probe` says which mechanism this machine offers, once. ``AGENT2RL_NO_CGROUP=1`` makes
it answer ``none`` (to run the fallbacks on purpose).
"""

from __future__ import annotations

import contextlib
import functools
import os
import resource
import secrets
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

CGROUP_ROOT = Path("/sys/fs/cgroup")
Mechanism = Literal["cgroup2", "cgroup1", "none"]

#: one run alone: this fraction of the machine's memory
MEMORY_FRACTION = 0.75
#: one run alone: processes and threads
DEFAULT_MAX_PIDS = 4096
#: one run alone: this fraction of the free bytes, and of the free inodes, of its filesystem
DISK_FRACTION = 0.5
#: the fewest processes a run sharing the machine gets (tokenizers and BLAS start a thread
#: per core; an agent CLI a dozen)
MIN_SHARED_PIDS = 512


@dataclass(frozen=True)
class ResourceCaps:
    """What one agent may use; None means unbounded. ``memory_bytes`` covers the whole
    process tree; ``max_pids`` counts processes and threads; ``disk_bytes`` is the workspace
    quota (everything the agent can write: ``code/``, ``output/``, caches, temp files);
    ``max_files`` caps the entries (files, directories, links: inodes) it holds."""

    memory_bytes: int | None = None
    max_pids: int | None = None
    disk_bytes: int | None = None
    max_files: int | None = None

    def to_dict(self) -> dict[str, int | None]:
        return asdict(self)


def machine_caps(path: Path, share: float = 1.0) -> ResourceCaps:
    """The default caps (see the module docstring) of a run whose directory is on ``path``'s
    filesystem, when it holds ``share`` (0 < share <= 1) of this machine. No file cap (None)
    on a filesystem that does not count inodes (btrfs reports 0). Raises ValueError for a
    share outside (0, 1]."""
    if not 0 < share <= 1:
        raise ValueError(f"a run's share of the machine must be in (0, 1], not {share}")
    import psutil

    memory = int(psutil.virtual_memory().total * MEMORY_FRACTION * share)
    st = os.statvfs(path)
    disk = int(st.f_bavail * st.f_frsize * DISK_FRACTION * share)
    files = int(st.f_favail * DISK_FRACTION * share) if st.f_files > 0 else None
    pids = DEFAULT_MAX_PIDS if share == 1 else max(MIN_SHARED_PIDS, int(DEFAULT_MAX_PIDS * share))
    return ResourceCaps(memory_bytes=memory, max_pids=pids, disk_bytes=disk, max_files=files)


@functools.cache
def probe() -> Mechanism:
    """How this machine lets the harness cap a process tree: ``cgroup2`` when the unified
    hierarchy has the ``memory`` and ``pids`` controllers enabled for children and a child
    cgroup can be made, ``cgroup1`` when the v1 ``memory`` and ``pids`` hierarchies are
    writable, else ``none``. Decided by really creating (and removing) a probe cgroup."""
    if os.environ.get("AGENT2RL_NO_CGROUP"):
        return "none"
    for mechanism in ("cgroup2", "cgroup1"):
        try:
            group = _make(mechanism, f"agent2rl-probe-{secrets.token_hex(4)}")  # type: ignore[arg-type]
        except OSError:
            continue
        group.remove()
        return mechanism  # type: ignore[return-value]
    return "none"


def _v2_root() -> Path | None:
    for root in (CGROUP_ROOT, CGROUP_ROOT / "unified"):
        controllers = root / "cgroup.subtree_control"
        if controllers.is_file() and {"memory", "pids"} <= set(controllers.read_text().split()):
            return root
    return None


def _make(mechanism: Mechanism, name: str) -> Cgroup:
    if mechanism == "cgroup2":
        root = _v2_root()
        if root is None:
            raise OSError("no cgroup v2 hierarchy delegates the memory and pids controllers")
        dirs = {"memory": root / name, "pids": root / name}
    else:
        dirs = {c: CGROUP_ROOT / c / name for c in ("memory", "pids")}
        if not all(d.parent.is_dir() for d in dirs.values()):
            raise OSError("no cgroup v1 memory and pids hierarchies")
    made: list[Path] = []
    try:
        for d in dict.fromkeys(dirs.values()):
            d.mkdir()
            made.append(d)
    except OSError:
        for d in made:
            d.rmdir()
        raise
    return Cgroup(mechanism, dirs)


@dataclass
class Cgroup:
    """One run's cgroup (a directory per controller; the same one on v2)."""

    mechanism: Mechanism
    dirs: dict[str, Path]
    _removed: bool = field(default=False, repr=False)

    @classmethod
    def create(cls, name: str, caps: ResourceCaps) -> Cgroup | None:
        """A new cgroup ``name`` with ``caps`` applied, or None when the machine offers none
        (:func:`probe`). Raises OSError if it exists already or a limit cannot be written."""
        mechanism = probe()
        if mechanism == "none":
            return None
        group = _make(mechanism, name)
        try:
            group._apply(caps)
        except OSError:
            group.remove()
            raise
        return group

    def _apply(self, caps: ResourceCaps) -> None:
        mem = self.dirs["memory"]
        if caps.memory_bytes is not None and self.mechanism == "cgroup2":
            (mem / "memory.max").write_text(str(caps.memory_bytes))
            # No swap: the cap must be the memory the tree may really hold.
            swap = mem / "memory.swap.max"
            if swap.exists():
                swap.write_text("0")
        elif caps.memory_bytes is not None:
            (mem / "memory.limit_in_bytes").write_text(str(caps.memory_bytes))
            memsw = mem / "memory.memsw.limit_in_bytes"
            if memsw.exists():  # swap accounting on: memory + swap capped alike
                with contextlib.suppress(OSError):
                    memsw.write_text(str(caps.memory_bytes))
        if caps.max_pids is not None:
            (self.dirs["pids"] / "pids.max").write_text(str(caps.max_pids))

    def join(self) -> None:
        """Move the calling process into the cgroup (for ``preexec_fn``: the agent and all it
        starts are then inside from its first instruction)."""
        pid = str(os.getpid())
        for d in dict.fromkeys(self.dirs.values()):
            with open(d / "cgroup.procs", "w") as fh:
                fh.write(pid)

    def oom_kills(self) -> int:
        """How many processes the kernel OOM-killed in the cgroup (its memory cap)."""
        mem = self.dirs["memory"]
        name = "memory.events" if self.mechanism == "cgroup2" else "memory.oom_control"
        with contextlib.suppress(OSError, ValueError):
            for line in (mem / name).read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
        return 0

    def pids(self) -> list[int]:
        """The processes still in the cgroup."""
        try:
            text = (self.dirs["pids"] / "cgroup.procs").read_text()
        except OSError:
            return []
        return [int(p) for p in text.split()]

    def remove(self) -> None:
        """Remove the cgroup (idempotent). The processes must be gone: the caller kills the
        tree first; a cgroup that still holds processes is left behind (rmdir refuses)."""
        if self._removed:
            return
        self._removed = True
        for d in dict.fromkeys(self.dirs.values()):
            with contextlib.suppress(OSError):
                d.rmdir()


def set_nproc_limit(max_pids: int) -> None:
    """``RLIMIT_NPROC`` for the calling process (the fallback pids cap, for ``preexec_fn``
    when the agent runs as a uid of its own)."""
    resource.setrlimit(resource.RLIMIT_NPROC, (max_pids, max_pids))
