"""Agent log parsers on logs in each CLI's real format.

Fixtures in tests/fixtures/agent_logs/ were captured from the real CLIs (Claude Code 2.1,
Codex 0.169, Gemini CLI 0.61, OpenCode 1.18, mini-SWE-agent 2.4) driven by the scripted fake
provider (the Gemini one by a stand-in Gemini endpoint), stderr included as the harness
records it. openhands.jsonl is the log of a run of tests/e2e/test_openhands.py (openhands 1.16.0,
SDK 1.21.0, Python 3.12, in the bwrap sandbox; the grading token scrubbed), openhands_errors.jsonl
the CLI's output driven outside the sandbox into its error paths."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from support import FIXTURES

from agent2rl.agents import get_agent
from agent2rl.agents.logs import (
    PARSERS,
    Event,
    parse_log,
    read_agent_log,
    summarize_args,
    total_usage,
)
from agent2rl.metering import TokenCounts

LOGS = FIXTURES / "agent_logs"


def _parse(name: str, fmt: str) -> list[Event]:
    return parse_log((LOGS / name).read_text(), fmt)


def _kinds(events: list[Event], kind: str) -> list[Event]:
    return [e for e in events if e.kind == kind]


def test_claude_code_stream_json() -> None:
    events = _parse("claude_code.jsonl", "claude-stream-json")
    [call] = _kinds(events, "tool_call")
    assert (call.tool, call.args, call.call_id) == ("Bash", "ls", "toolu_fake_1_0")
    [result] = _kinds(events, "tool_result")
    assert result.tool == "Bash" and result.call_id == call.call_id and not result.is_error
    assert result.text == "code\ndata\nprompt.md"
    texts = [e.text for e in _kinds(events, "message")]
    assert texts == ["I will list the files.", "All done: the workspace has two files."]
    [final] = _kinds(events, "final")
    assert final.text == "All done: the workspace has two files." and not final.is_error
    # The result line's modelUsage is the session total and replaces the per-message usage.
    usage = total_usage(events)
    assert (usage.input, usage.output) == (167616, 159)
    assert not _kinds(events, "error")


def test_claude_code_killed_before_its_result_line_counts_each_message_once() -> None:
    lines = (LOGS / "claude_code.jsonl").read_text().splitlines()
    # No result line (killed at the deadline), a torn last line and stderr noise.
    text = "\n".join(["node: warning", *lines[:-1], lines[-1][:57]])
    events = parse_log(text, "claude-stream-json")
    assert not _kinds(events, "final")
    usage = total_usage(events)
    assert usage.input == 23834 + 24097  # two API messages, the first logged twice


def test_claude_code_api_error() -> None:
    events = _parse("claude_code_error.jsonl", "claude-stream-json")
    [error] = _kinds(events, "error")
    assert "Unable to connect to API" in error.text
    [final] = _kinds(events, "final")
    assert final.is_error


def test_claude_code_root_refusal_on_stderr_is_an_error() -> None:
    text = "--dangerously-skip-permissions cannot be used with root/sudo privileges\n"
    [error] = parse_log(text, "claude-stream-json")
    assert error.kind == "error" and "root" in error.text


def test_codex_exec_jsonl() -> None:
    events = _parse("codex.jsonl", "codex-jsonl")
    [call] = _kinds(events, "tool_call")
    assert (call.tool, call.args, call.call_id) == ("shell", "/bin/bash -lc ls", "item_2")
    [result] = _kinds(events, "tool_result")
    assert result.text == "code\ndata\nprompt.md" and not result.is_error
    assert [e.text for e in _kinds(events, "message")] == ["Listing.", "All done: two files."]
    usage = total_usage(events)
    assert (usage.input, usage.output, usage.cached) == (28155, 49, 0)
    [final] = _kinds(events, "final")
    assert final.text == "All done: two files."
    # Codex's warning item is an error event; its stderr banner lines are not.
    [warning] = _kinds(events, "error")
    assert "Model metadata" in warning.text


def test_codex_reconnect_errors_and_failed_commands() -> None:
    events = _parse("codex_error.jsonl", "codex-jsonl")
    assert sum("Reconnecting" in e.text for e in _kinds(events, "error")) == 5
    assert not _kinds(events, "final")
    lines = [
        {"type": "item.completed", "item": {"id": "i1", "type": "command_execution",
         "command": "bash -lc 'python train.py'", "aggregated_output": "Traceback ...",
         "exit_code": 1, "status": "failed"}},
        {"type": "item.completed", "item": {"id": "i2", "type": "file_change",
         "changes": [{"path": "code/train.py", "kind": "add"}], "status": "completed"}},
        {"type": "turn.failed", "error": {"message": "stream disconnected"}},
    ]  # fmt: skip
    events = parse_log("\n".join(json.dumps(x) for x in lines), "codex-jsonl")
    calls = _kinds(events, "tool_call")
    assert [c.tool for c in calls] == ["shell", "apply_patch"]
    assert calls[1].args == "add:code/train.py"
    assert [r.is_error for r in _kinds(events, "tool_result")] == [True, False]
    assert _kinds(events, "final")[0].is_error


def test_gemini_stream_json() -> None:
    events = _parse("gemini.jsonl", "gemini-stream-json")
    [user, first, last] = _kinds(events, "message")
    assert (user.role, user.text) == ("user", "List the files")
    assert (first.text, last.text) == ("Listing files.", "All done: two files.")
    [call] = _kinds(events, "tool_call")
    assert (call.tool, call.args) == ("run_shell_command", "ls")
    [result] = _kinds(events, "tool_result")
    assert result.tool == "run_shell_command" and result.text == "a.txt"
    usage = total_usage(events)
    assert (usage.input, usage.output) == (240, 24)
    assert _kinds(events, "final")[0].text == "All done: two files."
    # "YOLO mode is enabled." and other stderr notices are not errors.
    assert not _kinds(events, "error")


def test_gemini_deltas_join_and_errors() -> None:
    lines = [
        {"type": "message", "role": "assistant", "content": "Hel", "delta": True},
        {"type": "message", "role": "assistant", "content": "lo", "delta": True},
        {"type": "tool_use", "tool_name": "write_file", "tool_id": "t1",
         "parameters": {"file_path": "code/a.py", "content": "x"}},
        {"type": "tool_result", "tool_id": "t1", "status": "error",
         "error": {"type": "INVALID", "message": "path outside workspace"}},
        {"type": "error", "severity": "warning", "message": "Loop detected, stopping execution"},
        {"type": "result", "status": "error", "error": {"type": "Error", "message": "quota"},
         "stats": {"input_tokens": 10, "output_tokens": 2, "cached": 4}},
    ]  # fmt: skip
    events = parse_log("\n".join(json.dumps(x) for x in lines), "gemini-stream-json")
    assert _kinds(events, "message")[0].text == "Hello"
    assert _kinds(events, "tool_call")[0].args == "code/a.py"
    [result] = _kinds(events, "tool_result")
    assert result.is_error and result.text == "path outside workspace"
    assert [e.text for e in _kinds(events, "error")] == [
        "Loop detected, stopping execution",
        "quota",
    ]
    assert _kinds(events, "final")[0].is_error
    assert total_usage(events).cached == 4


def test_opencode_json() -> None:
    events = _parse("opencode.jsonl", "opencode-json")
    calls = _kinds(events, "tool_call")
    assert [(c.tool, c.args) for c in calls] == [("bash", "ls")] * 3
    results = _kinds(events, "tool_result")
    assert [r.call_id for r in results] == [c.call_id for c in calls]
    assert "opencode.json" in results[0].text
    usage = total_usage(events)  # four steps, each its own tokens
    assert (usage.input, usage.output) == (5785 + 5814 + 5842 + 5870, 21 * 3 + 6)
    [final] = _kinds(events, "final")
    assert final.text == "All done: two files."


def test_opencode_api_error() -> None:
    [error] = _parse("opencode_error.jsonl", "opencode-json")
    assert error.kind == "error" and error.text.startswith("Cannot connect to API")


def test_openhands_headless_json() -> None:
    events = _parse("openhands.jsonl", "openhands-jsonl")
    messages = _kinds(events, "message")
    assert messages[0].role == "user" and "Starting this session" in messages[0].text
    assert [m.text for m in messages[1:]] == [
        "I will write a small SFT script.",
        "Now I train and submit.",
        "Recording the environment.",
        "Finished.",
    ]
    calls = _kinds(events, "tool_call")
    assert [c.tool for c in calls] == ["file_editor", "terminal", "terminal"]
    assert calls[0].args.startswith("create /") and calls[0].args.endswith("/code/train.py")
    assert calls[1].args == "python code/train.py 2>&1 | tail -n 5"
    results = _kinds(events, "tool_result")
    assert [r.call_id for r in results] == [c.call_id for c in calls]
    assert not any(r.is_error for r in results)
    assert "step 1 loss" in results[1].text and '"status":"graded"' in results[1].text
    # Rich's wrapped log records (the public-skills clone the sandbox refuses) are one error
    # each with the whole message, not one per wrapped fragment.
    errors = _kinds(events, "error")
    assert len(errors) == 4
    for error in errors:
        assert error.text.startswith("ERROR Git command failed: git clone --depth 1 --branch main")
    # `--json` prints no token counts: the metering proxy's are the run's record.
    assert total_usage(events) == TokenCounts()
    [final] = _kinds(events, "final")
    assert final.text == "Trained, submitted."


def test_openhands_pipeline_log_starting_with_a_bracket() -> None:
    """openhands-paper's log starts with the stage runner's ``[stages] ...`` line (and a
    plain log may start with a Rich record's ``[date time]``): it is JSONL all the same, not a
    V0 JSON list (read as one, the whole log parsed to nothing)."""
    log = (LOGS / "openhands.jsonl").read_text()
    staged = "[stages] stage 1/30: openhands\n" + log + "[stages] stage 2/30: openhands\n"
    assert parse_log(staged, "openhands-jsonl") == parse_log(log, "openhands-jsonl")
    tools = [e.tool for e in parse_log(staged, "openhands-jsonl") if e.kind == "tool_call"]
    assert tools == ["file_editor", "terminal", "terminal"]


def test_openhands_error_paths() -> None:
    events = _parse("openhands_errors.jsonl", "openhands-jsonl")
    calls = _kinds(events, "tool_call")
    assert [(c.tool, c.args) for c in calls] == [
        ("terminal", "ls"),
        ("file_editor", "view /tmp/ohcap/ws/missing.py"),
        ("terminal", "python missing.py"),
    ]
    # The call without its security_risk is refused: an AgentErrorEvent, no observation.
    errors = [e.text for e in _kinds(events, "error")]
    assert sum(t.startswith("ERROR Git command failed") for t in errors) == 4
    assert any("Failed to provide security_risk field in tool 'terminal'" in t for t in errors)
    results = _kinds(events, "tool_result")
    assert [r.call_id for r in results] == [c.call_id for c in calls[1:]]
    # A file tool error, and a command that exited 2: both failed tool results.
    assert [r.is_error for r in results] == [True, True]
    assert "does not exist" in results[0].text and "Errno 2" in results[1].text
    [final] = _kinds(events, "final")
    assert final.text == "Checked: missing.py is absent."


def test_openhands_v0_trajectory() -> None:
    trajectory = [
        {"id": 1, "source": "agent", "action": "run", "args": {"command": "nvidia-smi"}},
        {"id": 2, "cause": 1, "observation": "run", "content": "not found",
         "extras": {"metadata": {"exit_code": 127}}},
        {"id": 3, "source": "agent", "action": "message", "args": {"content": "Training."},
         "llm_metrics": {"accumulated_token_usage": {"prompt_tokens": 90,
                                                     "completion_tokens": 9}}},
        {"id": 4, "source": "agent", "action": "finish", "args": {"final_thought": "Done."}},
    ]  # fmt: skip
    events = parse_log(json.dumps(trajectory), "openhands-jsonl")
    assert _kinds(events, "tool_call")[0].args == "nvidia-smi"
    assert _kinds(events, "tool_result")[0].is_error
    assert total_usage(events).input == 90
    assert _kinds(events, "final")[0].text == "Done."


def test_mini_swe_agent_trajectory() -> None:
    events = _parse("mini.traj.json", "mini-swe-agent")
    calls = _kinds(events, "tool_call")
    assert [c.args for c in calls] == ["ls", "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"]
    results = _kinds(events, "tool_result")
    assert results[0].text == "code\ndata\nprompt.md"
    assert not any(r.is_error for r in results)  # the submit command is never executed
    usage = total_usage(events)
    assert (usage.input, usage.output) == (106 + 156, 16 + 15)
    [final] = _kinds(events, "final")
    assert final.text == "Submitted" and not final.is_error


def test_mini_swe_agent_text_based_and_limits() -> None:
    trajectory = {
        "info": {"exit_status": "LimitsExceeded"},
        "messages": [
            {"role": "system", "content": "sys"},
            {"role": "user", "content": "task"},
            {"role": "assistant", "content": "THOUGHT\n```bash\npython train.py\n```"},
            {"role": "user", "content": "<returncode>1</returncode>\n<output>boom</output>"},
            {
                "role": "exit",
                "content": "LimitsExceeded",
                "extra": {"exit_status": "LimitsExceeded"},
            },
        ],
    }
    events = parse_log(json.dumps(trajectory), "mini-swe-agent")
    assert _kinds(events, "tool_call")[0].args == "python train.py"
    assert _kinds(events, "tool_result")[0].is_error
    assert _kinds(events, "final")[0].is_error and _kinds(events, "error")


def test_plain_text_fallback() -> None:
    text = "Loading model...\nTraceback (most recent call last):\nValueError: bad shape\n\nok\n"
    events = parse_log(text, "text")
    assert [e.kind for e in events] == ["message", "error", "error", "message"]
    assert parse_log("a line", "no-such-format")[0].text == "a line"


JUNK = [
    "",
    "\n\n\n",
    "not json at all",
    "{",
    '{"type": "assistant", "message": "a string"}',
    '{"type": "assistant", "message": {"content": "str", "usage": [1]}}',
    '{"type": "user", "message": {"content": [1, null, {"type": "tool_result"}]}}',
    '{"type": "result", "modelUsage": [1, 2], "usage": "x", "result": 5}',
    '{"type": "item.completed", "item": 5}',
    '{"type": "item.completed", "item": {"type": "command_execution", "exit_code": "x"}}',
    '{"type": "turn.completed", "usage": {"input_tokens": "many", "output_tokens": -3}}',
    '{"type": "tool_use", "part": {"state": []}}',
    '{"type": "step_finish", "part": {"tokens": {"cache": 7}}}',
    '{"type": "result", "stats": {"input_tokens": null}}',
    '{"kind": "ActionEvent", "tool_call": "x", "action": 3, "thought": "t"}',
    '{"kind": "ConversationStateUpdateEvent", "key": "full_state", "value": {"stats": 1}}',
    '{"messages": [1, {"role": "assistant", "tool_calls": [3, {"function": 4}]}]}',
    '{"messages": "x"}',
    "[1, 2, {]",
    "[" * 5000,
    '{"a": ' * 3000,
    "\x00\xff\ufffd binary",
]


@pytest.mark.parametrize("fmt", sorted(PARSERS))
@pytest.mark.parametrize("junk", JUNK)
def test_parsers_never_raise_on_junk(fmt: str, junk: str) -> None:
    events = PARSERS[fmt](junk)  # the parser itself, not parse_log's safety net
    assert all(isinstance(e, Event) for e in events)
    usage = total_usage(events)
    assert usage.input >= 0 and usage.output >= 0


@pytest.mark.parametrize(
    ("name", "fmt"),
    [
        ("claude_code.jsonl", "claude-stream-json"),
        ("codex.jsonl", "codex-jsonl"),
        ("gemini.jsonl", "gemini-stream-json"),
        ("opencode.jsonl", "opencode-json"),
        ("openhands.jsonl", "openhands-jsonl"),
        ("openhands_errors.jsonl", "openhands-jsonl"),
        ("mini.traj.json", "mini-swe-agent"),
    ],
)
def test_parsers_survive_logs_cut_anywhere(name: str, fmt: str) -> None:
    text = (LOGS / name).read_text()
    for cut in range(0, len(text), max(1, len(text) // 40)):
        for parser in PARSERS.values():  # the right parser and every wrong one
            parser(text[:cut])


def test_read_agent_log_prefers_the_structured_log(tmp_path: Path) -> None:
    spec = get_agent("mini-swe-agent")
    ws = tmp_path / "ws"
    stdout = tmp_path / "agent.log"
    stdout.write_text("mini-swe-agent (step 1, $0.00):\nValueError: oops\n")
    # Before the trajectory exists, stdout is read as plain text.
    log = read_agent_log(spec, stdout, ws)
    assert log.source == stdout and log.summary()["errors"] == 1
    (ws / ".agent2rl").mkdir(parents=True)
    (ws / spec.log_file).write_text((LOGS / "mini.traj.json").read_text())
    log = read_agent_log(spec, stdout, ws)
    assert log.source == ws / spec.log_file
    summary = log.summary()
    assert summary["tool_calls"] == 2 and summary["tools"] == {"bash": 2}
    assert summary["final"] == "Submitted" and summary["tool_errors"] == 0
    assert summary["input_tokens"] == 262 and summary["output_tokens"] == 31


def test_read_agent_log_of_a_missing_file_is_empty(tmp_path: Path) -> None:
    log = read_agent_log(get_agent("claude-code"), tmp_path / "none.log")
    assert log.events == [] and log.usage.total == 0
    assert log.summary()["final"] == ""


def test_read_agent_log_with_the_spec_format(tmp_path: Path) -> None:
    path = tmp_path / "agent.log"
    path.write_bytes((LOGS / "codex.jsonl").read_bytes() + b"\xff\xfe torn")
    log = read_agent_log(get_agent("codex"), path, tmp_path)
    assert log.usage.input == 28155 and log.summary()["tools"] == {"shell": 1}


def test_summarize_args() -> None:
    assert summarize_args({"command": ["bash", "-lc", "ls  -la"]}) == "bash -lc ls -la"
    assert summarize_args('{"file_path": "/ws/code/a.py", "content": "x"}') == "/ws/code/a.py"
    assert summarize_args({"todos": [1, 2]}) == '{"todos":[1,2]}'
    assert summarize_args("not json") == "not json"
    long = summarize_args({"command": "x" * 1000})
    assert len(long) == 160 and long.endswith("…")


def test_total_usage_cumulative_replaces_earlier() -> None:
    events = [
        Event("usage", tokens=TokenCounts(input=10, output=1)),
        Event("usage", tokens=TokenCounts(input=100, output=10), cumulative=True),
        Event("usage", tokens=TokenCounts(input=5, output=2, cached=3)),
    ]
    usage = total_usage(events)
    assert (usage.input, usage.output, usage.cached) == (105, 12, 3)
    assert usage.total == 117


def test_one_parser_table_over_the_format_modules() -> None:
    # Each CLI's parser lives in its own module under agents/logs/; PARSERS merges them.
    assert set(PARSERS) == {
        "text",
        "claude-stream-json",
        "codex-jsonl",
        "gemini-stream-json",
        "opencode-json",
        "openhands-jsonl",
        "mini-swe-agent",
    }
    for fmt, parser in PARSERS.items():
        module = sys.modules[parser.__module__]
        assert module.__name__.startswith("agent2rl.agents.logs.") and module.LOG_FORMAT == fmt
