"""A pipeline spec (``openhands-paper``: ``python code/stages.py ... -- openhands ...``) starts
the harness's Python, which starts the agent's CLI in turn. The sandbox must bind the CLI's
install folder too, not only ``command[0]``'s: a CLI installed outside the system dirs (a
``uv tool`` or ``.venv-openhands`` environment) was "not found" in every stage, and the run
ended as an infrastructure failure at its first second."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from agent2rl.sandbox.agent import AGENT_TMP, agent_sandbox
from agent2rl.sandbox.bwrap import bwrap_argv, bwrap_available

#: the stage runner's part: start the CLI by name from the PATH, as subprocess does
WRAPPER = "import subprocess, sys; sys.exit(subprocess.call(['mycli']))"


def _setup(tmp_path: Path) -> tuple[Path, dict[str, str], list[str]]:
    ws = tmp_path / "run" / "workspace"
    for d in ("code", "models/base", AGENT_TMP):
        (ws / d).mkdir(parents=True)
    tools = tmp_path / "tools" / "bin"  # outside the system dirs, as a uv tool's bin
    tools.mkdir(parents=True)
    cli = tools / "mycli"
    cli.write_text("#!/bin/sh\necho 'mycli ran'\n")
    cli.chmod(0o755)
    env = {"PATH": f"/usr/bin:/bin:{tools}", "HOME": str(ws), "TMPDIR": str(ws / AGENT_TMP)}
    return ws, env, [sys.executable, "-c", WRAPPER]


def test_the_wrapped_programs_install_folder_is_bound(tmp_path: Path) -> None:
    ws, env, command = _setup(tmp_path)
    tools = tmp_path / "tools" / "bin"
    alone = agent_sandbox(ws, [], ws / "models" / "base", env, command)
    assert tools not in alone.ro_binds
    spec = agent_sandbox(ws, [], ws / "models" / "base", env, command, programs=["mycli"])
    assert tools in spec.ro_binds


@pytest.mark.skipif(not bwrap_available(), reason="bwrap cannot create namespaces here")
def test_a_wrapped_cli_runs_in_the_sandbox(tmp_path: Path) -> None:
    ws, env, command = _setup(tmp_path)
    spec = agent_sandbox(ws, [], ws / "models" / "base", env, command, programs=["mycli"])
    proc = subprocess.run(bwrap_argv(spec, command), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout == "mycli ran\n", proc.stderr
