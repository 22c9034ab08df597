"""Running the CLI as a user does (a real subprocess), and finding the run it made."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

#: a small alfworld-lite (one game of each task type per split) for tests
LITE_OPTS = {"n_train": "6", "n_eval": "6", "n_validation": "6"}


def agent2rl_cmd() -> list[str]:
    """The CLI as a user runs it (a real subprocess)."""
    return [sys.executable, "-m", "agent2rl.cli"]


def run_cli(
    args: list[str], env: dict[str, str] | None = None, timeout: float = 600
) -> subprocess.CompletedProcess:
    """``agent2rl ARGS`` as a subprocess, text output captured. ``env`` is the child's whole
    environment (None: this process's)."""
    return subprocess.run(
        agent2rl_cmd() + args, capture_output=True, text=True, timeout=timeout, env=env
    )


def only_run(runs: Path):
    """The single run directory under ``runs`` (``results.db`` sits beside it)."""
    from agent2rl.rundir import RunPaths

    dirs = [d for d in runs.iterdir() if d.is_dir()]
    assert len(dirs) == 1, dirs
    return RunPaths(dirs[0])
