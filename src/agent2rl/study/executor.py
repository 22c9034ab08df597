"""``agent2rl study run``: a study's runs on Ray, resumable, cancellable.

The driver (this module, in the ``study run`` process) expands the study file into slots
(:mod:`~agent2rl.study.spec`), records them in the study's state database
(:mod:`~agent2rl.study.state`), and submits one Ray task per attempt. A Ray task runs the
attempt's run process (:mod:`~agent2rl.study.attempt`), which is a normal
:func:`~agent2rl.orchestration.run.execute_run` writing a normal run directory, report and
``results.db`` row into the study directory. So a study directory is also a plain runs
directory: ``agent2rl compare --runs-dir DIR`` and ``agent2rl report DIR/<run>`` work on it.

Ray:

- local by default: ``ray.init(address="local")`` starts a private Ray on this machine (never
  one that happens to run here), with a small object store and no dashboard, shut down with
  the study; ``--address`` or ``RAY_ADDRESS`` submits to an existing cluster instead, whose
  nodes must share the study directory's filesystem (they write the run directories);
- each run asks for ``cpus_per_run`` CPUs and ``gpus_per_run`` GPUs (``auto``: one when the
  cluster has GPUs), so concurrency follows the cluster's resources; ``--max-concurrent``
  caps it further;
- each run's agent gets its share of its node: with k runs of the study at once on a node
  (its CPUs / ``cpus_per_run``, its GPUs / ``gpus_per_run``, ``--max-concurrent``), 1/k of
  what a plain run gets (:func:`~agent2rl.sandbox.limits.machine_caps`: memory, disk bytes
  and inodes, processes), so that together they take no more than one run alone;
- Ray never retries a run by itself (``max_retries=0``): the study decides, from the run's
  outcome (:func:`~agent2rl.study.state.attempt_outcome`), and retries failed attempts up to
  ``--retries`` times per ``study run``, those that failed on their infrastructure
  (:mod:`~agent2rl.orchestration.infra`) after a pause (``infra_backoff_s`` times the retry).

SQLite on a shared (network) filesystem: a study directory holds two SQLite databases in
WAL mode, ``study.db`` (written by the driver alone) and ``results.db`` (each run adds its
row, from the node it ran on), and WAL is unsafe across hosts (see
:mod:`agent2rl.sqlite_store`). Hence: read ``study.db`` (``study status``, ``study export``,
the dashboard) on the driver's host; and on a cluster whose nodes share the directory over
the network, treat ``results.db`` as a convenience, not the record: nothing the study
reports reads it (its analysis reads ``study.db`` and the run directories), and ``agent2rl
compare`` over such a directory is best run once the study is done. ``study run`` says so
when the directory is on such a filesystem (:func:`network_filesystem`).

Stopping (Ctrl-C, SIGTERM, or a driver killed outright, whose Ray workers die with it) is
as docs/studies.md says: :meth:`_Driver.cancel_all`, and the next ``study run``'s :func:`_recover`.
"""

from __future__ import annotations

import fcntl
import os
import re
import signal
import socket
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from agent2rl.errors import UserError
from agent2rl.files import read_json, write_json_atomic, write_text_atomic
from agent2rl.formatting import format_duration
from agent2rl.orchestration.infra import INFRASTRUCTURE, infrastructure_failure
from agent2rl.rundir import RunStatus
from agent2rl.study.attempt import (
    REQUEST,
    RESULT,
    STARTED,
    STOP,
    STOP_GRACE_S,
    find_run_dir,
    run_attempt,
    run_result,
    runs_fitting,
    settled_status,
)
from agent2rl.study.progress import AttemptView, Reporter, Tally
from agent2rl.study.spec import RunSlot, StudySpec, describe, load_study, validate
from agent2rl.study.state import AttemptStatus, SlotRow, SlotStatus, StudyState

