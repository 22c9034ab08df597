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

import shutil
import time
from pathlib import Path
from typing import Any

import pytest
from support.cli import run_cli
from support.fake_provider import ToolCall, Turn
from support.llmruns import (
    HOST_PATH,
    TRAIN_PY,
    LLMRun,
    check_trained_and_submitted,
    host_env,
    llm_run,
)


def _check_run(run: LLMRun, url_var: str) -> dict:
    """The checks every LLM agent's run passes, then what these agents add: no refused or
    failed request, the grading token and model path in the agent's environment, and the
    agent's own token account equal to the proxy's; returns metrics.json."""
    record = check_trained_and_submitted(run, url_var)
    metrics, dump, agent_view = record.metrics, record.env_dump, record.agent_view
    usage = metrics["llm_usage"]
    assert usage["refused"] == 0 and usage["errors"] == 0
    assert "GRADING_TOKEN=" in dump and "MODEL_PATH=" in dump

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
    run = llm_run(tmp_path, "mini-swe-agent", "gpt-4.1-mini", turns, "openai", mode="sft-only")
    metrics = _check_run(run, "OPENAI_BASE_URL")
    assert len(run.fake.served) == len(turns)  # one request per step, the last one finishes
    assert run.fake.served[0].api == "openai-chat"
    assert (run.paths.workspace / ".agent2rl" / "mini.traj.json").is_file()
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
    run = llm_run(tmp_path, "claude-code", "claude-sonnet-4-5", turns, "anthropic")
    metrics = _check_run(run, "ANTHROPIC_BASE_URL")
    assert len(run.fake.served) == len(turns) + 1  # the tool turns, then the final answer
    assert all(s.api == "anthropic" and s.stream for s in run.fake.served)
    assert metrics["llm_usage"]["by_model"].keys() == {"claude-sonnet-4-5"}
    print(f"claude-code run: {time.time() - t0:.0f}s, usage {metrics['llm_usage']}")


# --------------------------------------------------------------------------------------------
# Mistakes caught before anything is written


def test_llm_agent_without_its_key_is_one_line_and_writes_nothing(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    r = run_cli(
        ["run", "--task", "arith-lite", "--agent", "claude-code", "--budget", "60s"]
        + ["--runs-dir", str(runs)],
        env=host_env(),
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
        env=host_env(ANTHROPIC_API_KEY="sk-unused"),
        timeout=120,
    )
    assert r.returncode == 2, r.stdout + r.stderr
    assert "uses no LLM" in r.stderr and "--driver" in r.stderr
    assert "Traceback" not in r.stderr + r.stdout
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not runs.exists() or not any(runs.iterdir())
