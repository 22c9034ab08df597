"""Build real run directories for tests, with the same pieces the orchestrator uses."""

from __future__ import annotations

import secrets
import time
from pathlib import Path

from agent2rl.grading.ledger import Ledger
from agent2rl.grading.service import ServiceHandle, start_service
from agent2rl.orchestration.baseline import measure_baseline, record_baseline
from agent2rl.rundir import RunInfo, RunPaths
from agent2rl.settings import load_settings
from agent2rl.workspace import build_workspace


def run_stub(root: Path, task, model=None, budget_s: float = 600.0) -> RunPaths:
    """A run directory holding only ``run.json`` (task, options, a running clock): what the
    rollout service needs."""
    paths = RunPaths(root)
    root.mkdir(parents=True)
    now = time.time()
    RunInfo(
        run_id=root.name,
        task=task.name,
        task_version=task.version,
        level=task.level,
        agent="test",
        model="tiny",
        budget_s=budget_s,
        seed=0,
        sandbox="none",
        created_at=now,
        start=now,
        deadline=now + budget_s,
        status="running",
        model_path=str(model.path) if model else None,
        task_options=task.opts,
    ).save(paths)
    return paths


def make_run(root: Path, task, prepared, model, budget_s: float = 600.0) -> RunPaths:
    """A run directory with workspace, baseline in the ledger and a running clock."""
    paths = run_stub(root, task, model, budget_s)
    build_workspace(paths, task, prepared, model)
    with Ledger(paths.ledger) as ledger:
        baseline = measure_baseline(task, model, load_settings(), paths)
        record_baseline(ledger, task, model, baseline)
    return paths


def serve(
    paths: RunPaths, base_model_dir: Path, max_bytes: int = 64 * 2**20
) -> tuple[ServiceHandle, str]:
    """Start a real grading service for ``paths``; returns it and its token."""
    token = secrets.token_urlsafe(16)
    return start_service(
        paths, token, eval_timeout_s=120, max_bytes=max_bytes, base_model_dir=base_model_dir
    ), token
