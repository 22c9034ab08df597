"""The agent's /tmp is on disk in its workspace (the folder its TMPDIR names), so what it
leaves there survives the sandbox for the end-of-run contamination check and counts against
the workspace quota; before, /tmp was a tmpfs that vanished with the sandbox, unscanned."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from agent2rl.sandbox.agent import AGENT_TMP, agent_sandbox, agent_user, hand_over, identity_files
from agent2rl.sandbox.bwrap import bwrap_argv, bwrap_available

needs_bwrap = pytest.mark.skipif(
    not bwrap_available(),
    reason="bwrap is not on PATH or cannot create namespaces here (e.g. an unprivileged container)",
)

#: what a scripted agent does: writes to a hard-coded /tmp path, ignoring TMPDIR
WRITE_TMP = """
import os
with open("/tmp/stolen.jsonl", "w") as fh:
    fh.write("graded item\\n")
print(sorted(os.listdir("/tmp")))
"""


def _workspace(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    ws = run / "workspace"
    for d in ("code", "output", "data", "models/base", AGENT_TMP):
        (ws / d).mkdir(parents=True)
    (run / "secret.txt").write_text("private split")
    return ws


@needs_bwrap
def test_what_the_agent_writes_to_tmp_survives_in_its_workspace(tmp_path: Path) -> None:
    ws = _workspace(tmp_path)
    run_id = "r-" + tmp_path.name
    user = agent_user(run_id)  # root runs the agent as a user of its own, as a run does
    identity = None
    if user is not None:
        hand_over(user, [ws, ws / "code", ws / "output", ws / AGENT_TMP])
        identity = identity_files(user, ws / ".home", tmp_path / "run" / "sandbox")
    command = [sys.executable, "-c", WRITE_TMP]
    env = {"PATH": "/usr/bin:/bin", "HOME": str(ws), "TMPDIR": str(ws / AGENT_TMP)}
    spec = agent_sandbox(
        ws, [ws / "data", ws / "models"], ws / "models" / "base", env, command,
        user=user, identity=identity,
    )  # fmt: skip
    proc = subprocess.run(bwrap_argv(spec, command), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    # The sandbox is gone; the file is on the host, where the contamination check reads.
    assert (ws / AGENT_TMP / "stolen.jsonl").read_text() == "graded item\n"
    if user is not None:
        assert (ws / AGENT_TMP / "stolen.jsonl").stat().st_uid == user.uid
    # /tmp shows nothing of the run directory around the workspace.
    assert "secret.txt" not in proc.stdout


def test_without_a_tmp_folder_the_sandbox_keeps_a_tmpfs(tmp_path: Path) -> None:
    ws = _workspace(tmp_path)
    os.rmdir(ws / AGENT_TMP)
    spec = agent_sandbox(ws, [ws / "data"], ws / "models" / "base", {}, [sys.executable])
    assert spec.tmp_dir is None
    assert "--tmpfs" in bwrap_argv(spec, ["true"])


def test_the_tmp_folder_is_the_agents_tmpdir(tmp_path: Path) -> None:
    """The sandbox's /tmp and the TMPDIR a run gives its agent are one folder (both scanned,
    both under the quota), in either sandbox mode."""
    from agent2rl.models.resolve import ModelRef
    from agent2rl.rundir import RunInfo, RunPaths
    from agent2rl.workspace import agent_env

    paths = RunPaths(tmp_path / "run")
    info = RunInfo("r", "arith-lite", "2", 1, "a", "tiny", 60.0, 0, "none", 0.0)
    env = agent_env(paths, info, ModelRef("tiny", tmp_path, "unused"), "http://x", "t")
    assert env["TMPDIR"] == str(paths.workspace / AGENT_TMP)
