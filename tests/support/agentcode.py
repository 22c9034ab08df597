"""The reference agents' code run as it runs in a workspace: a real subprocess in its
``code/`` set-up, with the workspace contract's environment."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import agent2rl.agents

REFERENCE = Path(agent2rl.agents.__file__).parent / "reference"


def run_agent_code(
    tmp_path: Path, data: Path, model: Path, script: str, timeout: float = 300
) -> Any:
    """The JSON that ``script`` prints last, run with ``tmp_path`` as its directory, the
    reference agents' modules importable, ``DATA_PATH=data`` and ``MODEL_PATH=model``.
    Fails the test (with the end of its stderr) when the script exits non-zero."""
    r = subprocess.run(
        [sys.executable, "-c", script],
        cwd=tmp_path,
        env={
            "DATA_PATH": str(data),
            "MODEL_PATH": str(model),
            "PYTHONPATH": str(REFERENCE),
            # the rest of the workspace contract common.py reads (nothing is contacted)
            "OUTPUT_DIR": str(tmp_path / "output"),
            "GRADING_SERVER_URL": "http://127.0.0.1:9",
            "GRADING_TOKEN": "unused",
            "DEADLINE": "0",
        },
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.splitlines()[-1])
