"""OpenCode: ``opencode run --format json``.

One JSON event a line::

    {"type":"step_start","part":{..}}
    {"type":"text","part":{"type":"text","text":".."}}
    {"type":"reasoning","part":{"type":"reasoning","text":".."}}
    {"type":"tool_use","part":{"type":"tool","tool":"bash","callID":..,"state":{"status":
      "completed"|"error","input":{..},"output":"..","error":".."}}}
    {"type":"step_finish","part":{"reason":"tool-calls"|"stop","tokens":{"input":..,
      "output":..,"reasoning":..,"cache":{"read":..,"write":..}},"cost":..}}
    {"type":"error","error":{"name":..,"data":{"message":..}}}
"""

from __future__ import annotations

from agent2rl.agents.logs.base import Collector, Event, as_dict, json_lines, short, summarize_args
from agent2rl.metering.usage import TokenCounts, token_count

LOG_FORMAT = "opencode-json"


def parse(text: str) -> list[Event]:
    """OpenCode's JSON events. A tool part carries both the call and its result; each
    step_finish carries that step's tokens (input here counts cache reads and writes too);
    a step that finishes for a reason other than tool calls is the final answer."""
    out = Collector()
    last_message = ""
    for obj in json_lines(text, out.other):
        kind = obj.get("type")
        part = as_dict(obj.get("part"))
        if kind == "text" and str(part.get("text", "")).strip():
            last_message = str(part["text"])
            out.add("message", role="assistant", text=short(last_message))
        elif kind == "reasoning":
            out.message("reasoning", part.get("text", ""))
        elif kind == "tool_use":
            state = as_dict(part.get("state"))
            call_id = str(part.get("callID", ""))
            out.call(str(part.get("tool", "")), summarize_args(state.get("input")), call_id)
            status = state.get("status")
            if status in ("completed", "error"):
                failed = status == "error"
                out.result(call_id, state.get("error" if failed else "output"), failed)
        elif kind == "step_finish":
            tokens = as_dict(part.get("tokens"))
            cache = as_dict(tokens.get("cache"))
            read, write = token_count(cache.get("read")), token_count(cache.get("write"))
            total_in = token_count(tokens.get("input")) + read + write
            output = token_count(tokens.get("output")) + token_count(tokens.get("reasoning"))
            counts = TokenCounts(input=total_in, output=output, cached=read, cache_write=write)
            out.add("usage", tokens=counts)
            if part.get("reason") not in (None, "tool-calls", "tool_calls"):
                out.add("final", text=short(last_message))
        elif kind == "error":
            err = as_dict(obj.get("error"))
            message = as_dict(err.get("data")).get("message") or err.get("name") or "error"
            out.add("error", text=short(message))
    return out.events
