"""Agent logs as typed events: what each coding-agent CLI did, in one shape.

Each CLI logs in its own format; a parser per format (a spec's ``log_format``) turns a log
into a list of :class:`Event`:

==================  ==================================================================
kind                meaning (fields used)
==================  ==================================================================
``message``         text from the model (``role`` assistant, or ``reasoning``) or the
                    user prompt (``role`` user); ``text``
``tool_call``       the agent called a tool: ``tool``, ``args`` (a short summary),
                    ``call_id``
``tool_result``     a tool's answer: ``tool``, ``text`` (shortened output), ``is_error``,
                    ``call_id``
``usage``           tokens: ``input_tokens`` (cached included), ``output_tokens``,
                    ``cached_tokens``; ``cumulative`` when it is a running total for the
                    whole session (it replaces what came before) rather than one call's
``error``           an error the CLI reported (or a stderr line that looks like one)
``final``           the agent's final answer or exit status: ``text``, ``is_error``
==================  ==================================================================

Formats: ``claude-stream-json`` (Claude Code ``-p --output-format stream-json``),
``codex-jsonl`` (``codex exec --json``), ``gemini-stream-json`` (Gemini CLI ``-o
stream-json``), ``opencode-json`` (``opencode run --format json``), ``openhands-jsonl``
(``openhands --headless --json``; also the older V0 trajectory entries),
``mini-swe-agent`` (a mini-SWE-agent trajectory file) and ``text`` (anything else).

Parsers are tolerant: agent logs interleave stderr with the JSON lines and may end in a torn
line (the agent was killed at the deadline). Lines that are not JSON objects are skipped,
except that a line that looks like an error becomes an ``error`` event; unknown event types
and malformed fields are skipped. No parser raises on any input.

The metering proxy's usage file is the authoritative token count of a run; the usage here is
what the CLI itself reported, for cross-checking and for agents run without the proxy.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:  # spec.py imports this module (for the format names) at run time
    from agent2rl.agents.spec import AgentSpec

EventKind = Literal["message", "tool_call", "tool_result", "usage", "error", "final"]

TEXT_LIMIT = 500  # characters kept of a message, tool output or error
ARGS_LIMIT = 160  # characters of a tool call's argument summary


@dataclass(frozen=True)
class Event:
    """One thing an agent did (see the module docstring for the fields each kind uses)."""

    kind: EventKind
    text: str = ""
    role: str = ""
    tool: str = ""
    args: str = ""
    call_id: str = ""
    is_error: bool = False
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    cumulative: bool = False


@dataclass(frozen=True)
class Usage:
    """Token totals of a log: ``input_tokens`` include the cached ones."""

    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens


@dataclass(frozen=True)
class AgentLog:
    """A parsed agent log: its events, token usage and a summary for reports."""

    events: list[Event] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    source: Path | None = None

    def summary(self) -> dict[str, Any]:
        """Counts for a report: ``messages`` (assistant), ``tool_calls`` (total and
        ``tools`` by name), ``tool_errors``, ``errors``, the ``usage`` totals and the
        ``final`` text (the last final event's, ``""`` if the agent never finished)."""
        tools: dict[str, int] = {}
        for e in self.events:
            if e.kind == "tool_call":
                tools[e.tool] = tools.get(e.tool, 0) + 1
        finals = [e for e in self.events if e.kind == "final"]
        return {
            "messages": sum(e.kind == "message" and e.role == "assistant" for e in self.events),
            "tool_calls": sum(tools.values()),
            "tools": dict(sorted(tools.items(), key=lambda kv: -kv[1])),
            "tool_errors": sum(e.kind == "tool_result" and e.is_error for e in self.events),
            "errors": sum(e.kind == "error" for e in self.events),
            "input_tokens": self.usage.input_tokens,
            "output_tokens": self.usage.output_tokens,
            "cached_tokens": self.usage.cached_tokens,
            "final": finals[-1].text if finals else "",
        }


def total_usage(events: list[Event]) -> Usage:
    """Token totals: per-call usage events add up; a ``cumulative`` one (a session total)
    replaces everything before it. No usage events give zeros."""
    inp = out = cached = 0
    for e in events:
        if e.kind != "usage":
            continue
        if e.cumulative:
            inp, out, cached = e.input_tokens, e.output_tokens, e.cached_tokens
        else:
            inp, out, cached = inp + e.input_tokens, out + e.output_tokens, cached + e.cached_tokens
    return Usage(inp, out, cached)


# --------------------------------------------------------------------------------------------
# Helpers


def _short(text: Any, limit: int = TEXT_LIMIT) -> str:
    s = text if isinstance(text, str) else ("" if text is None else str(text))
    s = s.strip()
    return s if len(s) <= limit else s[: limit - 1] + "…"


def _int(value: Any) -> int:
    try:
        return max(0, int(value or 0))
    except (TypeError, ValueError):
        return 0


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


_SUMMARY_KEYS = ("command", "cmd", "file_path", "path", "filePath", "pattern", "url", "query")


def summarize_args(args: Any, limit: int = ARGS_LIMIT) -> str:
    """A one-line summary of a tool call's arguments: the command, path, pattern, URL or
    query when there is one (lists are joined), else compact JSON; cut to ``limit``.
    A JSON string is decoded first; anything undecodable is shown as it is."""
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except (json.JSONDecodeError, ValueError):
            return _short(" ".join(args.split()), limit)
    if isinstance(args, dict):
        for key in _SUMMARY_KEYS:
            value = args.get(key)
            if isinstance(value, list):
                value = " ".join(str(v) for v in value)
            if isinstance(value, str) and value.strip():
                return _short(" ".join(value.split()), limit)
    try:
        text = json.dumps(args, ensure_ascii=False, separators=(",", ":"), default=str)
    except (TypeError, ValueError):
        text = str(args)
    return _short(text, limit)


_ERROR_LINE = re.compile(
    r"^\s*(Traceback \(most recent call last\)|\w*(Error|Exception)\b[:\s]|ERROR\b|error:|"
    r"fatal:|FATAL\b)|cannot be used with|Invalid auth",
    re.IGNORECASE,
)


def _is_error_line(line: str) -> bool:
    return bool(_ERROR_LINE.search(line))


def _json_lines(text: str, on_other: Callable[[str], None]) -> Iterator[dict[str, Any]]:
    """The JSON objects of a JSONL log; every other non-empty line goes to ``on_other``."""
    for line in text.splitlines():
        s = line.strip()
        if not s:
            continue
        if s.startswith("{"):
            try:
                obj = json.loads(s)
            except (json.JSONDecodeError, ValueError, RecursionError):
                obj = None
            if isinstance(obj, dict):
                yield obj
                continue
        on_other(s)


class _Out:
    """Collects events; non-JSON lines that look like errors become error events."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    def add(self, kind: EventKind, **fields: Any) -> None:
        self.events.append(Event(kind, **fields))

    def other(self, line: str) -> None:
        if _is_error_line(line):
            self.add("error", text=_short(line))


def _tool_output(content: Any) -> str:
    """Text of a tool result's content: a string, or a list of text blocks."""
    if isinstance(content, str):
        return content
    parts = []
    for block in _list(content):
        if isinstance(block, dict):
            parts.append(str(block.get("text", "") or ""))
        elif isinstance(block, str):
            parts.append(block)
    return "\n".join(p for p in parts if p)


# --------------------------------------------------------------------------------------------
# Claude Code: `claude -p --output-format stream-json --verbose`
#
# {"type":"system","subtype":"init",...}
# {"type":"assistant","message":{"id":"msg_1","content":[{"type":"text",...}|{"type":"tool_use",
#   "id":..,"name":..,"input":{..}}],"usage":{...}}, "error": "..."?}
# {"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":..,"content":..,
#   "is_error":false}]}}
# {"type":"result","subtype":"success","is_error":false,"result":"...","usage":{...},
#   "modelUsage":{"claude-...":{"inputTokens":..,"outputTokens":..,"cacheReadInputTokens":..,
#   "cacheCreationInputTokens":..}}}


def _anthropic_tokens(usage: dict[str, Any]) -> tuple[int, int, int]:
    cached = _int(usage.get("cache_read_input_tokens"))
    inp = _int(usage.get("input_tokens")) + cached + _int(usage.get("cache_creation_input_tokens"))
    return inp, _int(usage.get("output_tokens")), cached


def parse_claude_stream_json(text: str) -> list[Event]:
    """Claude Code's stream-json. Usage: one per API message id from assistant lines (Claude
    Code repeats a message once per content block, with the same usage), replaced by the
    result line's session totals (``modelUsage`` over all models, side calls included)."""
    out = _Out()
    seen_messages: set[str] = set()
    tool_names: dict[str, str] = {}
    for obj in _json_lines(text, out.other):
        kind = obj.get("type")
        msg = _dict(obj.get("message"))
        if kind == "assistant":
            content = _list(msg.get("content"))
            for block in content:
                block = _dict(block)
                btype = block.get("type")
                if btype == "text" and str(block.get("text", "")).strip():
                    out.add("message", role="assistant", text=_short(block["text"]))
                elif btype == "thinking" and str(block.get("thinking", "")).strip():
                    out.add("message", role="reasoning", text=_short(block["thinking"]))
                elif btype == "tool_use":
                    name = str(block.get("name", ""))
                    call_id = str(block.get("id", ""))
                    tool_names[call_id] = name
                    out.add(
                        "tool_call",
                        tool=name,
                        args=summarize_args(block.get("input")),
                        call_id=call_id,
                    )
            if obj.get("error"):
                texts = [_dict(b).get("text", "") for b in content]
                out.add("error", text=_short(" ".join(t for t in texts if t) or obj["error"]))
            mid = str(msg.get("id", ""))
            usage = _dict(msg.get("usage"))
            if usage and mid and mid not in seen_messages:
                seen_messages.add(mid)
                inp, outp, cached = _anthropic_tokens(usage)
                if inp or outp:
                    out.add("usage", input_tokens=inp, output_tokens=outp, cached_tokens=cached)
        elif kind == "user":
            for block in _list(msg.get("content")):
                block = _dict(block)
                if block.get("type") != "tool_result":
                    continue
                call_id = str(block.get("tool_use_id", ""))
                out.add(
                    "tool_result",
                    tool=tool_names.get(call_id, ""),
                    call_id=call_id,
                    text=_short(_tool_output(block.get("content"))),
                    is_error=bool(block.get("is_error")),
                )
        elif kind == "result":
            is_error = bool(obj.get("is_error")) or str(obj.get("subtype", "")).startswith("error")
            model_usage = [_dict(v) for v in _dict(obj.get("modelUsage")).values()]
            if model_usage:
                cached = sum(_int(m.get("cacheReadInputTokens")) for m in model_usage)
                inp = cached + sum(
                    _int(m.get("inputTokens")) + _int(m.get("cacheCreationInputTokens"))
                    for m in model_usage
                )
                outp = sum(_int(m.get("outputTokens")) for m in model_usage)
            else:
                inp, outp, cached = _anthropic_tokens(_dict(obj.get("usage")))
            if model_usage or obj.get("usage"):
                out.add(
                    "usage",
                    input_tokens=inp,
                    output_tokens=outp,
                    cached_tokens=cached,
                    cumulative=True,
                )
            result = obj.get("result")
            final = _short(result if isinstance(result, str) else obj.get("subtype", ""))
            message = final or "the agent ended with an error"
            last_error = next((e.text for e in reversed(out.events) if e.kind == "error"), None)
            if is_error and message != last_error:  # the failed assistant turn said it already
                out.add("error", text=message)
            out.add("final", text=final, is_error=is_error)
    return out.events


# --------------------------------------------------------------------------------------------
# Codex: `codex exec --json`
#
# {"type":"thread.started","thread_id":..} {"type":"turn.started"}
# {"type":"item.started"|"item.completed","item":{"id":..,"type":"command_execution",
#   "command":..,"aggregated_output":..,"exit_code":0,"status":..}}
# item types: agent_message{text}, reasoning{text}, command_execution, file_change{changes:
#   [{path,kind}]}, mcp_tool_call{server,tool,arguments}, web_search{query}, todo_list{items},
#   error{message}
# {"type":"turn.completed","usage":{"input_tokens":..,"cached_input_tokens":..,
#   "output_tokens":..}} {"type":"turn.failed","error":{"message":..}} {"type":"error",
#   "message":..}


def _codex_call(item: dict[str, Any]) -> tuple[str, str]:
    kind = item.get("type")
    if kind == "command_execution":
        return "shell", summarize_args({"command": item.get("command", "")})
    if kind == "file_change":
        changes = [_dict(c) for c in _list(item.get("changes"))]
        paths = " ".join(f"{c.get('kind', '')}:{c.get('path', '')}" for c in changes)
        return "apply_patch", _short(paths, ARGS_LIMIT)
    if kind == "mcp_tool_call":
        name = f"{item.get('server', '')}.{item.get('tool', '')}".strip(".")
        return name or "mcp", summarize_args(item.get("arguments", {}))
    if kind == "web_search":
        return "web_search", _short(item.get("query", ""), ARGS_LIMIT)
    return "", ""


def parse_codex_jsonl(text: str) -> list[Event]:
    """Codex's ``exec --json`` events. Tool items give a tool_call when they start (or, when
    only their completion is logged, just before their result). ``turn.completed`` usage is
    the session's running total (Codex reports its last total token count)."""
    out = _Out()
    started: set[str] = set()
    last_message = ""
    for obj in _json_lines(text, out.other):
        kind = obj.get("type")
        item = _dict(obj.get("item"))
        itype = item.get("type")
        iid = str(item.get("id", ""))
        if kind in ("item.started", "item.completed") and itype in (
            "command_execution",
            "file_change",
            "mcp_tool_call",
            "web_search",
        ):
            tool, args = _codex_call(item)
            if iid not in started:
                started.add(iid)
                out.add("tool_call", tool=tool, args=args, call_id=iid)
            if kind == "item.completed" and itype != "web_search":
                status = str(item.get("status", ""))
                exit_code = item.get("exit_code")
                failed = status in ("failed", "declined") or (
                    isinstance(exit_code, int) and exit_code != 0
                )
                output = item.get("aggregated_output")
                if itype == "mcp_tool_call":
                    output = _dict(item.get("result")).get("content") or _dict(
                        item.get("error")
                    ).get("message")
                out.add(
                    "tool_result",
                    tool=tool,
                    call_id=iid,
                    text=_short(_tool_output(output) if output is not None else status),
                    is_error=failed,
                )
        elif kind == "item.completed" and itype == "agent_message":
            last_message = str(item.get("text", ""))
            out.add("message", role="assistant", text=_short(last_message))
        elif kind == "item.completed" and itype == "reasoning":
            out.add("message", role="reasoning", text=_short(item.get("text", "")))
        elif kind == "item.completed" and itype == "error":
            out.add("error", text=_short(item.get("message", "")))
        elif kind == "turn.completed":
            usage = _dict(obj.get("usage"))
            out.add(
                "usage",
                input_tokens=_int(usage.get("input_tokens")),
                output_tokens=_int(usage.get("output_tokens")),
                cached_tokens=_int(usage.get("cached_input_tokens")),
                cumulative=True,
            )
            out.add("final", text=_short(last_message))
        elif kind == "turn.failed":
            message = _short(_dict(obj.get("error")).get("message", "turn failed"))
            out.add("error", text=message)
            out.add("final", text=message, is_error=True)
        elif kind == "error":
            out.add("error", text=_short(obj.get("message", "")))
    return out.events


# --------------------------------------------------------------------------------------------
# Gemini CLI: `gemini -p ... --output-format stream-json`
#
# {"type":"init","session_id":..,"model":..}
# {"type":"message","role":"user"|"assistant","content":"...","delta":true}
# {"type":"tool_use","tool_name":..,"tool_id":..,"parameters":{..}}
# {"type":"tool_result","tool_id":..,"status":"success"|"error","output":..,"error":{type,
#   message}}
# {"type":"error","severity":"warning"|"error","message":..}
# {"type":"result","status":"success"|"error","error":{..},"stats":{"total_tokens":..,
#   "input_tokens":..,"output_tokens":..,"cached":..,"tool_calls":..}}


def parse_gemini_stream_json(text: str) -> list[Event]:
    """Gemini CLI's stream-json. Consecutive assistant deltas join into one message; the
    result's stats are the session totals."""
    out = _Out()
    tool_names: dict[str, str] = {}
    pending: list[str] = []
    last_message = ""

    def flush() -> None:
        nonlocal last_message
        if pending:
            last_message = "".join(pending)
            out.add("message", role="assistant", text=_short(last_message))
            pending.clear()

    for obj in _json_lines(text, out.other):
        kind = obj.get("type")
        if kind == "message" and obj.get("role") == "assistant":
            pending.append(str(obj.get("content", "")))
            if not obj.get("delta"):
                flush()
            continue
        flush()
        if kind == "message" and obj.get("role") == "user":
            out.add("message", role="user", text=_short(obj.get("content", "")))
        elif kind == "tool_use":
            call_id, name = str(obj.get("tool_id", "")), str(obj.get("tool_name", ""))
            tool_names[call_id] = name
            out.add(
                "tool_call", tool=name, args=summarize_args(obj.get("parameters")), call_id=call_id
            )
        elif kind == "tool_result":
            call_id = str(obj.get("tool_id", ""))
            failed = obj.get("status") == "error"
            output = obj.get("output")
            if failed and not output:
                output = _dict(obj.get("error")).get("message", "")
            out.add(
                "tool_result",
                tool=tool_names.get(call_id, ""),
                call_id=call_id,
                text=_short(output),
                is_error=failed,
            )
        elif kind == "error":
            out.add("error", text=_short(obj.get("message", "")))
        elif kind == "result":
            stats = _dict(obj.get("stats"))
            if stats:
                out.add(
                    "usage",
                    input_tokens=_int(stats.get("input_tokens")),
                    output_tokens=_int(stats.get("output_tokens")),
                    cached_tokens=_int(stats.get("cached")),
                    cumulative=True,
                )
            failed = obj.get("status") == "error"
            if failed:
                message = _short(_dict(obj.get("error")).get("message", "")) or "error"
                out.add("error", text=message)
                out.add("final", text=message, is_error=True)
            else:
                out.add("final", text=_short(last_message))
    flush()
    return out.events


# --------------------------------------------------------------------------------------------
# OpenCode: `opencode run --format json`
#
# {"type":"step_start","part":{..}}
# {"type":"text","part":{"type":"text","text":".."}}
# {"type":"reasoning","part":{"type":"reasoning","text":".."}}
# {"type":"tool_use","part":{"type":"tool","tool":"bash","callID":..,"state":{"status":
#   "completed"|"error","input":{..},"output":"..","error":".."}}}
# {"type":"step_finish","part":{"reason":"tool-calls"|"stop","tokens":{"input":..,"output":..,
#   "reasoning":..,"cache":{"read":..,"write":..}},"cost":..}}
# {"type":"error","error":{"name":..,"data":{"message":..}}}


def parse_opencode_json(text: str) -> list[Event]:
    """OpenCode's JSON events. A tool part carries both the call and its result; each
    step_finish carries that step's tokens (input here counts cache reads and writes too);
    a step that finishes for a reason other than tool calls is the final answer."""
    out = _Out()
    last_message = ""
    for obj in _json_lines(text, out.other):
        kind = obj.get("type")
        part = _dict(obj.get("part"))
        if kind == "text" and str(part.get("text", "")).strip():
            last_message = str(part["text"])
            out.add("message", role="assistant", text=_short(last_message))
        elif kind == "reasoning" and str(part.get("text", "")).strip():
            out.add("message", role="reasoning", text=_short(part["text"]))
        elif kind == "tool_use":
            state = _dict(part.get("state"))
            tool, call_id = str(part.get("tool", "")), str(part.get("callID", ""))
            out.add(
                "tool_call", tool=tool, args=summarize_args(state.get("input")), call_id=call_id
            )
            status = state.get("status")
            if status in ("completed", "error"):
                failed = status == "error"
                output = state.get("error") if failed else state.get("output")
                out.add(
                    "tool_result", tool=tool, call_id=call_id, text=_short(output), is_error=failed
                )
        elif kind == "step_finish":
            tokens = _dict(part.get("tokens"))
            cache = _dict(tokens.get("cache"))
            cached = _int(cache.get("read"))
            out.add(
                "usage",
                input_tokens=_int(tokens.get("input")) + cached + _int(cache.get("write")),
                output_tokens=_int(tokens.get("output")) + _int(tokens.get("reasoning")),
                cached_tokens=cached,
            )
            if part.get("reason") not in (None, "tool-calls", "tool_calls"):
                out.add("final", text=_short(last_message))
        elif kind == "error":
            err = _dict(obj.get("error"))
            message = _dict(err.get("data")).get("message") or err.get("name") or "error"
            out.add("error", text=_short(message))
    return out.events


# --------------------------------------------------------------------------------------------
# OpenHands: `openhands --headless --json` (openhands-sdk events, one model_dump per line)
#
# {"kind":"MessageEvent","source":"agent"|"user","llm_message":{"role":..,"content":[{"type":
#   "text","text":..}]}}
# {"kind":"ActionEvent","thought":[{"text":..}],"tool_name":"terminal","tool_call_id":..,
#   "tool_call":{"name":..,"arguments":"{json}"},"action":{"kind":..,"command":..}}
# {"kind":"ObservationEvent","tool_name":..,"tool_call_id":..,"observation":{"content":[{"type":
#   "text","text":..}],"is_error":false}}
# {"kind":"AgentErrorEvent","error":..} {"kind":"ConversationErrorEvent","code":..,"detail":..}
# {"kind":"ConversationStateUpdateEvent","key":"stats","value":{"usage_to_metrics":{"agent":
#   {"accumulated_token_usage":{"prompt_tokens":..,"completion_tokens":..,
#   "cache_read_tokens":..}}}}}
# V0 trajectories (openhands-ai < 1.0): {"action":"run","args":{"command":..}},
#   {"observation":"run","content":..,"extras":{"metadata":{"exit_code":..}}},
#   {"action":"message"|"finish",...}, "llm_metrics":{"accumulated_token_usage":{..}}


def _openhands_usage(obj: dict[str, Any]) -> Event | None:
    """Session token totals from a stats update or a V0 entry's llm_metrics, if any."""
    metrics: list[dict[str, Any]] = []
    if obj.get("kind") == "ConversationStateUpdateEvent":
        value = _dict(obj.get("value"))
        stats = _dict(value.get("stats")) if obj.get("key") == "full_state" else value
        metrics = [_dict(m) for m in _dict(stats.get("usage_to_metrics")).values()]
    elif isinstance(obj.get("llm_metrics"), dict):
        metrics = [obj["llm_metrics"]]
    usages = [_dict(m.get("accumulated_token_usage")) for m in metrics]
    usages = [u for u in usages if u]
    if not usages:
        return None
    return Event(
        "usage",
        input_tokens=sum(_int(u.get("prompt_tokens")) for u in usages),
        output_tokens=sum(_int(u.get("completion_tokens")) for u in usages),
        cached_tokens=sum(_int(u.get("cache_read_tokens")) for u in usages),
        cumulative=True,
    )


def _openhands_v0(obj: dict[str, Any], out: _Out) -> None:
    args = _dict(obj.get("args"))
    action = obj.get("action")
    if action == "message" and obj.get("source") == "agent":
        out.add("message", role="assistant", text=_short(args.get("content", obj.get("message"))))
    elif action == "finish":
        out.add("final", text=_short(args.get("final_thought") or obj.get("message", "")))
    elif isinstance(action, str) and action not in ("message", "system", "recall"):
        out.add("tool_call", tool=action, args=summarize_args(args), call_id=str(obj.get("id", "")))
    observation = obj.get("observation")
    if isinstance(observation, str) and observation not in (
        "null",
        "recall",
        "agent_state_changed",
    ):
        extras = _dict(obj.get("extras"))
        exit_code = _dict(extras.get("metadata")).get("exit_code", extras.get("exit_code"))
        failed = observation == "error" or (isinstance(exit_code, int) and exit_code != 0)
        out.add(
            "tool_result",
            tool=observation,
            call_id=str(obj.get("cause", "")),
            text=_short(obj.get("content", "")),
            is_error=failed,
        )


def parse_openhands_jsonl(text: str) -> list[Event]:
    """OpenHands headless JSON events (or a V0 trajectory, as JSONL or one JSON list).
    The ``finish`` tool's call is the final answer."""
    out = _Out()
    stripped = text.strip()
    if stripped.startswith("["):
        try:
            entries = json.loads(stripped)
        except (json.JSONDecodeError, ValueError, RecursionError):
            entries = []
        objs: Any = [e for e in _list(entries) if isinstance(e, dict)]
    else:
        objs = _json_lines(text, out.other)
    for obj in objs:
        usage = _openhands_usage(obj)
        if usage is not None:
            out.events.append(usage)
        kind = obj.get("kind")
        if kind is None:
            _openhands_v0(obj, out)
        elif kind == "MessageEvent":
            message = _dict(obj.get("llm_message"))
            role = "assistant" if message.get("role") == "assistant" else "user"
            text_ = _tool_output(message.get("content"))
            if text_.strip():
                out.add("message", role=role, text=_short(text_))
        elif kind == "ActionEvent":
            thought = _tool_output(obj.get("thought"))
            if thought.strip():
                out.add("message", role="assistant", text=_short(thought))
            call = _dict(obj.get("tool_call"))
            tool = str(obj.get("tool_name") or call.get("name", ""))
            arguments = call.get("arguments")
            if arguments is None:
                arguments = {k: v for k, v in _dict(obj.get("action")).items() if k != "kind"}
            if tool == "finish":
                action = _dict(obj.get("action"))
                out.add("final", text=_short(action.get("message") or summarize_args(arguments)))
            else:
                out.add(
                    "tool_call",
                    tool=tool,
                    args=summarize_args(arguments),
                    call_id=str(obj.get("tool_call_id", "")),
                )
        elif kind in ("ObservationEvent", "UserRejectObservation"):
            observation = _dict(obj.get("observation"))
            if obj.get("tool_name") == "finish":
                continue
            failed = kind == "UserRejectObservation" or bool(observation.get("is_error"))
            content = observation.get("content", obj.get("rejection_reason", ""))
            out.add(
                "tool_result",
                tool=str(obj.get("tool_name", "")),
                call_id=str(obj.get("tool_call_id", "")),
                text=_short(_tool_output(content)),
                is_error=failed,
            )
        elif kind == "AgentErrorEvent":
            out.add("error", text=_short(obj.get("error", "")))
        elif kind == "ConversationErrorEvent":
            out.add("error", text=_short(f"{obj.get('code', '')}: {obj.get('detail', '')}"))
    return out.events


# --------------------------------------------------------------------------------------------
# mini-SWE-agent: the trajectory file (`-o`), {"info":{"exit_status":..,"submission":..,
# "model_stats":{..}}, "messages":[{"role":"system"|"user"|"assistant"|"tool"|"exit", "content":
# .., "tool_calls":[{"function":{"name":..,"arguments":"{json}"},"id":..}], "extra":{"response":
# {"usage":{"prompt_tokens":..,"completion_tokens":..,"prompt_tokens_details":{"cached_tokens"
# :..}}}, "returncode":..,"raw_output":..,"exit_status":..}}], "trajectory_format":
# "mini-swe-agent-1.1"}. Text-based configs (format 1) put commands in ```bash blocks and
# outputs in user messages.

_BASH_BLOCK = re.compile(r"```(?:bash|sh)?\s*\n(.*?)```", re.DOTALL)
_RETURNCODE = re.compile(r"<returncode>\s*(-?\d+)\s*</returncode>")
_MINI_SUBMIT = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"


def parse_mini_swe_agent(text: str) -> list[Event]:
    """A mini-SWE-agent trajectory (the JSON file). Each assistant message's response
    carries that call's usage; the exit message is the final one. Text that is not a
    trajectory is parsed as plain text."""
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, ValueError, RecursionError):
        return parse_text(text)
    if not isinstance(data, dict) or not isinstance(data.get("messages"), list):
        return parse_text(text)
    out = _Out()
    tool_names: dict[str, str] = {}
    submits: set[str] = set()
    assistant_seen = False
    for msg in data["messages"]:
        msg = _dict(msg)
        role, extra = msg.get("role"), _dict(msg.get("extra"))
        content = _tool_output(msg.get("content"))
        if role == "assistant":
            assistant_seen = True
            if content.strip():
                out.add("message", role="assistant", text=_short(content))
            calls = [_dict(c) for c in _list(msg.get("tool_calls"))]
            for call in calls:
                fn = _dict(call.get("function"))
                name, call_id = str(fn.get("name", "")), str(call.get("id", ""))
                args = summarize_args(fn.get("arguments"))
                tool_names[call_id] = name
                if _MINI_SUBMIT in args:
                    submits.add(call_id)
                out.add("tool_call", tool=name, args=args, call_id=call_id)
            if not calls:
                for block in _BASH_BLOCK.findall(content)[:1]:
                    out.add("tool_call", tool="bash", args=summarize_args({"command": block}))
            usage = _dict(_dict(extra.get("response")).get("usage"))
            if usage:
                details = _dict(usage.get("prompt_tokens_details"))
                out.add(
                    "usage",
                    input_tokens=_int(usage.get("prompt_tokens")),
                    output_tokens=_int(usage.get("completion_tokens")),
                    cached_tokens=_int(details.get("cached_tokens")),
                )
        elif role == "tool":
            call_id = str(msg.get("tool_call_id", ""))
            code = extra.get("returncode")
            output = extra.get("raw_output", content)
            out.add(
                "tool_result",
                tool=tool_names.get(call_id, "bash"),
                call_id=call_id,
                text=_short(output),
                # The submit command is not executed (return code -1): not a failure.
                is_error=isinstance(code, int) and code != 0 and call_id not in submits,
            )
        elif role == "user" and assistant_seen and "<returncode>" in content:
            match = _RETURNCODE.search(content)
            code = int(match.group(1)) if match else 0
            out.add("tool_result", tool="bash", text=_short(content), is_error=code != 0)
        elif role == "user" and not assistant_seen:
            out.add("message", role="user", text=_short(content))
        elif role == "exit":
            status = str(extra.get("exit_status", "") or content)
            failed = status not in ("Submitted", "")
            if failed:
                out.add("error", text=_short(f"{status}: {content}" if content else status))
            out.add("final", text=_short(extra.get("submission") or status), is_error=failed)
    info = _dict(data.get("info"))
    if not any(e.kind == "final" for e in out.events) and info.get("exit_status"):
        status = str(info["exit_status"])
        out.add("final", text=_short(status), is_error=status != "Submitted")
    return out.events


