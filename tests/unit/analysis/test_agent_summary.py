"""``--instructions reference`` (the paper's reference's framing: RL post-training, a
required summary.md) and the agent's summary.md in the report, labelled as its own account.

summary.md is the agent's file, read by the harness: a symlink is not followed (it could
point at a private file), a FIFO does not block the report, its size is capped, and its
text is shown verbatim (no Markdown, no HTML of its own)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from test_analysis import HALF, Sub, make_run

from agent2rl.analysis import write_report
from agent2rl.errors import UserError
from agent2rl.rundir import RunInfo, RunPaths
from agent2rl.workspace import write_instructions
from agent2rl.workspace.instructions import (
    MAX_SUMMARY_BYTES,
    SUMMARY_LABEL,
    read_agent_summary,
)


def _info() -> RunInfo:
    now = time.time()
    return RunInfo(run_id="r1", task="gsm8k", task_version="1", level=1, agent="claude-code",
                   model="m", budget_s=3600.0, seed=0, sandbox="none", created_at=now,
                   start=now, deadline=now + 3600)  # fmt: skip


def test_reference_instructions_frame_rl_post_training_and_require_summary(tmp_path) -> None:
    paths = RunPaths(tmp_path / "run")
    paths.workspace.mkdir(parents=True)
    write_instructions(paths, _info(), "http://127.0.0.1:1", "tok", style="reference")
    text = (paths.workspace / "instructions.md").read_text()
    assert "reinforcement-learning post-training" in text
    assert "## summary.md (required)" in text and "You MUST keep a file `summary.md`" in text
    assert "never overwrite earlier attempts" in text and "**Why**" in text
    # the practical sections are the neutral text's: the token, the submit call, the rules
    assert "token: `tok`" in text and '"model_path": "output/v1"' in text
    assert "## Rules" in text and "task `gsm8k`" in text
    write_instructions(paths, _info(), "http://127.0.0.1:1", "tok")  # the default: neutral
    neutral = (paths.workspace / "instructions.md").read_text()
    assert "summary.md" not in neutral and "post-training" not in neutral
    with pytest.raises(UserError, match="--instructions nope: use neutral, reference"):
        write_instructions(paths, _info(), "u", "t", style="nope")


def test_summary_md_is_in_the_report_as_the_agents_own_account(tmp_path) -> None:
    paths = make_run(tmp_path / "run", HALF, [Sub(t=10, items=HALF)])
    write_report(paths)
    assert SUMMARY_LABEL not in (paths.report / "report.md").read_text()  # none written
    paths.workspace.mkdir(parents=True, exist_ok=True)
    account = "## Attempt 1\n- **Score**: 99 <script>alert(1)</script>\n```\nfence\n```\n"
    (paths.workspace / "summary.md").write_text(account)
    write_report(paths)
    md = (paths.report / "report.md").read_text()
    assert f"## {SUMMARY_LABEL}" in md and "did not check it" in md
    assert "````text\n" + account + "\n````" in md  # a fence longer than the agent's
    page = (paths.report / "report.html").read_text()
    assert SUMMARY_LABEL.replace("'", "&#x27;") in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "<script>alert(1)" not in page
    assert page.rstrip().endswith("</body></html>")


def test_summary_md_read_with_care(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    assert read_agent_summary(ws) is None
    secret = tmp_path / "private.txt"
    secret.write_text("GOLD ANSWERS")
    (ws / "summary.md").symlink_to(secret)  # a symlink: not followed
    assert read_agent_summary(ws) is None
    (ws / "summary.md").unlink()
    os.mkfifo(ws / "summary.md")  # a FIFO: no reader would block the report
    assert read_agent_summary(ws) is None
    (ws / "summary.md").unlink()
    (ws / "summary.md").write_bytes(b"a" * (MAX_SUMMARY_BYTES + 10) + b"\xff")
    s = read_agent_summary(ws)
    assert s is not None and s.truncated and len(s.text) == MAX_SUMMARY_BYTES
    assert s.size == MAX_SUMMARY_BYTES + 11
    (ws / "summary.md").write_bytes(b"ok \xff")
    assert read_agent_summary(ws).text == "ok \ufffd"


def test_cli_refuses_an_unknown_instructions_style(tmp_path) -> None:
    from support.cli import run_cli

    env = {**os.environ, "AGENT2RL_HOME": str(tmp_path / "home")}
    out = run_cli(["run", "--task", "arith-lite", "--agent", "scripted", "--model", "tiny",
                   "--budget", "1m", "--runs-dir", str(tmp_path / "runs"),
                   "--instructions", "nope"], env=env, timeout=120)  # fmt: skip
    assert out.returncode != 0
    assert "--instructions nope: use neutral, reference" in out.stdout + out.stderr
    assert "Traceback" not in out.stdout + out.stderr
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())
