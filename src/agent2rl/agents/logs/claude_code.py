"""Claude Code: ``claude -p --output-format stream-json --verbose``.

One JSON object a line::

    {"type":"system","subtype":"init",...}
    {"type":"assistant","message":{"id":"msg_1","content":[{"type":"text",...}|{"type":
      "tool_use","id":..,"name":..,"input":{..}}],"usage":{...}}, "error": "..."?}
    {"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":..,"content":..,
      "is_error":false}]}}
    {"type":"result","subtype":"success","is_error":false,"result":"...","usage":{...},
      "modelUsage":{"claude-...":{"inputTokens":..,"outputTokens":..,"cacheReadInputTokens":..,
      "cacheCreationInputTokens":..}}}

A message's ``usage`` is the Anthropic API's own, normalised as the metering proxy does.
"""

from __future__ import annotations

from typing import Any

from agent2rl.agents.logs.base import (
    Collector,
    Event,
    as_dict,
    as_list,
    json_lines,
    short,
    summarize_args,
    tool_output,
)
from agent2rl.metering.providers import PROVIDERS
from agent2rl.metering.usage import TokenCounts

LOG_FORMAT = "claude-stream-json"

_ANTHROPIC = PROVIDERS["anthropic"]
# modelUsage's names for the Anthropic API's usage fields.
_MODEL_USAGE_FIELDS = {
    "inputTokens": "input_tokens",
    "outputTokens": "output_tokens",
    "cacheReadInputTokens": "cache_read_input_tokens",
    "cacheCreationInputTokens": "cache_creation_input_tokens",
}


def _model_tokens(usage: dict[str, Any]) -> TokenCounts:
    """One model's session totals in the result line's ``modelUsage``: the API's usage
    fields in camelCase (``inputTokens`` likewise without the cache reads and writes)."""
    return _ANTHROPIC.normalize({api: usage.get(cc) for cc, api in _MODEL_USAGE_FIELDS.items()})


def parse(text: str) -> list[Event]:
    """Claude Code's stream-json. Usage: one per API message id from assistant lines (Claude
    Code repeats a message once per content block, with the same usage), replaced by the
    result line's session totals (``modelUsage`` over all models, side calls included)."""
    out = Collector()
    seen_messages: set[str] = set()
    for obj in json_lines(text, out.other):
        kind = obj.get("type")
        msg = as_dict(obj.get("message"))
        if kind == "assistant":
            content = as_list(msg.get("content"))
            for block in content:
                block = as_dict(block)
                btype = block.get("type")
                if btype == "text":
                    out.message("assistant", block.get("text", ""))
                elif btype == "thinking":
                    out.message("reasoning", block.get("thinking", ""))
                elif btype == "tool_use":
                    args = summarize_args(block.get("input"))
                    out.call(str(block.get("name", "")), args, str(block.get("id", "")))
            if obj.get("error"):
                texts = [as_dict(b).get("text", "") for b in content]
                out.add("error", text=short(" ".join(t for t in texts if t) or obj["error"]))
            mid = str(msg.get("id", ""))
            usage = as_dict(msg.get("usage"))
            if usage and mid and mid not in seen_messages:
                seen_messages.add(mid)
                tokens = _ANTHROPIC.normalize(usage)
                if tokens.total:
                    out.add("usage", tokens=tokens)
        elif kind == "user":
            for block in as_list(msg.get("content")):
                block = as_dict(block)
                if block.get("type") == "tool_result":
                    call_id, failed = str(block.get("tool_use_id", "")), bool(block.get("is_error"))
                    out.result(call_id, tool_output(block.get("content")), failed)
        elif kind == "result":
            is_error = bool(obj.get("is_error")) or str(obj.get("subtype", "")).startswith("error")
            model_usage = [as_dict(v) for v in as_dict(obj.get("modelUsage")).values()]
            if model_usage:
                tokens = sum((_model_tokens(m) for m in model_usage), TokenCounts())
            else:
                tokens = _ANTHROPIC.normalize(as_dict(obj.get("usage")))
            if model_usage or obj.get("usage"):
                out.add("usage", tokens=tokens, cumulative=True)
            result = obj.get("result")
            final = short(result if isinstance(result, str) else obj.get("subtype", ""))
            message = final or "the agent ended with an error"
            last_error = next((e.text for e in reversed(out.events) if e.kind == "error"), None)
            if is_error and message != last_error:  # the failed assistant turn said it already
                out.add("error", text=message)
            out.add("final", text=final, is_error=is_error)
    return out.events
