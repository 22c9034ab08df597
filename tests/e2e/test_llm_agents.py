"""Whole runs of real LLM agent CLIs (mini-swe-agent, Claude Code, Codex CLI, Gemini CLI,
OpenCode) driven by the scripted fake provider, a real HTTP server on loopback standing in for
the paid API and speaking the API each CLI really uses (Anthropic messages, OpenAI Responses,
Gemini streamGenerateContent with SSE, chat completions for mini-swe-agent). Each CLI is
installed from npm by ``.ci/run`` at the version range its spec declares tested; a test
skips when its CLI is missing.

The chain under test is the production one: ``agent2rl run`` (a subprocess) starts the metering
proxy with the host's real key and the fake provider as its upstream (the host's
``*_BASE_URL``), launches the real agent binary in the sandbox pointed at the proxy, and the
scripted conversation makes the agent write ``code/train.py`` (real optimizer steps on the
tiny model, a save and an HTTP submission), run it, dump its environment and finish. The run's
report must then show the graded submission, its code snapshot, token totals equal to what
the provider served, the CLI's own log parsed (tool calls, its token account), and an agent
environment without the real key or any other host secret. A CLI that cannot start (its
key refused, a flag it does not know) must end as an infrastructure failure with its own
message in the report.
"""

from __future__ import annotations

import json
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

from agent2rl.agents.doctor import cli_version_record
from agent2rl.agents.spec import get_agent
from agent2rl.orchestration.infra import infrastructure_failure
from agent2rl.rundir import RunInfo


def _check_run(run: LLMRun, url_var: str | None, unlogged: tuple[int, int] = (0, 0)) -> dict:
    """The checks every LLM agent's run passes, then what these agents add: no refused or
    failed request, the grading token and model path in the agent's environment, and the
    agent's own token account equal to the proxy's, less ``unlogged`` (input, output) tokens
    of requests the CLI does not log (OpenCode's session titles); returns metrics.json."""
    record = check_trained_and_submitted(run, url_var)
    metrics, dump, agent_view = record.metrics, record.env_dump, record.agent_view
    usage = metrics["llm_usage"]
    assert usage["refused"] == 0 and usage["errors"] == 0
    assert "GRADING_TOKEN=" in dump and "MODEL_PATH=" in dump

    assert "error" not in agent_view, agent_view
    assert agent_view["log"]["tool_calls"] >= 3, agent_view
    # The agent's own account of its tokens agrees with the proxy's.
    logged_in, logged_out = (
        usage["input_tokens"] - unlogged[0],
        usage["output_tokens"] - unlogged[1],
    )
    assert agent_view["log"]["input_tokens"] == logged_in, agent_view
    assert agent_view["log"]["output_tokens"] == logged_out, agent_view
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
# Codex CLI (OpenAI Responses API, streamed; its exec_command tool, apply_patch for files)


def _apply_patch_add(path: str, text: str) -> str:
    """A shell command that Codex runs as its own apply_patch file tool: add ``path``."""
    body = "".join(f"+{line}\n" for line in text.splitlines())
    return (
        f"apply_patch <<'PATCH'\n*** Begin Patch\n*** Add File: {path}\n{body}*** End Patch\nPATCH"
    )


# Codex's exec_command yields after at most 30 s (a longer command keeps running in its
# session): the training runs with its output in a file, and each wait turn polls it for up
# to 27 s, so a slow machine gets more time without a turn that hangs.
_WAIT_SUBMITTED = (
    "for i in $(seq 54); do grep -q '^submitted:' code/train.log && break; sleep 0.5; done; "
    "tail -n 5 code/train.log"
)


@pytest.mark.slow
@pytest.mark.skipif(
    shutil.which("codex", path=HOST_PATH) is None,
    reason="Codex CLI is not installed (npm install -g @openai/codex)",
)
def test_codex_trains_and_submits_through_the_proxy(tmp_path: Path) -> None:
    def sh(text: str, cmd: str) -> Turn:
        args = {"cmd": cmd, "yield_time_ms": 30000, "login": False}
        return Turn(text=text, tool_calls=[ToolCall("exec_command", args)])

    turns = [
        sh("I will write a small SFT script.", _apply_patch_add("code/train.py", TRAIN_PY)),
        sh(
            "Now I train and submit.",
            "python code/train.py > code/train.log 2>&1; tail -n 5 code/train.log",
        ),
        sh("Waiting for the submission.", _WAIT_SUBMITTED),
        sh("Still waiting for the submission.", _WAIT_SUBMITTED),
        sh("Recording the environment.", "env > code/env.txt"),
    ]
    t0 = time.time()
    run = llm_run(tmp_path, "codex", "gpt-5", turns, "openai")
    # Codex takes its provider's URL from -c flags, not from the environment.
    metrics = _check_run(run, None)
    assert len(run.fake.served) == len(turns) + 1  # the tool turns, then the final answer
    assert all(s.api == "openai-responses" and s.stream for s in run.fake.served)
    # Codex wrote the script with its own file tool (apply_patch), not through a shell.
    assert (run.paths.code / "train.py").read_text() == TRAIN_PY
    _check_log(run, {"apply_patch": 1, "shell": 4}, len(turns) + 1)
    _check_version(run, "codex")
    print(f"codex run: {time.time() - t0:.0f}s, usage {metrics['llm_usage']}")


