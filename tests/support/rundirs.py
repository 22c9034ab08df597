"""Build real run directories for tests, with the same pieces the orchestrator uses.

The grading set-up is :mod:`agent2rl.orchestration.scratch_run` (shared with the grading
benchmarks); this module re-exports it and adds :func:`serve`. The run-directory fixture of
the readers' tests (viewer, export, report, recovery, studies, RunRecord) is
:func:`write_run` (``run.json`` through :class:`RunInfo`), :func:`snapshot` (the code
recorder's git) and the real :class:`~agent2rl.grading.ledger.Ledger`.
"""

from __future__ import annotations

import secrets
import time
from pathlib import Path
from typing import Any

from agent2rl.grading.service import ServiceHandle, start_service
from agent2rl.orchestration.scratch_run import make_run, perturbed_copy, run_stub
from agent2rl.recording.snapshot import CodeRecorder
from agent2rl.rundir import RunInfo, RunPaths

__all__ = ["make_run", "perturbed_copy", "run_stub", "serve", "snapshot", "write_run"]


def write_run(root: Path, **fields: Any) -> RunPaths:
    """A run directory at ``root`` (created) holding ``run.json``, written by
    :meth:`RunInfo.save`: an arith-lite run of agent ``test`` on ``tiny``, created a minute
    ago, its 600 s clock started 50 s ago, ``running``; any RunInfo field in ``fields``
    overrides these."""
    now = time.time()
    info: dict[str, Any] = {
        "run_id": root.name,
        "task": "arith-lite",
        "task_version": "1",
        "level": 1,
        "agent": "test",
        "model": "tiny",
        "budget_s": 600,
        "seed": 0,
        "sandbox": "none",
        "created_at": now - 60,
        "start": now - 50,
        "deadline": now + 550,
        "status": "running",
    }
    paths = RunPaths(root)
    root.mkdir(parents=True, exist_ok=True)
    RunInfo(**(info | fields)).save(paths)
    return paths


def snapshot(paths: RunPaths, files: dict[str, str], message: str) -> str:
    """Write ``files`` (name -> text) under the workspace's ``code/`` and snapshot the
    workspace with the code recorder, as the grader does at a submission; the commit id."""
    paths.code.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (paths.code / name).write_text(text)
    return CodeRecorder(paths.code_git, paths.workspace).snapshot(message)


def serve(
    paths: RunPaths, base_model_dir: Path, max_bytes: int = 64 * 2**20
) -> tuple[ServiceHandle, str]:
    """Start a real grading service for ``paths``; returns it and its token."""
    token = secrets.token_urlsafe(16)
    return start_service(
        paths, token, eval_timeout_s=120, max_bytes=max_bytes, base_model_dir=base_model_dir
    ), token