#: the object store a local Ray gets: runs pass only small JSON through Ray
LOCAL_OBJECT_STORE_BYTES = 80 * 2**20
#: the file :func:`study_lock` holds while a ``study run`` uses the directory
LOCK_FILE = "study.lock"
#: filesystem types whose files other hosts share (SQLite's WAL is unsafe across them)
NETWORK_FS = frozenset(
    "nfs nfs4 cifs smb3 smbfs lustre ceph glusterfs fuse.sshfs fuse.glusterfs fuse.cephfs "
    "9p beegfs gpfs afs".split()
)
#: environment variables forwarded to runs (they matter on a cluster, whose workers have
#: the environment of `ray start`, not the study driver's)
_FORWARD = re.compile(
    r"^(AGENT2RL_\w+|HF_\w+|\w+_API_KEY|\w+_BASE_URL|TOKENIZERS_PARALLELISM|OMP_WAIT_POLICY)$"
)


@dataclass
class StudyOptions:
    """``study run``'s flags."""

    out: Path
    address: str | None = None
    """A Ray cluster (``ray://...`` or ``HOST:PORT``); None: ``RAY_ADDRESS`` or local."""
    max_concurrent: int | None = None
    retries: int = 1
    poll_s: float = 0.5
    infra_backoff_s: float = 30.0
    """Seconds before a slot whose run failed on its infrastructure is retried (an outage
    or a revoked key does not heal at once), times the retries it had in this call."""


@dataclass
class StudyResult:
    """How a ``study run`` call ended."""

    study_dir: Path
    counts: dict[str, int]
    """Slots per status after the call."""
    ran: int
    """Attempts started in this call."""
    interrupted: bool = False
    ray_session: str | None = None
    """The local Ray session directory (None on a cluster)."""
    failed_keys: list[str] = field(default_factory=list)


@dataclass
class _Attempt:
    row: SlotRow
    n: int
    dir: Path
    view: AttemptView


def _attempt_dir(study_dir: Path, slot_id: int, n: int) -> Path:
    return study_dir / "attempts" / f"{slot_id:03d}-a{n}"


def _request(
    spec: StudySpec,
    slot: RunSlot,
    study_dir: Path,
    queued_at: float,
    gpus: float = 0.0,
    max_concurrent: int | None = None,
) -> dict:
    """``request.json`` of an attempt (see :mod:`agent2rl.study.attempt`)."""
    return {
        "study_dir": str(study_dir),
        "key": slot.key,
        "label": slot.label,
        "queued_at": queued_at,
        "resources": {"cpus": spec.cpus_per_run, "gpus": gpus, "max_concurrent": max_concurrent},
        "request": spec.request(slot, study_dir).model_dump(mode="json"),
        # The agent trains on the CPUs its run asked Ray for, not on every core of the node.
        "agent_env": {"OMP_NUM_THREADS": str(max(1, int(spec.cpus_per_run)))},
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "env": {k: v for k, v in os.environ.items() if _FORWARD.match(k)},
    }


# -- Ray ---------------------------------------------------------------------------------------
def _start_ray(address: str | None) -> str | None:
    """Connect to ``address`` (or ``RAY_ADDRESS``), else start a private local Ray. Returns
    the local session directory (None on a cluster)."""
    import ray

    address = address or os.environ.get("RAY_ADDRESS") or None
    common: dict[str, Any] = {"log_to_driver": False, "logging_level": "ERROR"}
    try:
        if address:
            ray.init(address=address, **common)
            return None
        ray.init(
            address="local",
            include_dashboard=False,
            object_store_memory=LOCAL_OBJECT_STORE_BYTES,
            # Ray SIGKILLs what a dead worker leaves behind; a run process must instead get
            # its SIGTERM (PR_SET_PDEATHSIG) and stop its agent and services itself.
            _system_config={
                "kill_child_processes_on_worker_exit": False,
                "kill_child_processes_on_worker_exit_with_raylet_subreaper": False,
            },
            **common,
        )
    except (ConnectionError, ValueError, RuntimeError) as err:
        where = address or "a local Ray"
        raise UserError(f"cannot start or reach Ray at {where}: {err}") from None
    node = getattr(ray._private.worker.global_worker, "node", None)
    return getattr(node, "_session_dir", None)


def _reap_ray_session(session_dir: str | None, driver_pid: int | None) -> None:
    """Kill what is left of a private local Ray whose study driver was killed (its agents
    outlive it for a while): processes holding files of ``session_dir``. Only a session this
    study started, and only once its driver is gone."""
    if not session_dir or (driver_pid and psutil.pid_exists(driver_pid)):
        return
    for proc in psutil.process_iter():
        try:
            if proc.pid == os.getpid():
                continue
            uses = any(f.path.startswith(session_dir) for f in proc.open_files())
            if uses or any(session_dir in a for a in proc.cmdline()):
                proc.kill()
        except (psutil.Error, OSError):
            continue


