"""Build real run directories for tests, with the same pieces the orchestrator uses.

The set-up itself is :mod:`agent2rl.orchestration.scratch_run` (shared with the grading
benchmarks); this module re-exports it and adds :func:`serve`.
"""

from __future__ import annotations

import secrets
from pathlib import Path

from agent2rl.grading.service import ServiceHandle, start_service
from agent2rl.orchestration.scratch_run import make_run, perturbed_copy, run_stub
from agent2rl.rundir import RunPaths

__all__ = ["make_run", "perturbed_copy", "run_stub", "serve"]


def serve(
    paths: RunPaths, base_model_dir: Path, max_bytes: int = 64 * 2**20
) -> tuple[ServiceHandle, str]:
    """Start a real grading service for ``paths``; returns it and its token."""
    token = secrets.token_urlsafe(16)
    return start_service(
        paths, token, eval_timeout_s=120, max_bytes=max_bytes, base_model_dir=base_model_dir
    ), token
