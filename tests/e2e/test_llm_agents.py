"""Whole runs of real LLM agent CLIs (mini-swe-agent, Claude Code) driven by the scripted fake
provider, a real HTTP server on loopback standing in for the paid API.

The chain under test is the production one: ``agent2rl run`` (a subprocess) starts the metering
proxy with the host's real key and the fake provider as its upstream (the host's
``*_BASE_URL``), launches the real agent binary in the sandbox pointed at the proxy, and the
scripted conversation makes the agent write ``code/train.py`` (real optimizer steps on the
tiny model, a save and an HTTP submission), run it, dump its environment and finish. The run's
report must then show the graded submission, its code snapshot, token totals equal to what
the provider served, and an agent environment without the real key or any other host secret.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from support import FIXTURES
from support.cli import only_run, run_cli
from support.fake_provider import FakeProvider, ToolCall, Turn, start_fake_provider

from agent2rl.grading.ledger import Ledger
from agent2rl.rundir import RunInfo, RunPaths
from agent2rl.sandbox import bwrap_available

TRAIN_PY = (FIXTURES / "llm_scripts" / "train.py").read_text()
VENV_BIN = str(Path(sys.executable).parent)
# The agent CLIs and `python` (with torch) must be on the PATH the run hands to the agent.
HOST_PATH = f"{VENV_BIN}:{os.environ.get('PATH', '/usr/local/bin:/usr/bin:/bin')}"
HOST_SECRET = "s3cret"
# Every key-like variable a developer's shell may hold: the runs below get only the ones the
# test sets, so a real key on the host is never used (nor sent to the fake provider).
_KEY_VARS = (
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_BASE_URL",
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "GEMINI_API_KEY",
    "GOOGLE_API_KEY",
    "AGENT2RL_DRIVER_API_KEY",
)


def _host_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _KEY_VARS}
    return {**env, "PATH": HOST_PATH, **extra}


def _llm_run(
    tmp_path: Path, agent: str, driver: str, turns: list[Turn], api: str, mode: str = "free"
) -> tuple[RunPaths, FakeProvider, str, subprocess.CompletedProcess]:
    """Run ``agent`` with ``driver`` in ``mode`` through a fake provider replaying ``turns``;
    returns the run, the (stopped) provider, the real key and the CLI's result."""
    real_key = f"sk-real-{secrets.token_hex(8)}"
    fake = start_fake_provider({"turns": turns, "final_text": "All done."}, api_key=real_key)
    if api == "anthropic":
        upstream = {"ANTHROPIC_API_KEY": real_key, "ANTHROPIC_BASE_URL": fake.anthropic_base_url}
    else:
        upstream = {"OPENAI_API_KEY": real_key, "OPENAI_BASE_URL": fake.openai_base_url}
    runs = tmp_path / "runs"
    try:
        r = run_cli(
            [
                "run",
                "--task",
                "arith-lite",
                "--agent",
                agent,
                "--driver",
                driver,
                "--mode",
                mode,
                "--model",
                "tiny",
                "--budget",
                "150s",
                "--sandbox",
                "auto",
                "--runs-dir",
                str(runs),
            ],
            env=_host_env(HOST_SECRET=HOST_SECRET, **upstream),
        )
    finally:
        fake.stop()
    assert r.returncode == 0, r.stdout + r.stderr
    return only_run(runs), fake, real_key, r


