"""One attempt of one run slot, as a process of its own (:func:`main` with the attempt
directory).

The attempt directory (``<study>/attempts/<slot>-a<n>/``) is the whole interface between the
study driver and the run, so it works the same on this machine and on a cluster node that
shares the study directory:

``request.json``
    written by the driver: the :class:`~agent2rl.orchestration.request.RunRequest` (JSON),
    the environment to forward, the agent's thread count, the resources a run asks for
    (from which the node works out the run's share of it, :func:`runs_per_node`);
``started.json``
    written here when the run process starts (node, pid, time, runs per node);
``console.log``
    the run's console output (what ``agent2rl run`` would print);
``result.json``
    written here when :func:`~agent2rl.orchestration.run.execute_run` returns or fails:
    ``run_id``, ``run_dir``, ``run_status``, ``error``, and the headline metrics.

Why a process per run rather than ``execute_run`` inside the Ray worker: the run's cleanup
(killing the agent's process tree, writing its report) must happen however the study ends.
The run process asks the kernel for SIGTERM when its parent dies (``PR_SET_PDEATHSIG``), and
turns its first SIGTERM or SIGINT into ``KeyboardInterrupt``, which ``execute_run`` answers by
stopping the agent and writing an ``interrupted`` report. So a cancelled Ray task, a Ctrl-C,
a killed study driver (Ray then kills its workers) all end in the same clean stop.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from contextlib import suppress
from pathlib import Path
from typing import Any

from agent2rl.child_process import kill_group, spawn_child
from agent2rl.files import read_json, write_json_atomic
from agent2rl.run_record import RunRecord
from agent2rl.rundir import RunStatus

REQUEST, STARTED, RESULT, CONSOLE = "request.json", "started.json", "result.json", "console.log"
#: written by the driver to stop an attempt (works wherever the study directory is shared)
STOP = "stop"

_ENTRY = "import sys; from agent2rl.study.attempt import main; sys.exit(main(sys.argv[1:]))"
#: seconds a cancelled run gets to stop its agent and write its report
STOP_GRACE_S = 120.0


def run_attempt(attempt_dir: str) -> dict[str, Any]:
    """Run the attempt in ``attempt_dir`` in a child process and return its ``result.json``.

    This is what a Ray task executes. The driver's stop file (:data:`STOP`) or a
    ``KeyboardInterrupt`` here (``ray.cancel``) is passed on to the run as SIGTERM, and the run
    gets :data:`STOP_GRACE_S` to stop cleanly before it is killed. A run process that dies
    without a result (killed, out of memory) gives a result with ``run_status`` None, the
    run directory found by :func:`find_run_dir`, and the exit code as the error.
    """
    adir = Path(attempt_dir)
    request = read_json(adir / REQUEST)
    env = {**os.environ, **request.get("env", {})}
    # Ray sets OMP_NUM_THREADS for its workers; the run's grading child should get what the
    # study driver had (the agent's own thread count travels in the request).
    env.pop("OMP_NUM_THREADS", None)
    if request.get("omp_num_threads"):
        env["OMP_NUM_THREADS"] = request["omp_num_threads"]
    share = runs_per_node(request.get("resources") or {})
    with open(adir / CONSOLE, "ab") as log:
        # Its own session: a terminal's Ctrl-C reaches the run once, through us. SIGTERM
        # when we die: the run stops its agent and writes its report.
        proc = spawn_child(
            # -c rather than -m: the package already imports this module (no runpy warning).
            [sys.executable, "-c", _ENTRY, str(adir), str(share)],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
        )
        try:
            code = _wait(proc, adir / STOP)
        except KeyboardInterrupt:  # ray.cancel
            code = _stop(proc)
    result_file = adir / RESULT
    if result_file.is_file():
        return read_json(result_file)
    run_dir = find_run_dir(request)
    error = f"the run process exited with status {code} without a result (see {adir / CONSOLE})"
    result = run_result(run_dir, settled_status(run_dir), error)
    write_json_atomic(result_file, result)
    return result


def run_result(run_dir: Path | None, run_status: str | None, error: str | None) -> dict[str, Any]:
    """The ``result.json`` of an attempt whose run (None: it made none) was found on disk."""
    return {
        "run_id": run_dir.name if run_dir else None,
        "run_dir": str(run_dir) if run_dir else None,
        "run_status": run_status,
        "error": error,
    }


def runs_per_node(resources: dict[str, Any]) -> int:
    """How many runs of the study the node running this attempt holds at once (at least 1):
    its CPUs over the run's ``cpus``, its GPUs over the run's ``gpus`` (when it asks for
    any), at most ``max_concurrent``. The node's resources are Ray's (this is called in the
    attempt's Ray task); outside Ray, this machine's CPU count and no GPU."""
    return runs_fitting(*_node_resources(), resources)


def runs_fitting(node_cpus: float, node_gpus: float, resources: dict[str, Any]) -> int:
    """How many runs asking for ``resources`` (as :func:`runs_per_node`) fit at once on
    ``node_cpus`` CPUs and ``node_gpus`` GPUs (at least 1)."""
    cpus = float(resources.get("cpus") or 1.0)
    gpus = float(resources.get("gpus") or 0.0)
    k = max(1, int(node_cpus // cpus))
    if gpus > 0:
        k = min(k, max(1, int(node_gpus // gpus)))
    if resources.get("max_concurrent"):
        k = min(k, int(resources["max_concurrent"]))
    return max(1, k)


def _node_resources() -> tuple[float, float]:
    """(CPUs, GPUs) Ray gave this node, or (this machine's CPUs, 0) outside a Ray task."""
    with suppress(Exception):  # no Ray, or its state service is gone: this machine's count
        import ray

        if ray.is_initialized():
            node = ray.get_runtime_context().get_node_id()
            for n in ray.nodes():
                if n.get("NodeID") == node:
                    res = n.get("Resources") or {}
                    return float(res.get("CPU", 1.0)), float(res.get("GPU", 0.0))
    return float(os.cpu_count() or 1), 0.0


def _wait(proc: subprocess.Popen, stop_file: Path) -> int:
    """Wait for the run process; stop it when the driver writes the attempt's stop file."""
    while True:
        try:
            return proc.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            if stop_file.exists():
                return _stop(proc)


def _stop(proc: subprocess.Popen) -> int:
    """SIGTERM (the run turns it into ``KeyboardInterrupt``), then :data:`STOP_GRACE_S` for
    the run's own cleanup, then SIGKILL to its process group."""
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        return kill_group(proc)


def settled_status(run_dir: Path | None, *, reported: bool = False) -> str | None:
    """The final status of ``run_dir`` (``reported``: only once its report is written too);
    None for no run or one not settled: a run.json left "running"/"preparing" belongs to a
    run process that died mid-run."""
    if run_dir is None:
        return None
    record = RunRecord(run_dir)
    if not record.settled() or (reported and not record.paths.metrics_json.is_file()):
        return None
    return record.status()


def find_run_dir(request: dict[str, Any]) -> Path | None:
    """The run directory an attempt created, found by its identity when no ``result.json``
    says: the earliest run under the study directory created after the attempt was queued
    with the slot's task, model, seed, agent, driver and mode. One slot never has two
    attempts at once, and two slots differ in one of these, so the match is unambiguous
    (slots that differ only by driver run side by side with the same seed: without the
    driver they could take each other's run). None when the run never got that far."""
    req = request["request"]
    agent, driver = _identity(req["agent"], req.get("driver"))
    # a run of an agent without an LLM records no mode (its request has the default one)
    mode = req.get("mode") if driver not in (None, _UNKNOWN) else None
    since = float(request["queued_at"]) - 1.0
    found: list[tuple[float, Path]] = []
    for run_json in Path(request["study_dir"]).glob("*/run.json"):
        info = RunRecord(run_json.parent).info()
        same = (
            info is not None
            and info.task == req["task"]
            and info.model == req["model"]
            and info.seed == req["seed"]
            and (agent is None or info.agent == agent)
            and (driver is _UNKNOWN or info.driver == driver)
            and (mode is None or info.mode == mode)
            and float(info.created_at or 0) >= since
        )
        if same:
            found.append((float(info.created_at), run_json.parent))  # type: ignore[union-attr]
    return min(found)[1] if found else None


#: a driver :func:`_identity` could not resolve (the agent spec vanished): not matched on
_UNKNOWN = object()


def _identity(agent_ref: str, driver: str | None) -> tuple[str | None, Any]:
    """The agent name and driver name a run of (``agent_ref``, ``driver``) records in its
    ``run.json``: the driver as resolved (``None`` stands for the agent's default driver),
    None for an agent without an LLM. Either is unknown (None, :data:`_UNKNOWN`) when the
    spec can no longer be read."""
    from agent2rl.agents.drivers import driver_for
    from agent2rl.agents.spec import get_agent

    try:
        spec = get_agent(agent_ref)
    except Exception:  # an agent spec that vanished: match on the rest
        return None, _UNKNOWN
    if not spec.uses_llm:
        return spec.name, None
    try:
        return spec.name, driver_for(spec, driver).name
    except Exception:  # a driver it no longer accepts: the run never started anyway
        return spec.name, driver


# -- the run process -------------------------------------------------------------------------
_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def _stop_once(signum: int, frame: object) -> None:
    """The first SIGTERM/SIGINT raises ``KeyboardInterrupt``; later ones are ignored, so that
    the run's cleanup (stop the agent, write the report) is not itself interrupted. (A
    handler that does nothing, not ``SIG_IGN``: the processes the run starts would inherit
    that.)"""
    for sig in _SIGNALS:
        signal.signal(sig, lambda *_: None)
    raise KeyboardInterrupt


def _run(adir: Path, share: int = 1) -> dict[str, Any]:
    """The attempt's run, its agent capped at 1/``share`` of this machine (see
    :func:`runs_per_node`)."""
    from rich.console import Console

    from agent2rl.orchestration.request import RunRequest
    from agent2rl.orchestration.run import execute_run

    request = read_json(adir / REQUEST)
    extra_env = dict(request.get("agent_env", {}))
    if os.environ.get("CUDA_VISIBLE_DEVICES") is not None:
        # The GPU(s) Ray assigned to this task: the agent trains on those only.
        extra_env["CUDA_VISIBLE_DEVICES"] = os.environ["CUDA_VISIBLE_DEVICES"]
    console = Console(file=sys.stdout, force_terminal=False, width=120, soft_wrap=True)
    try:  # a request this node refuses (an agent spec gone) is the attempt's error too
        req = RunRequest.model_validate(request["request"]).model_copy(
            update={"extra_env": extra_env, "machine_share": 1 / max(1, share)}
        )
        outcome = execute_run(req, console)
    except (KeyboardInterrupt, Exception) as err:  # a UserError too
        run_dir = find_run_dir(request)
        status = settled_status(run_dir)
        if isinstance(err, KeyboardInterrupt):
            return run_result(
                run_dir, status or RunStatus.INTERRUPTED, "interrupted: the study was stopped"
            )
        return run_result(run_dir, status, f"{type(err).__name__}: {err}")
    m = outcome.metrics
    error = None if m is not None else "the run's report could not be written"
    return run_result(outcome.run_dir, outcome.status, error) | {
        "best": m.best_score if m else None,
        "improvement": m.improvement if m else None,
        "baseline": m.baseline if m else None,
        "submissions": m.submissions if m else None,
    }


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) not in (1, 2) or (len(args) == 2 and not args[1].isdigit()):
        print(
            "usage: python -m agent2rl.study.attempt ATTEMPT_DIR [RUNS_PER_NODE]", file=sys.stderr
        )
        return 2
    share = int(args[1]) if len(args) == 2 else 1
    for sig in _SIGNALS:
        signal.signal(sig, _stop_once)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, set(_SIGNALS))
    adir = Path(args[0])
    write_json_atomic(
        adir / STARTED,
        {"node": socket.gethostname(), "pid": os.getpid(), "at": time.time(), "share": share},
    )
    try:
        result = _run(adir, share)
    except KeyboardInterrupt:  # a signal before execute_run started: nothing was created
        result = run_result(None, RunStatus.INTERRUPTED, None)
    write_json_atomic(adir / RESULT, result)
    return 0


if __name__ == "__main__":  # pragma: no cover - the run process's entry point
    sys.exit(main())
