"""The run's services under one lifecycle (issue #25, item 5): whatever stops a run's start,
every service already started is stopped, last first, and nothing outlives the harness.

Real child processes through the real ready-file handshake; the run-level case is a real run
(arith-lite, the tiny model, the bwrap sandbox with ``--network services``) whose package
index proxy fails its handshake after the grading service and the egress proxy are up.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import psutil
import pytest
from rich.console import Console
from support import AGENTS
from support.procs import processes_mentioning

from agent2rl.child_process import ServiceHandle, start_announcing
from agent2rl.orchestration import run as run_module
from agent2rl.orchestration.guard import HARNESS_MARK_ENV
from agent2rl.orchestration.request import RunRequest
from agent2rl.orchestration.run import execute_run
from agent2rl.orchestration.services import Launched, RunServices, ServiceNotReady
from agent2rl.rundir import RunInfo, RunPaths, RunStatus
from agent2rl.sandbox import bwrap_available, network_isolation_available

#: a child that announces itself at once, then waits to be stopped
READY = (
    "import json, os, sys, time; p = sys.argv[1]; "
    "open(p + '.tmp', 'w').write(json.dumps({'port': 1, 'pid': os.getpid()})); "
    "os.rename(p + '.tmp', p); time.sleep(300)"
)
#: a child that dies before it announces itself
BROKEN = "import sys; sys.exit(3)"


def _child(tmp: Path, name: str, code: str) -> ServiceHandle:
    proc, port = start_announcing(
        [sys.executable, "-c", code, str(tmp / f"{name}.json")],
        env=dict(os.environ),
        ready_file=tmp / f"{name}.json",
        log_file=tmp / f"{name}.log",
        name=name,
        ready_timeout=30.0,
    )
    return ServiceHandle(proc, port)


def _gone(pid: int, timeout: float = 5.0) -> bool:
    end = time.time() + timeout
    while time.time() < end:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.05)
    return False


def test_a_service_that_fails_readiness_stops_the_started_ones_last_first(tmp_path) -> None:
    warnings: list[str] = []
    services = RunServices(warnings.append)
    first = services.launch("first", lambda: _child(tmp_path, "first", READY), ServiceHandle.stop)
    second = services.launch(
        "second", lambda: _child(tmp_path, "second", READY), ServiceHandle.stop
    )
    with pytest.raises(ServiceNotReady) as caught:
        services.launch("third", lambda: _child(tmp_path, "third", BROKEN), ServiceHandle.stop)
    err = caught.value
    assert err.service == "third"
    assert str(err).startswith("infrastructure failure: the third did not become ready: ")
    assert "third exited with code 3; see" in str(err)
    # Still running until the run's close, which stops them all, last started first.
    assert first.proc.poll() is None and second.proc.poll() is None
    services.close()
    assert services.started == ["first", "second"]
    assert services.stopped == ["third", "second", "first"]
    assert _gone(first.proc.pid) and _gone(second.proc.pid)
    assert warnings == []
    services.close()  # idempotent
    assert services.stopped == ["third", "second", "first"]


def test_a_failing_stop_is_reported_and_the_others_still_stop(tmp_path) -> None:
    warnings: list[str] = []
    steps: list[str] = []

    def broken_stop(handle: ServiceHandle) -> None:
        raise OSError("the socket is gone")

    with RunServices(warnings.append) as services:
        services.callback("writing the report", steps.append, "report")
        first = services.launch("first", lambda: _child(tmp_path, "a", READY), ServiceHandle.stop)
        services.launch("flaky", lambda: _child(tmp_path, "b", READY), broken_stop)
    assert steps == ["report"]  # the step registered first ran last, after the failure
    assert _gone(first.proc.pid)
    assert warnings == ["stopping the flaky failed: OSError: the socket is gone"]
    assert services.stopped == ["flaky", "first", "writing the report"]
    # the flaky one's process: its stop failed, so kill it here (not the harness's job)
    for p in psutil.Process().children():
        if "b.json" in " ".join(p.cmdline()):
            p.kill()


def test_an_interrupt_during_a_start_stops_the_started_ones(tmp_path) -> None:
    services = RunServices()
    first = services.launch("first", lambda: _child(tmp_path, "first", READY), ServiceHandle.stop)

    def interrupted() -> ServiceHandle:
        raise KeyboardInterrupt  # Ctrl-C while the second one starts: not a service failure

    with pytest.raises(KeyboardInterrupt):
        services.start(Launched("second", interrupted, ServiceHandle.stop))
    services.close()
    assert _gone(first.proc.pid)
    assert services.stopped == ["second", "first"]


@pytest.mark.slow  # a real run: its baseline, its sandbox (2 min on a loaded 2-core VM)
@pytest.mark.skipif(
    not (bwrap_available() and network_isolation_available()),
    reason="needs bubblewrap with network namespaces (--network services)",
)
def test_a_run_whose_service_fails_readiness_stops_every_started_one(
    tmp_path, monkeypatch, arith, tiny
) -> None:
    """The package index proxy fails its handshake after the guard, the grading service and
    the egress proxy are up: the run ends an infrastructure failure naming it, with its
    report, and no process of the run is left."""

    def broken_name_proxies(record_dir: Path, state_dir: Path, deny, **kw):
        # The real handshake with a real child that dies before it is ready.
        _child(state_dir, "index proxy", BROKEN)
        raise AssertionError("unreachable")

    monkeypatch.setattr(run_module, "start_name_proxies", broken_name_proxies)
    runs = tmp_path / "runs"
    req = RunRequest(
        task="arith-lite",
        agent=str(AGENTS / "quick.toml"),
        model="tiny",
        budget_s=60,
        runs_dir=runs,
        sandbox="bwrap",
        network="services",
    )
    mark = os.environ.get(HARNESS_MARK_ENV)
    with pytest.raises(RuntimeError) as caught:
        execute_run(req, Console(file=open(os.devnull, "w")))  # noqa: SIM115
    (root,) = [d for d in runs.iterdir() if d.is_dir()]
    end = time.time() + 10
    while (left := processes_mentioning(str(root))) and time.time() < end:
        time.sleep(0.2)
    for pid, _ in left:  # leave nothing to later tests, then fail
        psutil.Process(pid).kill()
    assert left == []
    paths = RunPaths(root)
    # Stopped by the run itself, not left to the guard's sweep (its backstop for a harness
    # that dies): before the services had one lifecycle, the egress proxy was left to it.
    guard_log = (root / "guard.log").read_text()
    assert "leaving" not in guard_log, guard_log
    assert os.environ.get(HARNESS_MARK_ENV) == mark
    info = RunInfo.load(paths)
    assert info.status == RunStatus.HARNESS_ERROR
    assert info.error is not None and info.error.startswith(
        "infrastructure failure: the package index and model hub proxies did not become "
        "ready: index proxy exited with code 3; see "
    ), info.error
    assert str(caught.value) == info.error
    assert (paths.report / "metrics.json").exists()
    assert not paths.agent_log.exists() or "started" not in paths.agent_log.read_text()


def test_the_cli_ends_a_service_failure_with_one_line(tmp_path: Path, monkeypatch) -> None:
    """``agent2rl run`` whose first service cannot start prints the infrastructure failure as
    one line and exits 1, without a traceback (before: the ServiceNotReady propagated out of
    the command)."""
    from typer.testing import CliRunner

    from agent2rl.cli import app
    from agent2rl.orchestration.services import GuardService

    class FullDisk(GuardService):
        def start(self) -> None:
            raise OSError("no space left on device")

    monkeypatch.setattr(run_module, "GuardService", FullDisk)
    args = ["run", "--task", "arith-lite", "--agent", str(AGENTS / "quick.toml")]
    args += ["--budget", "60s", "--runs-dir", str(tmp_path / "runs"), "--sandbox", "none"]
    result = CliRunner().invoke(app, args)
    text = " ".join(result.output.split())  # rich wraps at the terminal's width
    assert result.exit_code == 1, result.output
    line = "infrastructure failure: the run guard did not become ready: no space left on device"
    assert text.count(line) == 1, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert "Traceback" not in result.output