def _per_run(spec: StudySpec, cap: int | None) -> tuple[float, int]:
    """The GPUs a run asks for (``auto``: one when the cluster has GPUs), and how many runs
    the cluster can hold at once (for the ETA)."""
    import ray

    res = ray.cluster_resources()
    auto = spec.gpus_per_run == "auto"
    gpus = (1.0 if res.get("GPU", 0) > 0 else 0.0) if auto else float(spec.gpus_per_run)
    asks = {"cpus": spec.cpus_per_run, "gpus": gpus, "max_concurrent": cap}
    return gpus, runs_fitting(res.get("CPU", 1), res.get("GPU", 0), asks)


# -- the driver --------------------------------------------------------------------------------
def _recover(state: StudyState, study_dir: Path, reporter: Reporter) -> None:
    """Close the attempts a killed driver left open: a run that finished keeps its result
    (a finished run is never lost), the others count as interrupted."""
    for a in state.open_attempts():
        adir = _attempt_dir(study_dir, a.slot_id, a.n)
        result: dict[str, Any] = {}
        if (adir / RESULT).is_file():
            result = read_json(adir / RESULT)
        elif (adir / REQUEST).is_file():
            run_dir = find_run_dir(read_json(adir / REQUEST))
            status = settled_status(run_dir, reported=True)
            # A run that never wrote a final status died with the previous driver.
            error = None if status else "the study stopped during this run"
            result = run_result(run_dir, status, error)
        result = classify(result)
        result["run_status"] = result.get("run_status") or RunStatus.INTERRUPTED
        outcome = _end(state, a.slot_id, a.n, result)
        label = state.slot(a.slot_id).label
        reporter.note(f"recovered {label} (attempt {a.n}) from an earlier study run: {outcome}")


def classify(result: dict[str, Any]) -> dict[str, Any]:
    """``result`` (an attempt's ``result.json``) with ``failure`` set to
    :data:`~agent2rl.orchestration.infra.INFRASTRUCTURE`, and ``error`` saying why, when its run's
    ``agent_error`` came from the run's infrastructure (:func:`infrastructure_failure`);
    else ``result`` unchanged."""
    if result.get("failure") is not None or result.get("run_status") != RunStatus.AGENT_ERROR:
        return result
    run_dir = result.get("run_dir")
    why = infrastructure_failure(Path(run_dir) if run_dir else None)
    if why is None:
        return result
    return result | {"failure": INFRASTRUCTURE, "error": f"infrastructure failure: {why}"}


def _end(state: StudyState, slot_id: int, n: int, result: dict[str, Any]) -> AttemptStatus:
    """Record attempt ``n``'s end from its ``result`` (as :func:`classify` made it)."""
    keys = ("run_id", "run_dir", "run_status", "error", "failure")
    return state.end_attempt(slot_id, n, **{k: result.get(k) for k in keys})


def network_filesystem(path: Path, partitions: list[Any] | None = None) -> str | None:
    """The type of the network filesystem ``path`` lies on (one of :data:`NETWORK_FS`), or
    None for a local one or when the mount table cannot be read. ``partitions`` is
    :func:`psutil.disk_partitions`'s answer (read here when None)."""
    try:
        parts = psutil.disk_partitions(all=True) if partitions is None else partitions
    except OSError:
        return None
    path = Path(path).resolve()
    mounts = [p for p in parts if path == Path(p.mountpoint) or Path(p.mountpoint) in path.parents]
    # the deepest mount holding ``path`` (the last listed among equally deep ones)
    best = max(reversed(mounts), key=lambda p: len(Path(p.mountpoint).parts), default=None)
    return best.fstype if best is not None and best.fstype in NETWORK_FS else None