# --------------------------------------------------------------------------------------------
# Gemini CLI (Gemini streamGenerateContent?alt=sse; its write_file and run_shell_command)


@pytest.mark.slow
@pytest.mark.skipif(
    shutil.which("gemini", path=HOST_PATH) is None,
    reason="Gemini CLI is not installed (npm install -g @google/gemini-cli)",
)
def test_gemini_cli_trains_and_submits_through_the_proxy(tmp_path: Path) -> None:
    def call(text: str, name: str, args: dict[str, Any]) -> Turn:
        return Turn(text=text, tool_calls=[ToolCall(name, args)])

    turns = [
        call(
            "I will write a small SFT script.",
            "write_file",
            {"file_path": "code/train.py", "content": TRAIN_PY},
        ),
        call(
            "Now I train and submit.",
            "run_shell_command",
            {"command": "python code/train.py 2>&1 | tail -n 5", "description": "Train, submit"},
        ),
        call(
            "Recording the environment.",
            "run_shell_command",
            {"command": "env > code/env.txt", "description": "Dump the environment"},
        ),
    ]
    t0 = time.time()
    run = llm_run(tmp_path, "gemini-cli", "gemini-2.5-pro", turns, "gemini")
    metrics = _check_run(run, "GOOGLE_GEMINI_BASE_URL")
    assert len(run.fake.served) == len(turns) + 1
    assert all(s.api == "gemini" and s.stream and s.query == "alt=sse" for s in run.fake.served)
    assert (run.paths.code / "train.py").read_text() == TRAIN_PY
    _check_log(run, {"write_file": 1, "run_shell_command": 2}, len(turns) + 1)
    _check_version(run, "gemini-cli")
    print(f"gemini-cli run: {time.time() - t0:.0f}s, usage {metrics['llm_usage']}")


# --------------------------------------------------------------------------------------------
# OpenCode (its anthropic provider moved to the proxy: Anthropic messages, streamed; its own
# write and bash tools)


def _title_request(body: dict[str, Any]) -> Turn | None:
    """OpenCode asks its small model for a session title (a request without tools) besides
    the agent's turns: answer it with a title, so the script's turns go to the agent."""
    return None if body.get("tools") else Turn(text="Train the tiny model")


@pytest.mark.slow
@pytest.mark.skipif(
    shutil.which("opencode", path=HOST_PATH) is None,
    reason="OpenCode is not installed (npm install -g opencode-ai)",
)
def test_opencode_trains_and_submits_through_the_proxy(tmp_path: Path) -> None:
    def call(text: str, name: str, args: dict[str, Any]) -> Turn:
        return Turn(text=text, tool_calls=[ToolCall(name, args)])

    turns = [
        call(
            "I will write a small SFT script.",
            "write",
            {"filePath": "code/train.py", "content": TRAIN_PY},
        ),
        call(
            "Now I train and submit.",
            "bash",
            {"command": "python code/train.py 2>&1 | tail -n 5", "description": "Train, submit"},
        ),
        call(
            "Recording the environment.",
            "bash",
            {"command": "env > code/env.txt", "description": "Dump the environment"},
        ),
    ]
    t0 = time.time()
    run = llm_run(
        tmp_path, "opencode", "claude-sonnet-4-5", turns, "anthropic", responder=_title_request
    )
    titles = [s for s in run.fake.served if not s.request.get("tools")]
    unlogged = (sum(s.input_tokens for s in titles), sum(s.output_tokens for s in titles))
    # OpenCode's provider URL is in its config file (checked below), not in the environment.
    metrics = _check_run(run, None, unlogged)
    assert len(run.fake.served) - len(titles) == len(turns) + 1
    assert len(titles) <= 1
    # Every request was for the run's driver (the title too: small_model is the driver).
    assert metrics["llm_usage"]["by_model"].keys() == {"claude-sonnet-4-5"}
    config = json.loads((run.paths.workspace / ".agent2rl" / "opencode.json").read_text())
    base = config["provider"]["anthropic"]["options"]["baseURL"]
    assert base.startswith("http://127.0.0.1:") and f":{run.fake.port}/" not in base
    _check_log(run, {"write": 1, "bash": 2}, len(turns) + 1)
    assert all(s.api == "anthropic" and s.stream for s in run.fake.served)
    assert (run.paths.code / "train.py").read_text() == TRAIN_PY
    _check_version(run, "opencode")
    print(f"opencode run: {time.time() - t0:.0f}s, usage {metrics['llm_usage']}")


def _check_log(run: LLMRun, tools: dict[str, int], turns: int) -> None:
    """The CLI's own log, parsed into the report (record/agent.json, metrics.json): each of
    its tools called as scripted, one assistant message per turn, the scripted final text."""
    log = json.loads((run.paths.record / "agent.json").read_text())["log"]
    assert log["tools"] == tools and log["tool_errors"] == 0, log
    assert log["messages"] == turns and log["final"] == "All done.", log
    metrics = json.loads((run.paths.report / "metrics.json").read_text())
    assert metrics["agent_log"]["tools"] == tools


