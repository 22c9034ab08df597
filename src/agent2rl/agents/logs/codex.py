"""Codex: ``codex exec --json``.

One JSON event a line::

    {"type":"thread.started","thread_id":..} {"type":"turn.started"}
    {"type":"item.started"|"item.completed","item":{"id":..,"type":"command_execution",
      "command":..,"aggregated_output":..,"exit_code":0,"status":..}}
    item types: agent_message{text}, reasoning{text}, command_execution, file_change{changes:
      [{path,kind}]}, mcp_tool_call{server,tool,arguments}, web_search{query},
      todo_list{items}, error{message}
    {"type":"turn.completed","usage":{"input_tokens":..,"cached_input_tokens":..,
      "output_tokens":..}} {"type":"turn.failed","error":{"message":..}} {"type":"error",
      "message":..}
"""

from __future__ import annotations

from typing import Any

from agent2rl.agents.logs.base import (
    ARGS_LIMIT,
    Collector,
    Event,
    as_dict,
    as_list,
    json_lines,
    read_tokens,
    short,
    summarize_args,
    tool_output,
)

LOG_FORMAT = "codex-jsonl"
_TOOL_ITEMS = ("command_execution", "file_change", "mcp_tool_call", "web_search")


def _codex_call(item: dict[str, Any]) -> tuple[str, str]:
    kind = item.get("type")
    if kind == "command_execution":
        return "shell", summarize_args({"command": item.get("command", "")})
    if kind == "file_change":
        changes = [as_dict(c) for c in as_list(item.get("changes"))]
        paths = " ".join(f"{c.get('kind', '')}:{c.get('path', '')}" for c in changes)
        return "apply_patch", short(paths, ARGS_LIMIT)
    if kind == "mcp_tool_call":
        name = f"{item.get('server', '')}.{item.get('tool', '')}".strip(".")
        return name or "mcp", summarize_args(item.get("arguments", {}))
    if kind == "web_search":
        return "web_search", short(item.get("query", ""), ARGS_LIMIT)
    return "", ""


def parse(text: str) -> list[Event]:
    """Codex's ``exec --json`` events. Tool items give a tool_call when they start (or, when
    only their completion is logged, just before their result). ``turn.completed`` usage is
    the session's running total (Codex reports its last total token count)."""
    out = Collector()
    started: set[str] = set()
    last_message = ""
    for obj in json_lines(text, out.other):
        kind = obj.get("type")
        item = as_dict(obj.get("item"))
        itype = item.get("type")
        iid = str(item.get("id", ""))
        if kind in ("item.started", "item.completed") and itype in _TOOL_ITEMS:
            tool, args = _codex_call(item)
            if iid not in started:
                started.add(iid)
                out.call(tool, args, iid)
            if kind == "item.completed" and itype != "web_search":
                status = str(item.get("status", ""))
                exit_code = item.get("exit_code")
                failed = status in ("failed", "declined") or (
                    isinstance(exit_code, int) and exit_code != 0
                )
                output = item.get("aggregated_output")
                if itype == "mcp_tool_call":
                    output = as_dict(item.get("result")).get("content") or as_dict(
                        item.get("error")
                    ).get("message")
                out.result(iid, tool_output(output) if output is not None else status, failed, tool)
        elif kind == "item.completed" and itype == "agent_message":
            last_message = str(item.get("text", ""))
            out.add("message", role="assistant", text=short(last_message))
        elif kind == "item.completed" and itype == "reasoning":
            out.add("message", role="reasoning", text=short(item.get("text", "")))
        elif kind == "item.completed" and itype == "error":
            out.add("error", text=short(item.get("message", "")))
        elif kind == "turn.completed":
            usage = as_dict(obj.get("usage"))
            tokens = read_tokens(usage, "input_tokens", "output_tokens", "cached_input_tokens")
            out.add("usage", tokens=tokens, cumulative=True)
            out.add("final", text=short(last_message))
        elif kind == "turn.failed":
            out.fail(short(as_dict(obj.get("error")).get("message", "turn failed")))
        elif kind == "error":
            out.add("error", text=short(obj.get("message", "")))
    return out.events
