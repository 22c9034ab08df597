"""OpenHands: ``openhands --headless --json`` (openhands-sdk events, one ``model_dump`` a
line), or a V0 trajectory (openhands-ai < 1.0, as JSONL or one JSON list)::

    {"kind":"MessageEvent","source":"agent"|"user","llm_message":{"role":..,"content":[{"type":
      "text","text":..}]}}
    {"kind":"ActionEvent","thought":[{"text":..}],"tool_name":"terminal","tool_call_id":..,
      "tool_call":{"name":..,"arguments":"{json}"},"action":{"kind":..,"command":..}}
    {"kind":"ObservationEvent","tool_name":..,"tool_call_id":..,"observation":{"content":[{
      "type":"text","text":..}],"is_error":false}}
    {"kind":"AgentErrorEvent","error":..} {"kind":"ConversationErrorEvent","code":..,
      "detail":..}
    {"kind":"ConversationStateUpdateEvent","key":"stats","value":{"usage_to_metrics":{"agent":
      {"accumulated_token_usage":{"prompt_tokens":..,"completion_tokens":..,
      "cache_read_tokens":..}}}}}
    V0: {"action":"run","args":{"command":..}},
      {"observation":"run","content":..,"extras":{"metadata":{"exit_code":..}}},
      {"action":"message"|"finish",...}, "llm_metrics":{"accumulated_token_usage":{..}}

Between the events, the CLI's own log records come as Rich prints them: a first line
``[11/25/26 17:24:32] ERROR    Git command failed: git clone ...     utils.py:48`` and the
message's rest on indented continuation lines (wrapped at the terminal's width). Each record
is read as one line, so that an error is one error event with its whole message (e.g. the
public-skills clone that a sandbox without GitHub refuses), not one per wrapped fragment.
``--json`` prints no token counts: a 1.x log has no ``usage`` events (the metering proxy's
count is the run's record).
"""

from __future__ import annotations

import json
import re
from contextlib import suppress
from typing import Any

from agent2rl.agents.logs.base import (
    ARGS_LIMIT,
    Collector,
    Event,
    as_dict,
    json_lines,
    read_tokens,
    short,
    summarize_args,
    tool_output,
)
from agent2rl.metering.usage import TokenCounts

LOG_FORMAT = "openhands-jsonl"

# A Rich log record's first line: "[date time] LEVEL    message ...  source.py:123"
_RICH_RECORD = re.compile(r"^\[\d\d/\d\d/\d\d \d\d:\d\d:\d\d\] +([A-Z]+) +")
_RICH_SOURCE = re.compile(r"\s+[\w.-]+\.py:\d+\s*$")


def _join_fragments(level: str, fragments: list[str]) -> str:
    """One record's line, ``LEVEL message``. Rich wraps at spaces, and folds a word longer
    than the column across lines: a fragment with no space that fills the widest column is
    such a piece, joined to the next without a space."""
    width = max(len(f) for f in fragments)
    message = fragments[0]
    for prev, frag in zip(fragments, fragments[1:], strict=False):
        folded = len(prev) == width and " " not in prev
        message += ("" if folded else " ") + frag
    return f"{level} {message}"


def _join_rich_records(text: str) -> str:
    """``text`` with each Rich log record on one line, ``LEVEL message`` (the timestamp and
    Rich's ``file.py:N`` source column dropped, so that an ``ERROR`` record reads as an error
    line): its indented continuation lines, the wrapped message, are appended to the first.
    A record ends at a blank line or at a line that is not indented (a JSON event, another
    record)."""
    out: list[str] = []
    level, fragments = "", []
    for line in text.splitlines():
        head = _RICH_RECORD.match(line)
        if fragments and not head and line[:1].isspace() and line.strip():
            fragments.append(line.strip())
            continue
        if fragments:
            out.append(_join_fragments(level, fragments))
            fragments = []
        if head:
            level = head.group(1)
            fragments = [_RICH_SOURCE.sub("", line[head.end() :]).rstrip()]
        else:
            out.append(line)
    if fragments:
        out.append(_join_fragments(level, fragments))
    return "\n".join(out)


# The file tools: their ``command`` is a sub-command (view, create, str_replace, ...)
_EDITORS = ("file_editor", "str_replace_editor")


def _editor_args(obj: dict[str, Any]) -> str:
    """A file tool call's summary, ``<command> <path>`` (e.g. ``create /ws/code/train.py``),
    from the parsed action or, failing that, the raw call's JSON arguments."""
    args = as_dict(obj.get("action"))
    if not args.get("path"):
        try:
            args = as_dict(json.loads(str(as_dict(obj.get("tool_call")).get("arguments"))))
        except (json.JSONDecodeError, ValueError, RecursionError):
            args = {}
    return short(f"{args.get('command', '')} {args.get('path', '')}".strip(), ARGS_LIMIT)