def _check_version(run: LLMRun, agent: str) -> None:
    """The CLI that ran is inside the range its spec declares tested (what `agents doctor`
    reports), and where the run recorded the version that ran (the agent log summary's
    ``cli`` in record/agent.json and metrics.json: the orchestration's hook), that record
    agrees."""
    record = cli_version_record(get_agent(agent), host_env())
    assert record["version"] and record["in_tested_range"] is True, record
    view = json.loads((run.paths.record / "agent.json").read_text())
    if "cli" in view["log"]:
        assert view["log"]["cli"] == record, view
        metrics = json.loads((run.paths.report / "metrics.json").read_text())
        assert metrics["agent_log"]["cli"] == record


# --------------------------------------------------------------------------------------------
# A CLI that cannot start is an infrastructure failure, with the CLI's own words

# agent, driver, host API, the CLI's binary
_CLIS = {
    "codex": ("gpt-5", "openai", "codex"),
    "gemini-cli": ("gemini-2.5-pro", "gemini", "gemini"),
    "opencode": ("claude-sonnet-4-5", "anthropic", "opencode"),
}


@pytest.mark.slow
@pytest.mark.parametrize("agent", sorted(_CLIS))
def test_cli_whose_key_the_provider_refuses_is_an_infrastructure_failure(
    agent: str, tmp_path: Path
) -> None:
    """The provider answers 401 (a revoked key): the real CLI exits at once, the run ends
    ``agent_error`` classified as an infrastructure failure (H6's study classifier, from
    the run directory alone), and the CLI's own message is in the report's agent log."""
    driver, api, binary = _CLIS[agent]
    if shutil.which(binary, path=HOST_PATH) is None:
        pytest.skip(f"{agent} is not installed ({get_agent(agent).install})")
    t0 = time.time()
    run = llm_run(tmp_path, agent, driver, [], api, expect_rc=None, refuse_key=True)
    info = RunInfo.load(run.paths)
    assert info.status == "agent_error", (info.status, run.paths.agent_log.read_text()[-3000:])
    assert run.fake.served == []  # refused before any answer: nothing was generated
    assert any(r.startswith("POST ") for r in run.fake.received)
    why = infrastructure_failure(run.paths.root)
    assert why is not None and "HTTP 401" in why, why
    metrics = json.loads((run.paths.report / "metrics.json").read_text())
    assert metrics["valid_submissions"] == 0
    view = json.loads((run.paths.record / "agent.json").read_text())
    # The CLI's own words for why it stopped (the provider's message, relayed by the proxy).
    assert "Incorrect API key provided to the fake provider" in view["log"]["last_error"], view
    print(f"{agent} refused key: {time.time() - t0:.0f}s, {why}")


@pytest.mark.slow
def test_cli_given_a_flag_it_does_not_know_is_an_infrastructure_failure(tmp_path: Path) -> None:
    """An adapter whose flag the installed CLI no longer accepts (a CLI update): the run
    ends at once as an infrastructure failure, with the CLI's usage error in its log."""
    if shutil.which("codex", path=HOST_PATH) is None:
        pytest.skip("Codex CLI is not installed")
    spec = get_agent("codex")
    assert spec.source is not None
    text = spec.source.read_text().replace('"--json",', '"--json", "--no-such-flag",', 1)
    custom = tmp_path / "codex-newflag.toml"
    custom.write_text(text.replace('name = "codex"', 'name = "codex-newflag"', 1))
    run = llm_run(tmp_path, str(custom), "gpt-5", [], "openai", expect_rc=None)
    info = RunInfo.load(run.paths)
    assert info.status == "agent_error" and info.agent_exit_code == 2, info
    assert run.fake.received == []  # it never reached the provider
    why = infrastructure_failure(run.paths.root)
    assert why is not None and "before any LLM request" in why, why
    assert "--no-such-flag" in run.paths.agent_log.read_text()


@pytest.mark.slow
def test_cli_that_is_not_installed_is_an_infrastructure_failure(tmp_path: Path) -> None:
    """An agent whose binary is not on PATH: the sandbox cannot execute it (status 127), and
    the run ends at once as an infrastructure failure, never reaching the provider."""
    spec = get_agent("codex")
    assert spec.source is not None
    text = spec.source.read_text().replace('"codex", "exec"', '"codex-not-installed", "exec"', 1)
    custom = tmp_path / "codex-missing.toml"
    custom.write_text(text.replace('name = "codex"', 'name = "codex-missing"', 1))
    run = llm_run(tmp_path, str(custom), "gpt-5", [], "openai", expect_rc=None)
    info = RunInfo.load(run.paths)
    assert info.status == "agent_error" and info.agent_exit_code == 127, info
    assert run.fake.received == []
    why = infrastructure_failure(run.paths.root)
    assert why is not None and "could not be executed" in why, why
    # the run's own error (its report's status line) says so too, apart from an agent's error
    assert info.error and info.error.startswith("infrastructure failure: "), info.error
    assert "infrastructure failure" in (run.paths.report / "report.md").read_text()


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