# --------------------------------------------------------------------------------------------
# Plain text


def parse_text(text: str) -> list[Event]:
    """Any log: each non-empty line is an assistant message, or an error when it looks like
    one (a traceback start, ``SomeError:``, ``ERROR``, ``fatal:``)."""
    out = _Out()
    for line in text.splitlines():
        s = line.strip()
        if not s:
            continue
        if _is_error_line(s):
            out.add("error", text=_short(s))
        else:
            out.add("message", role="assistant", text=_short(s))
    return out.events


PARSERS: dict[str, Callable[[str], list[Event]]] = {
    "text": parse_text,
    "claude-stream-json": parse_claude_stream_json,
    "codex-jsonl": parse_codex_jsonl,
    "gemini-stream-json": parse_gemini_stream_json,
    "opencode-json": parse_opencode_json,
    "openhands-jsonl": parse_openhands_jsonl,
    "mini-swe-agent": parse_mini_swe_agent,
}


def parse_log(text: str, log_format: str) -> list[Event]:
    """``text`` parsed with the parser named ``log_format``; an unknown name falls back to
    plain text. Never raises (a parser bug on odd input degrades to plain text)."""
    parser = PARSERS.get(log_format, parse_text)
    try:
        return parser(text)
    except Exception:  # a malformed log must never break a run's report
        return parse_text(text)


def read_agent_log(spec: AgentSpec, agent_log: Path, workspace: Path | None = None) -> AgentLog:
    """Parse a run's agent log with the spec's ``log_format``.

    The structured log is the spec's ``log_file`` inside ``workspace`` when it has one and
    it exists (mini-SWE-agent's trajectory), else ``agent_log`` (the agent's stdout and
    stderr). A missing or unreadable file gives an empty :class:`AgentLog`; undecodable
    bytes are replaced.
    """
    path = Path(agent_log)
    log_format = spec.log_format
    if spec.log_file and workspace is not None and (Path(workspace) / spec.log_file).is_file():
        path = Path(workspace) / spec.log_file
    elif spec.log_file:
        # Without its structured log (the agent died before writing it) stdout is text.
        log_format = "text"
    try:
        text = path.read_bytes().decode("utf-8", errors="replace")
    except OSError:
        return AgentLog(source=path)
    events = parse_log(text, log_format)
    return AgentLog(events, total_usage(events), path)


__all__ = [
    "PARSERS",
    "AgentLog",
    "Event",
    "Usage",
    "parse_log",
    "read_agent_log",
    "summarize_args",
    "total_usage",
]