def _openhands_usage(obj: dict[str, Any]) -> Event | None:
    """Session token totals from a stats update or a V0 entry's llm_metrics, if any."""
    metrics: list[dict[str, Any]] = []
    if obj.get("kind") == "ConversationStateUpdateEvent":
        value = as_dict(obj.get("value"))
        stats = as_dict(value.get("stats")) if obj.get("key") == "full_state" else value
        metrics = [as_dict(m) for m in as_dict(stats.get("usage_to_metrics")).values()]
    elif isinstance(obj.get("llm_metrics"), dict):
        metrics = [obj["llm_metrics"]]
    tokens = [
        read_tokens(u, "prompt_tokens", "completion_tokens", "cache_read_tokens")
        for m in metrics
        if (u := as_dict(m.get("accumulated_token_usage")))
    ]
    return Event("usage", tokens=sum(tokens, TokenCounts()), cumulative=True) if tokens else None


# V0 observations that answer no tool call
_V0_SILENT = ("null", "recall", "agent_state_changed")


def _openhands_v0(obj: dict[str, Any], out: Collector) -> None:
    args = as_dict(obj.get("args"))
    action = obj.get("action")
    if action == "message" and obj.get("source") == "agent":
        out.add("message", role="assistant", text=short(args.get("content", obj.get("message"))))
    elif action == "finish":
        out.add("final", text=short(args.get("final_thought") or obj.get("message", "")))
    elif isinstance(action, str) and action not in ("message", "system", "recall"):
        out.call(action, summarize_args(args), str(obj.get("id", "")))
    observation = obj.get("observation")
    if isinstance(observation, str) and observation not in _V0_SILENT:
        extras = as_dict(obj.get("extras"))
        exit_code = as_dict(extras.get("metadata")).get("exit_code", extras.get("exit_code"))
        failed = observation == "error" or (isinstance(exit_code, int) and exit_code != 0)
        out.result(str(obj.get("cause", "")), obj.get("content", ""), failed, observation)


def parse(text: str) -> list[Event]:
    """OpenHands headless JSON events (or a V0 trajectory, as JSONL or one JSON list).
    The ``finish`` tool's call is the final answer."""
    out = Collector()
    stripped = text.strip()
    entries: Any = None
    if stripped.startswith("["):
        # A V0 trajectory is one JSON list; a JSONL log may start with "[" too (a stage
        # runner's "[stages] ..." line, a Rich log record's "[date time]"): read as lines.
        with suppress(json.JSONDecodeError, ValueError, RecursionError):
            entries = json.loads(stripped)
    if isinstance(entries, list):
        objs: Any = [e for e in entries if isinstance(e, dict)]
    else:
        objs = json_lines(_join_rich_records(text), out.other)
    for obj in objs:
        usage = _openhands_usage(obj)
        if usage is not None:
            out.events.append(usage)
        kind = obj.get("kind")
        if kind is None:
            _openhands_v0(obj, out)
        elif kind == "MessageEvent":
            message = as_dict(obj.get("llm_message"))
            role = "assistant" if message.get("role") == "assistant" else "user"
            out.message(role, tool_output(message.get("content")))
        elif kind == "ActionEvent":
            out.message("assistant", tool_output(obj.get("thought")))
            call = as_dict(obj.get("tool_call"))
            tool = str(obj.get("tool_name") or call.get("name", ""))
            action = as_dict(obj.get("action"))
            arguments = call.get("arguments")
            if arguments is None:
                arguments = {k: v for k, v in action.items() if k != "kind"}
            if tool == "finish":
                out.add("final", text=short(action.get("message") or summarize_args(arguments)))
            else:
                args = _editor_args(obj) if tool in _EDITORS else summarize_args(arguments)
                out.call(tool, args, str(obj.get("tool_call_id", "")))
        elif kind in ("ObservationEvent", "UserRejectObservation"):
            observation = as_dict(obj.get("observation"))
            if obj.get("tool_name") == "finish":
                continue
            # A terminal command that exited non-zero failed too (as in a V0 log); -1 is a
            # command still running when its output paused, not a failure.
            exit_code = observation.get("exit_code")
            failed = (
                kind == "UserRejectObservation"
                or bool(observation.get("is_error"))
                or (isinstance(exit_code, int) and exit_code > 0)
            )
            content = tool_output(observation.get("content", obj.get("rejection_reason", "")))
            tool = str(obj.get("tool_name", ""))
            out.result(str(obj.get("tool_call_id", "")), content, failed, tool)
        elif kind == "AgentErrorEvent":
            out.add("error", text=short(obj.get("error", "")))
        elif kind == "ConversationErrorEvent":
            out.add("error", text=short(f"{obj.get('code', '')}: {obj.get('detail', '')}"))
    return out.events