@contextmanager
def study_lock(study_dir: Path) -> Iterator[None]:
    """Hold ``study_dir`` for one ``study run`` (an exclusive ``flock`` on its
    :data:`LOCK_FILE`, which names the holder's pid and host).

    Two drivers on one directory would each start the slots the other started (every
    pending slot twice): the second one gets a :class:`UserError` naming the first, before
    it writes anything. The kernel drops the lock when its holder exits or is killed, so a
    killed driver never leaves a stale one. On a network filesystem the lock holds across
    hosts where the filesystem supports ``flock`` (Linux NFS maps it to NFS locks)."""
    path = study_dir / LOCK_FILE
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as err:
        raise UserError(
            f"cannot write {path} ({err.strerror}): pass an --out directory you can write"
        ) from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 200, 0).decode(errors="replace").split()
            who = f"pid {holder[0]} on {holder[1]}" if len(holder) >= 2 else "pid unknown"
            raise UserError(
                f"another `agent2rl study run` is using {study_dir} ({who}): wait for it to "
                f"end or stop it (Ctrl-C, or kill {holder[0] if holder else 'it'}); "
                f"`agent2rl study status {study_dir}` shows its progress"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()} {socket.gethostname()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)  # releases the lock


def run_study(spec_path: Path, opts: StudyOptions, reporter_for: Any) -> StudyResult:
    """Run (or resume) the study of ``spec_path`` into ``opts.out``.

    ``reporter_for(tally) -> Reporter`` makes the progress display. Slots already finished
    are skipped; attempts a killed driver left open are closed first. Raises
    :class:`UserError` for a bad study file, a study directory bound to other settings or
    one another ``study run`` is using (:func:`study_lock`).
    Returns with ``interrupted`` set after Ctrl-C/SIGTERM (every run stopped and recorded).
    """
    spec_path = Path(spec_path)
    spec = load_study(spec_path)
    spec_text = spec_path.read_bytes().decode("utf-8")  # load_study checked it is UTF-8
    slots = validate(spec)
    study_dir = opts.out.expanduser().resolve()
    if opts.retries < 0:
        raise UserError(f"--retries {opts.retries}: use 0 or more")
    if opts.max_concurrent is not None and opts.max_concurrent < 1:
        raise UserError(f"--max-concurrent {opts.max_concurrent}: use 1 or more")
    try:
        study_dir.mkdir(parents=True, exist_ok=True)  # a file there: FileExistsError
    except OSError as err:
        raise UserError(
            f"--out {study_dir}: cannot use it as the study directory ({err.strerror}); "
            "pass a directory you can write"
        ) from None
    with study_lock(study_dir), StudyState(study_dir, create=True) as state:
        state.bind(spec, spec_text)
        write_text_atomic(study_dir / "study.toml", spec_text)
        state.sync_slots(slots)
        keys = {s.key for s in slots}
        tally = Tally(total=len(keys), budget_s=spec.budget_s, parallel=1)
        reporter: Reporter = reporter_for(tally)
        last = state.get_meta("last_run") or {}
        if (fs := network_filesystem(study_dir)) is not None:
            reporter.note(
                f"{study_dir} is on {fs}: SQLite's WAL is unsafe across hosts there; read "
                "study.db on this host, and results.db only once the study is done "
                "(the study's own results do not use it)"
            )
        _reap_ray_session(last.get("session"), last.get("pid"))
        _recover(state, study_dir, reporter)
        rows = [r for r in state.slots() if r.key in keys]
        todo = [r for r in rows if r.status != SlotStatus.FINISHED]
        tally.finished = len(rows) - len(todo)
        if not todo:
            reporter.begin(f"{describe(spec, len(rows))}: all {len(rows)} runs finished")
            reporter.end(f"nothing to run; see `agent2rl study status {study_dir}`")
            return StudyResult(study_dir, state.counts(), ran=0)
        driver = _Driver(spec, state, study_dir, opts, tally, reporter)
        return driver.drive(todo, len(rows))


def _result_of(ref: Any, att: _Attempt) -> dict[str, Any]:
    """The task's result; when Ray lost the task (a dead worker or node), whatever the
    run process managed to write, else a failure naming Ray's error."""
    import ray

    try:
        return ray.get(ref)
    except (ray.exceptions.RayError, OSError) as err:
        if (att.dir / RESULT).is_file():
            return read_json(att.dir / RESULT)
        run_dir = find_run_dir(read_json(att.dir / REQUEST))
        error = f"Ray lost the run: {type(err).__name__}: {str(err).splitlines()[0]}"
        return run_result(run_dir, settled_status(run_dir, reported=True), error)


