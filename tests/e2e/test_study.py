"""Studies for real: the CLI, real Ray (local and a head started with `ray start`), real runs.

Stopping is tested as a user does it: Ctrl-C (SIGINT) and a killed driver (SIGKILL) in the
middle of a study, then `study run` again; no run is lost, none is counted twice, and no
process of the study survives it.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest
from support import AGENTS
from support.cli import agent2rl_cmd, run_cli
from support.procs import processes_mentioning

from agent2rl.study import read_state

pytestmark = pytest.mark.slow


def write_spec(tmp_path: Path, agents: list[str], repeats: int, budget: str) -> Path:
    path = tmp_path / "study.toml"
    listed = ", ".join(f'"{a}"' for a in agents)
    path.write_text(
        f'name = "e2e"\ntasks = ["arith-lite"]\nagents = [{listed}]\nrepeats = {repeats}\n'
        f'budget = "{budget}"\nsandbox = "none"\n'
    )
    return path


def ray_processes(session_dir: str | None) -> list[str]:
    """Live processes of a Ray session (they name it, or hold files inside it)."""
    if not session_dir:
        return []
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.status() == psutil.STATUS_ZOMBIE:
                continue
            cmd = " ".join(proc.cmdline())
            if session_dir in cmd or any(f.path.startswith(session_dir) for f in proc.open_files()):
                found.append(f"{proc.pid} {cmd[:80]}")
        except (psutil.Error, OSError):
            continue
    return found


def settle(check, timeout: float = 60.0):
    """Poll ``check()`` until it is falsy (nothing left), at most ``timeout`` seconds."""
    end = time.time() + timeout
    left = check()
    while left and time.time() < end:
        time.sleep(1.0)
        left = check()
    return left


def wait_for(study: Path, predicate, proc: subprocess.Popen, timeout: float = 240.0) -> None:
    end = time.time() + timeout
    while time.time() < end:
        assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
        try:
            _, slots, attempts = read_state(study)
        except Exception:  # not created yet
            slots, attempts = [], []
        if slots and predicate(slots, attempts):
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting on {study}")


def start_study(spec: Path, study: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        agent2rl_cmd() + ["study", "run", str(spec), "--out", str(study), *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # signals go to the driver alone, as from a terminal's kill
    )


def test_ctrl_c_and_kill_then_resume_loses_nothing_and_counts_nothing_twice(tmp_path) -> None:
    spec = write_spec(tmp_path, [str(AGENTS / "sleeper.toml")], repeats=3, budget="10s")
    study = tmp_path / "study"

    # 1. Ctrl-C while repeat 1 runs (repeat 0 has finished).
    proc = start_study(spec, study, "--max-concurrent", "1")
    wait_for(
        study,
        lambda s, a: (
            s[0].status == "finished" and any(x.slot_id == s[1].id and x.started_at for x in a)
        ),
        proc,
    )
    time.sleep(3)  # the agent is up
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=180)
    assert proc.returncode == 130, out
    assert "stopping" in out and "again resumes" in out
    meta, slots, attempts = read_state(study)
    first_run = slots[0].run_id
    assert [s.status for s in slots] == ["finished", "pending", "pending"]
    assert [a.status for a in attempts] == ["finished", "interrupted"]
    assert settle(lambda: processes_mentioning(str(study))) == []
    assert settle(lambda: ray_processes(meta["last_run"]["session"])) == []
    stopped = Path(attempts[1].run_dir)
    assert '"interrupted"' in (stopped / "run.json").read_text()
    assert (stopped / "report" / "metrics.json").is_file()  # the run wrote its report

    # 2. Resume, then kill the driver outright while repeat 1 runs again.
    proc = start_study(spec, study, "--max-concurrent", "1")
    wait_for(study, lambda s, a: len(a) == 3 and a[-1].started_at is not None, proc)
    time.sleep(3)
    session = read_state(study)[0]["last_run"]["session"]
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=30)
    # Ray's workers die with the driver; each run process then stops its agent itself.
    assert settle(lambda: processes_mentioning(str(study))) == []

    # 3. Resume to the end.
    r = run_cli(["study", "run", str(spec), "--out", str(study), "--max-concurrent", "1"])
    assert r.returncode == 0, r.stdout + r.stderr
    assert "recovered" in r.stdout
    meta, slots, attempts = read_state(study)
    assert [s.status for s in slots] == ["finished"] * 3
    assert slots[0].run_id == first_run  # the finished run was kept, not run again
    counted = [s.run_id for s in slots]
    assert len(set(counted)) == 3
    assert [a.status for a in attempts if a.slot_id == slots[1].id] == [
        "interrupted",
        "interrupted",
        "finished",
    ]
    assert settle(lambda: ray_processes(session)) == []  # reaped by the resume
    assert settle(lambda: ray_processes(meta["last_run"]["session"])) == []
    assert settle(lambda: processes_mentioning(str(study))) == []
    export = run_cli(["study", "export", str(study)])
    assert export.returncode == 0, export.stderr
    import pandas as pd

    runs = pd.read_parquet(study / "export" / "runs.parquet")
    assert sorted(runs["run_id"]) == sorted(counted)  # interrupted attempts are not counted
    assert set(runs["status"]) == {"deadline"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_cluster_mode_with_a_ray_head_on_loopback(tmp_path) -> None:
    ray = str(Path(sys.executable).parent / "ray")
    # Ray's socket paths must stay short: a temp dir directly under /tmp.
    temp = tempfile.mkdtemp(prefix="a2r", dir="/tmp")
    port = free_port()
    head = subprocess.run(
        [
            ray, "start", "--head", "--node-ip-address=127.0.0.1", f"--port={port}",
            "--num-cpus=2", "--num-gpus=0", "--include-dashboard=false",
            "--object-store-memory=100000000", f"--temp-dir={temp}", "--disable-usage-stats",
        ],
        capture_output=True, text=True, timeout=120,
        # A token in ~/.ray/auth_token (left by `ray get-auth-token --generate`) makes
        # `ray start` demand it; this test is about the study reaching a head, not about Ray's
        # token auth, so both ends run without it whatever the machine holds.
        env={**os.environ, "RAY_AUTH_MODE": "disabled"},
    )  # fmt: skip
    try:
        assert head.returncode == 0, head.stdout + head.stderr
        spec = write_spec(tmp_path, [str(AGENTS / "quick.toml")], repeats=1, budget="90s")
        study = tmp_path / "study"
        r = run_cli(
            ["study", "run", str(spec), "--out", str(study), "--address", f"127.0.0.1:{port}"]
        )
        assert r.returncode == 0, r.stdout + r.stderr
        assert f"on 127.0.0.1:{port}" in r.stdout
        meta, slots, _ = read_state(study)
        assert meta["last_run"]["session"] is None  # not a private local Ray
        assert [s.status for s in slots] == ["finished"]
        assert (Path(slots[0].run_dir) / "report" / "report.html").is_file()
        assert settle(lambda: processes_mentioning(str(study))) == []
    finally:
        # Stop this head only (never `ray stop`, which would stop every Ray on the machine).
        for proc in psutil.process_iter():
            try:
                cmd = " ".join(proc.cmdline())
                if temp in cmd or any(f.path.startswith(temp) for f in proc.open_files()):
                    proc.kill()
            except (psutil.Error, OSError):
                continue
        assert settle(lambda: ray_processes(temp), timeout=30) == []