def _check_run(paths: RunPaths, fake: FakeProvider, real_key: str, url_var: str) -> dict:
    """The assertions both agents share; returns metrics.json."""
    log = paths.agent_log.read_text(errors="replace")[-4000:]
    metrics = json.loads((paths.report / "metrics.json").read_text())
    info = RunInfo.load(paths)
    assert info.status == "completed", (info.status, info.error, log)
    assert info.sandbox == ("bwrap" if bwrap_available() else "none")
    # The script really trained inside the agent's tool (its output is in the agent's log).
    assert "step 1 loss" in paths.agent_log.read_text(errors="replace"), log

    # At least one graded submission, linked to a code snapshot that holds the script.
    assert metrics["valid_submissions"] >= 1, log
    with Ledger(paths.ledger) as ledger:
        subs = ledger.submissions()
    graded = [s for s in subs if s.snapshot]
    assert graded, subs
    tree = subprocess.run(
        ["git", "--git-dir", str(paths.code_git), "ls-tree", "-r", "--name-only"]
        + [graded[0].snapshot],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert "code/train.py" in tree, tree

    # Every request went through the proxy (the provider saw only the real key, which the
    # agent never had), and the report's token totals are exactly what was served.
    served = fake.served
    assert served and all(s.status == 200 for s in served)
    assert all(s.api_key == real_key for s in served)
    usage = metrics["llm_usage"]
    assert usage["requests"] == len(served)
    assert usage["input_tokens"] == sum(s.input_tokens for s in served)
    assert usage["output_tokens"] == sum(s.output_tokens for s in served)
    assert usage["refused"] == 0 and usage["errors"] == 0

    # The agent's environment: the proxy's URL and key, no real key, no host secret.
    dump = (paths.code / "env.txt").read_text()
    assert real_key not in dump and HOST_SECRET not in dump
    url = re.search(rf"^{url_var}=(http://127\.0\.0\.1:(\d+)/\S*)$", dump, re.M)
    assert url, dump
    assert int(url.group(2)) != fake.port  # the proxy, not the provider
    assert "GRADING_TOKEN=" in dump and "MODEL_PATH=" in dump

    agent_view = json.loads((paths.record / "agent.json").read_text())
    assert "error" not in agent_view, agent_view
    assert agent_view["log"]["tool_calls"] >= 3, agent_view
    # The agent's own account of its tokens agrees with the proxy's.
    assert agent_view["log"]["input_tokens"] == usage["input_tokens"], agent_view
    assert agent_view["log"]["output_tokens"] == usage["output_tokens"], agent_view
    assert "sft" in agent_view["methods"] and agent_view["mode_flags"] == [], agent_view
    return metrics


# --------------------------------------------------------------------------------------------
# mini-swe-agent (OpenAI chat completions with a `bash` tool, through litellm)


def _bash(text: str, command: str) -> Turn:
    return Turn(text=text, tool_calls=[ToolCall("bash", {"command": command})])


@pytest.mark.slow
@pytest.mark.skipif(
    shutil.which("mini", path=HOST_PATH) is None,
    reason="mini-swe-agent is not installed (pip install mini-swe-agent mcp)",
)
def test_mini_swe_agent_trains_and_submits_through_the_proxy(tmp_path: Path) -> None:
    turns = [
        _bash(
            "I will write a small SFT script.",
            f"mkdir -p code && cat > code/train.py <<'PYEOF'\n{TRAIN_PY}PYEOF\necho written",
        ),
        _bash("Now I train and submit.", "python code/train.py 2>&1 | tail -n 5"),
        _bash("Recording the environment.", "env > code/env.txt && wc -l code/env.txt"),
        _bash("Finished.", "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"),
    ]
    t0 = time.time()
    paths, fake, real_key, _ = _llm_run(
        tmp_path, "mini-swe-agent", "gpt-4.1-mini", turns, "openai", mode="sft-only"
    )
    metrics = _check_run(paths, fake, real_key, "OPENAI_BASE_URL")
    assert len(fake.served) == len(turns)  # one request per step, the last one finishes
    assert fake.served[0].api == "openai-chat"
    assert (paths.workspace / ".agent2rl" / "mini.traj.json").is_file()
    print(f"mini-swe-agent run: {time.time() - t0:.0f}s, usage {metrics['llm_usage']}")


# --------------------------------------------------------------------------------------------
# Claude Code (Anthropic messages, streamed; its own Write and Bash tools)


@pytest.mark.slow
@pytest.mark.skipif(
    shutil.which("claude", path=HOST_PATH) is None,
    reason="Claude Code is not installed (npm install -g @anthropic-ai/claude-code)",
)
def test_claude_code_trains_and_submits_through_the_proxy(tmp_path: Path) -> None:
    def call(text: str, name: str, args: dict[str, Any]) -> Turn:
        return Turn(text=text, tool_calls=[ToolCall(name, args)])

    turns = [
        call(
            "I will write a small SFT script.",
            "Write",
            {"file_path": "code/train.py", "content": TRAIN_PY},
        ),
        call(
            "Now I train and submit.",
            "Bash",
            {"command": "python code/train.py 2>&1 | tail -n 5", "description": "Train, submit"},
        ),
        call(
            "Recording the environment.",
            "Bash",
            {"command": "env > code/env.txt", "description": "Dump the environment"},
        ),
    ]
    t0 = time.time()
    paths, fake, real_key, _ = _llm_run(
        tmp_path, "claude-code", "claude-sonnet-4-5", turns, "anthropic"
    )
    metrics = _check_run(paths, fake, real_key, "ANTHROPIC_BASE_URL")
    assert len(fake.served) == len(turns) + 1  # the tool turns, then the final answer
    assert all(s.api == "anthropic" and s.stream for s in fake.served)
    assert metrics["llm_usage"]["by_model"].keys() == {"claude-sonnet-4-5"}
    print(f"claude-code run: {time.time() - t0:.0f}s, usage {metrics['llm_usage']}")


# --------------------------------------------------------------------------------------------
# Mistakes caught before anything is written


def test_llm_agent_without_its_key_is_one_line_and_writes_nothing(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    r = run_cli(
        ["run", "--task", "arith-lite", "--agent", "claude-code", "--budget", "60s"]
        + ["--runs-dir", str(runs)],
        env=_host_env(),
        timeout=120,
    )
    assert r.returncode == 2, r.stdout + r.stderr
    assert "ANTHROPIC_API_KEY" in r.stderr and "Traceback" not in r.stderr + r.stdout
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not runs.exists() or not any(runs.iterdir())


def test_driver_for_an_agent_without_llm_is_one_clear_error(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    r = run_cli(
        ["run", "--task", "arith-lite", "--agent", "reference-sft", "--budget", "60s"]
        + ["--driver", "claude-sonnet-4-5", "--runs-dir", str(runs)],
        env=_host_env(ANTHROPIC_API_KEY="sk-unused"),
        timeout=120,
    )
    assert r.returncode == 2, r.stdout + r.stderr
    assert "uses no LLM" in r.stderr and "--driver" in r.stderr
    assert "Traceback" not in r.stderr + r.stdout
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not runs.exists() or not any(runs.iterdir())
