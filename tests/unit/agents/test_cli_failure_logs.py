"""The CLI's own words when it could not start: ``last_error`` in the agent log summary.

The fixtures are the agent logs of real runs (tests/e2e/test_llm_agents.py, CLI versions in
the specs' ``tested_versions``): Codex, Gemini CLI and OpenCode whose provider refused the key
(HTTP 401, relayed by the metering proxy), and Codex given a flag it does not know. The
report shows this text for a run that ended as an infrastructure failure."""

from __future__ import annotations

import pytest
from support import FIXTURES

from agent2rl.agents import get_agent
from agent2rl.agents.logs import parse_log
from agent2rl.agents.logs.base import AgentLog, total_usage

LOGS = FIXTURES / "agent_logs"
PROVIDER_401 = "Incorrect API key provided to the fake provider."


def _summary(name: str, agent: str) -> dict:
    events = parse_log((LOGS / name).read_text(), get_agent(agent).log_format)
    return AgentLog(events, total_usage(events)).summary()


@pytest.mark.parametrize(
    ("name", "agent"),
    [
        ("codex_401.log", "codex"),
        ("gemini_401.log", "gemini-cli"),
        ("opencode_401.log", "opencode"),
    ],
)
def test_a_refused_key_is_the_last_error_in_the_cli_s_words(name: str, agent: str) -> None:
    summary = _summary(name, agent)
    assert PROVIDER_401 in summary["last_error"], summary
    assert summary["tool_calls"] == 0 and summary["output_tokens"] == 0


def test_an_unknown_flag_is_the_last_error() -> None:
    summary = _summary("codex_bad_flag.log", "codex")
    assert "unexpected argument '--no-such-flag'" in summary["last_error"], summary


def test_a_run_without_errors_has_no_last_error() -> None:
    summary = _summary("claude_code.jsonl", "claude-code")
    assert summary["errors"] == 0 and summary["last_error"] == ""
