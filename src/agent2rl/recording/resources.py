"""A CPU / memory / GPU-memory timeline of the agent's process tree.

The sampler also remembers every process it has ever seen in the tree: at the deadline the
orchestrator kills those that survived, including ones that double-forked away from the tree.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import threading
import time
from pathlib import Path

import psutil

from agent2rl.devices import nvidia_smi
from agent2rl.files import append_jsonl_line

log = logging.getLogger(__name__)

_NVIDIA_SMI_TIMEOUT_S = 10.0
_GONE = (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess)


class ResourceSampler:
    """Samples the process tree of ``root_pid`` every ``interval_s`` on a daemon thread.

    Each sample appends one JSON line to ``out_path``::

        {"t": epoch, "cpu_percent": float, "rss_bytes": int, "n_procs": int,
         "gpu_mem_bytes": int}   # the last key only where nvidia-smi is on PATH and answers

    ``cpu_percent`` is summed over the tree (100 = one core busy); a process contributes 0.0 at
    its first sample, since psutil needs two readings to compute a rate. The tree is the root and
    all its descendants, plus every process seen earlier that is still alive (and its
    descendants): a daemon that double-forked and was re-parented to init stays tracked.
    ``gpu_mem_bytes`` sums nvidia-smi's per-process usage over the tree's pids; inside a
    container whose pid namespace differs from the driver's it can read 0.

    Processes vanishing mid-sample are skipped; a root that already exited yields samples with
    ``n_procs`` 0 (or only surviving descendants). Errors never stop the thread.
    """

    def __init__(self, root_pid: int, out_path: Path, interval_s: float = 5.0) -> None:
        self.root_pid = root_pid
        self.out_path = Path(out_path)
        self.interval_s = interval_s
        self._procs: dict[int, psutil.Process] = {}  # every process seen, by pid
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # no process on PATH to ask every 5 s where there is none
        self._gpus = shutil.which("nvidia-smi") is not None

    def start(self) -> None:
        """Take a first sample now, then one every ``interval_s``, until :meth:`stop`."""
        if self._thread is not None:
            raise RuntimeError("ResourceSampler already started")
        self.out_path.parent.mkdir(parents=True, exist_ok=True)
        self._thread = threading.Thread(target=self._loop, name="resource-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop and join the thread (no further sample is taken). Safe to call twice."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def seen_pids(self) -> set[int]:
        """Every pid seen in the tree so far (some may have exited, or even been reused)."""
        with self._lock:
            return set(self._procs)

    def alive_seen(self) -> list[psutil.Process]:
        """Seen processes still running, checked against their start time (safe from pid reuse).

        Prefer this over :meth:`seen_pids` for killing stragglers: ``Process.kill()`` refuses
        to signal a pid that now belongs to another process.
        """
        with self._lock:
            procs = list(self._procs.values())
        return [p for p in procs if _is_running(p)]

    def sample(self) -> dict[str, float | int]:
        """Take one sample, append it to ``out_path`` and return it (also used by the thread)."""
        procs = self._tree()
        record: dict[str, float | int] = {
            "t": time.time(),
            "cpu_percent": 0.0,
            "rss_bytes": 0,
            "n_procs": 0,
        }
        for proc in procs:
            try:
                with proc.oneshot():
                    cpu = proc.cpu_percent(interval=None)
                    rss = proc.memory_info().rss
            except _GONE:
                continue
            record["cpu_percent"] += cpu
            record["rss_bytes"] += rss
            record["n_procs"] += 1
        gpu = self._gpu_mem_bytes({p.pid for p in procs})
        if gpu is not None:
            record["gpu_mem_bytes"] = gpu
        append_jsonl_line(self.out_path, record)  # one write: a reader never sees half a line
        return record

    def _loop(self) -> None:
        while True:
            try:
                self.sample()
            except Exception:
                log.warning("resource sample failed", exc_info=True)
            if self._stop.wait(self.interval_s):
                return

    def _tree(self) -> list[psutil.Process]:
        """Root + descendants + earlier-seen survivors and theirs; records new ones as seen."""
        with self._lock:
            known = dict(self._procs)
        roots = [p for p in known.values() if _is_running(p)]
        if self.root_pid not in known:
            with contextlib.suppress(*_GONE):
                roots.append(psutil.Process(self.root_pid))
        found: dict[int, psutil.Process] = {}
        for root in roots:
            found.setdefault(root.pid, root)
            try:
                children = root.children(recursive=True)
            except _GONE:
                continue
            for child in children:
                # Reuse the cached Process: cpu_percent() measures since *its* previous call.
                cached = known.get(child.pid)
                same = cached is not None and _same_process(cached, child)
                found.setdefault(child.pid, cached if same else child)
        with self._lock:
            self._procs.update(found)
        return [p for p in found.values() if _is_running(p)]

    def _gpu_mem_bytes(self, pids: set[int]) -> int | None:
        query = "--query-compute-apps=pid,used_memory"
        rows = nvidia_smi(query, _NVIDIA_SMI_TIMEOUT_S) if self._gpus else None
        if rows is None:
            return None
        total_mib = sum(
            int(r[1])
            for r in rows
            if len(r) == 2 and r[0].isdigit() and r[1].isdigit() and int(r[0]) in pids
        )
        return total_mib * 1024 * 1024


def _is_running(proc: psutil.Process) -> bool:
    try:
        # is_running() compares the start time too, so a reused pid reads as not running.
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except _GONE:
        return False


def _same_process(a: psutil.Process, b: psutil.Process) -> bool:
    try:
        return a.create_time() == b.create_time()
    except _GONE:
        return False