@dataclass
class _Driver:
    """One ``study run`` call's attempts on Ray: those in flight (by Ray reference), and
    what submitting, ending and cancelling them needs."""

    spec: StudySpec
    state: StudyState
    study_dir: Path
    opts: StudyOptions
    tally: Tally
    reporter: Reporter
    began: float = 0.0
    gpus: float = 0.0
    remote: Any = None
    inflight: dict[Any, _Attempt] = field(default_factory=dict)
    ran: int = 0
    failed_keys: list[str] = field(default_factory=list)

    def drive(self, todo: list[SlotRow], n_slots: int) -> StudyResult:
        """Run ``todo`` on Ray until each slot is done (or out of retries) or the study is
        stopped."""
        import ray

        spec, opts, tally, reporter = self.spec, self.opts, self.tally, self.reporter
        session = _start_ray(opts.address)
        # SIGTERM stops the study like Ctrl-C, and Ctrl-C does even where the shell started us
        # with SIGINT ignored (``cmd &``).
        previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
        previous_int = signal.signal(signal.SIGINT, signal.default_int_handler)
        self.began = time.time()
        stopped = False
        try:
            self.gpus, tally.parallel = _per_run(spec, opts.max_concurrent)
            where = opts.address or os.environ.get("RAY_ADDRESS") or "local Ray"
            last_run = {"began": self.began, "ray": where, "session": session, "pid": os.getpid()}
            self.state.set_meta("last_run", last_run)
            reporter.begin(
                f"{describe(spec, n_slots)}; {len(todo)} to run on {where} "
                f"({spec.cpus_per_run:g} CPU{f', {self.gpus:g} GPU' if self.gpus else ''} per run, "
                f"{tally.parallel} at once)"
            )
            self.remote = ray.remote(run_attempt)  # the Ray task: one attempt's run process
            pending = deque(todo)
            # Slots to retry wait here (due time, slot) until they are due.
            delayed: list[tuple[float, SlotRow]] = []
            try:
                while pending or self.inflight or delayed:
                    now = time.time()
                    pending.extend(row for due, row in delayed if due <= now)
                    delayed = [(due, row) for due, row in delayed if due > now]
                    while pending and len(self.inflight) < (opts.max_concurrent or len(todo)):
                        self.submit(pending.popleft())
                    if self.inflight:
                        ready, _ = ray.wait(list(self.inflight), num_returns=1, timeout=opts.poll_s)
                    else:  # only delayed retries left
                        ready = []
                        time.sleep(opts.poll_s)
                    self.poll_started()
                    for ref in ready:
                        att = self.inflight.pop(ref)
                        result = classify(_result_of(ref, att))
                        outcome, retry = self.close(att, result)
                        reporter.ended(att.view, result, outcome, retry)
                        if retry:  # at once, or after a pause when its infrastructure failed
                            infra = result.get("failure") == INFRASTRUCTURE
                            wait = opts.infra_backoff_s * self.tries(att.row.id) if infra else 0
                            delayed.append((time.time() + wait, self.state.slot(att.row.id)))
                        elif outcome != AttemptStatus.FINISHED:
                            self.failed_keys.append(att.row.key)
                    if hasattr(reporter, "refresh"):
                        reporter.refresh()  # type: ignore[attr-defined]
            except KeyboardInterrupt:
                stopped = True
                reporter.note("stopping: cancelling the runs in progress (each writes its report)")
                self.cancel_all()
        finally:
            signal.signal(signal.SIGTERM, previous)
            signal.signal(signal.SIGINT, previous_int)
            ray.shutdown()
        counts = self.state.counts()
        took = format_duration(time.time() - self.began)
        finished = f"{counts[SlotStatus.FINISHED]}/{n_slots} runs finished"
        if stopped:
            reporter.end(f"stopped after {took}: {finished}; `agent2rl study run` again resumes")
        else:
            reporter.end(f"done in {took}: {finished}, {len(self.failed_keys)} failed")
        return StudyResult(self.study_dir, counts, self.ran, stopped, session, self.failed_keys)

    def submit(self, row: SlotRow) -> None:
        """Queue an attempt of ``row`` as a Ray task."""
        n = self.state.queue_attempt(row.id)
        adir = _attempt_dir(self.study_dir, row.id, n)
        adir.mkdir(parents=True, exist_ok=True)
        queued_at = time.time()
        cap = self.opts.max_concurrent
        request = _request(self.spec, row, self.study_dir, queued_at, self.gpus, cap)
        write_json_atomic(adir / REQUEST, request)
        ref = self.remote.options(
            num_cpus=self.spec.cpus_per_run,
            num_gpus=self.gpus,
            max_retries=0,
            retry_exceptions=False,
            name=f"agent2rl-{row.label.replace(' ', '-')}",
        ).remote(str(adir))
        view = AttemptView(row.id, n, row.label, queued_at)
        self.inflight[ref] = _Attempt(row, n, adir, view)
        self.ran += 1
        self.tally.running[(row.id, n)] = view
        self.reporter.queued(view)

    def poll_started(self) -> None:
        """Turn a run process's ``started.json`` into a ``started`` event (once)."""
        for att in self.inflight.values():
            marker = att.dir / STARTED
            if att.view.started_at is not None or not marker.is_file():
                continue
            try:
                info = read_json(marker)
            except (OSError, ValueError):
                continue
            att.view.started_at = float(info.get("at") or time.time())
            att.view.node = info.get("node")
            self.state.mark_started(att.row.id, att.n, att.view.started_at, att.view.node)
            self.reporter.started(att.view)

    def close(self, att: _Attempt, result: dict[str, Any]) -> tuple[str, bool]:
        """Record the attempt's end (``result`` as :func:`classify` made it); returns its
        outcome and whether the slot runs again."""
        outcome = _end(self.state, att.row.id, att.n, result)
        self.tally.running.pop((att.row.id, att.n), None)
        if att.view.started_at is not None:
            self.tally.durations.append(time.time() - att.view.started_at)
        if outcome == AttemptStatus.FINISHED:
            self.tally.finished += 1
            return outcome, False
        # Failures (and runs interrupted by something other than this study) count against
        # --retries; the first attempt of this call is not a retry.
        retry = self.tries(att.row.id) <= self.opts.retries
        if not retry:
            self.tally.failed += 1
        return outcome, retry

    def tries(self, slot_id: int) -> int:
        """Attempts of ``slot_id`` in this ``study run`` that failed or were interrupted by
        something other than this study."""
        return sum(
            1
            for a in self.state.attempts(slot_id)
            if (a.queued_at or 0) >= self.began
            and a.status in (AttemptStatus.FAILED, AttemptStatus.INTERRUPTED)
        )

    def cancel_all(self) -> None:
        """Stop every attempt and wait (bounded) until each run has written its result: a
        run process stops its agent and writes its report before it exits. The stop file
        reaches the attempt wherever it runs; ``ray.cancel`` keeps queued tasks from
        starting."""
        import ray

        for ref, att in self.inflight.items():
            write_json_atomic(att.dir / STOP, {"at": time.time()})
            # already done, or Ray is going away: the wait below still applies
            with suppress(Exception):
                ray.cancel(ref)
        deadline = time.time() + STOP_GRACE_S + 30
        waiting = dict(self.inflight)
        while waiting and time.time() < deadline:
            for ref, att in list(waiting.items()):
                # A queued task that never started made nothing; cancel keeps it from starting.
                if (att.dir / RESULT).is_file() or not (att.dir / STARTED).is_file():
                    del waiting[ref]
            time.sleep(0.2)
        for att in self.inflight.values():
            result = classify(read_json(att.dir / RESULT) if (att.dir / RESULT).is_file() else {})
            status = result.get("run_status")
            # A run that finished while we stopped keeps its result; the rest run again.
            if not status:
                result["run_status"] = RunStatus.INTERRUPTED
                result["error"] = result.get("error") or "interrupted: the study stopped"
            _end(self.state, att.row.id, att.n, result)
            self.tally.running.pop((att.row.id, att.n), None)
            self.reporter.note(f"{att.view.label}: {status or 'interrupted'}")
