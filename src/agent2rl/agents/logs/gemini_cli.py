"""Gemini CLI: ``gemini -p ... --output-format stream-json``.

One JSON event a line::

    {"type":"init","session_id":..,"model":..}
    {"type":"message","role":"user"|"assistant","content":"...","delta":true}
    {"type":"tool_use","tool_name":..,"tool_id":..,"parameters":{..}}
    {"type":"tool_result","tool_id":..,"status":"success"|"error","output":..,"error":{type,
      message}}
    {"type":"error","severity":"warning"|"error","message":..}
    {"type":"result","status":"success"|"error","error":{..},"stats":{"total_tokens":..,
      "input_tokens":..,"output_tokens":..,"cached":..,"tool_calls":..}}
"""

from __future__ import annotations

from agent2rl.agents.logs.base import (
    Collector,
    Event,
    as_dict,
    json_lines,
    read_tokens,
    short,
    summarize_args,
)

LOG_FORMAT = "gemini-stream-json"


def parse(text: str) -> list[Event]:
    """Gemini CLI's stream-json. Consecutive assistant deltas join into one message; the
    result's stats are the session totals."""
    out = Collector()
    pending: list[str] = []
    last_message = ""

    def flush() -> None:
        nonlocal last_message
        if pending:
            last_message = "".join(pending)
            out.add("message", role="assistant", text=short(last_message))
            pending.clear()

    for obj in json_lines(text, out.other):
        kind = obj.get("type")
        if kind == "message" and obj.get("role") == "assistant":
            pending.append(str(obj.get("content", "")))
            if not obj.get("delta"):
                flush()
            continue
        flush()
        if kind == "message" and obj.get("role") == "user":
            out.add("message", role="user", text=short(obj.get("content", "")))
        elif kind == "tool_use":
            args = summarize_args(obj.get("parameters"))
            out.call(str(obj.get("tool_name", "")), args, str(obj.get("tool_id", "")))
        elif kind == "tool_result":
            failed = obj.get("status") == "error"
            output = obj.get("output")
            if failed and not output:
                output = as_dict(obj.get("error")).get("message", "")
            out.result(str(obj.get("tool_id", "")), output, failed)
        elif kind == "error":
            out.add("error", text=short(obj.get("message", "")))
        elif kind == "result":
            if stats := as_dict(obj.get("stats")):
                tokens = read_tokens(stats, "input_tokens", "output_tokens", "cached")
                out.add("usage", tokens=tokens, cumulative=True)
            if obj.get("status") == "error":
                out.fail(short(as_dict(obj.get("error")).get("message", "")) or "error")
            else:
                out.add("final", text=short(last_message))
    flush()
    return out.events
