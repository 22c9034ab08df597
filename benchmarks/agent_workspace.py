"""The reference agent's own code, run inside a benchmark's process: the workspace a run
builds for the agent, and the environment its code reads at import."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

REFERENCE = Path(__file__).resolve().parent.parent / "src" / "agent2rl" / "agents" / "reference"


def enter_workspace(work: Path, task: Any, prepared: Any, model_ref: Any) -> Any:
    """Build the agent's workspace under ``work/run`` for ``task`` and ``model_ref`` (an
    :class:`agent2rl.models.resolve.ModelRef`) as a run does, set the workspace contract's
    environment variables, and put the reference agent's modules on ``sys.path`` (then
    ``import common`` works). Returns the run's :class:`~agent2rl.rundir.RunPaths`.

    The grading server's URL names a closed port: a benchmark grades in-process and never
    submits. Once per process: the agent's modules read the environment when imported.
    """
    from agent2rl.rundir import RunPaths
    from agent2rl.workspace import build_workspace

    paths = RunPaths(work / "run")
    build_workspace(paths, task, prepared, model_ref)
    os.environ.update(
        DATA_PATH=str(paths.data),
        MODEL_PATH=str(model_ref.path),
        OUTPUT_DIR=str(paths.output),
        GRADING_SERVER_URL="http://127.0.0.1:9",  # not contacted
        GRADING_TOKEN="unused",
        DEADLINE="0",
    )
    sys.path.insert(0, str(REFERENCE))
    return paths


def run_variant(cmd: list[str]) -> tuple[dict[str, Any] | None, str]:
    """Run one variant's child process (a benchmark re-invoking itself with ``--one``): the
    JSON of its last ``RESULT `` line, or None and the end of its stderr when it failed."""
    import json
    import subprocess

    proc = subprocess.run(cmd, capture_output=True, text=True)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode or not lines:
        return None, proc.stderr[-2000:]
    return json.loads(lines[-1][len("RESULT ") :]), ""
