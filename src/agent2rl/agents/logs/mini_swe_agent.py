"""mini-SWE-agent: its trajectory file (``-o``), one JSON document::

    {"info":{"exit_status":..,"submission":..,"model_stats":{..}},
     "messages":[{"role":"system"|"user"|"assistant"|"tool"|"exit", "content":..,
       "tool_calls":[{"function":{"name":..,"arguments":"{json}"},"id":..}],
       "extra":{"response":{"usage":{"prompt_tokens":..,"completion_tokens":..,
       "prompt_tokens_details":{"cached_tokens":..}}}, "returncode":..,"raw_output":..,
       "exit_status":..}}],
     "trajectory_format":"mini-swe-agent-1.1"}

Text-based configs (format 1) put commands in ```bash blocks and outputs in user messages.
A response's ``usage`` is the OpenAI API's own (litellm), normalised as the metering proxy
does.
"""

from __future__ import annotations

import json
import re

from agent2rl.agents.logs.base import (
    Collector,
    Event,
    as_dict,
    as_list,
    short,
    summarize_args,
    tool_output,
)
from agent2rl.agents.logs.text import parse as parse_text
from agent2rl.metering.providers import PROVIDERS

LOG_FORMAT = "mini-swe-agent"

_OPENAI = PROVIDERS["openai"]

_BASH_BLOCK = re.compile(r"```(?:bash|sh)?\s*\n(.*?)```", re.DOTALL)
_RETURNCODE = re.compile(r"<returncode>\s*(-?\d+)\s*</returncode>")
_MINI_SUBMIT = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"


def parse(text: str) -> list[Event]:
    """A mini-SWE-agent trajectory (the JSON file). Each assistant message's response
    carries that call's usage; the exit message is the final one. Text that is not a
    trajectory is parsed as plain text."""
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, ValueError, RecursionError):
        return parse_text(text)
    if not isinstance(data, dict) or not isinstance(data.get("messages"), list):
        return parse_text(text)
    out = Collector()
    submits: set[str] = set()
    assistant_seen = False
    for msg in data["messages"]:
        msg = as_dict(msg)
        role, extra = msg.get("role"), as_dict(msg.get("extra"))
        content = tool_output(msg.get("content"))
        if role == "assistant":
            assistant_seen = True
            out.message("assistant", content)
            calls = [as_dict(c) for c in as_list(msg.get("tool_calls"))]
            for call in calls:
                fn = as_dict(call.get("function"))
                call_id, args = str(call.get("id", "")), summarize_args(fn.get("arguments"))
                if _MINI_SUBMIT in args:
                    submits.add(call_id)
                out.call(str(fn.get("name", "")), args, call_id)
            if not calls:
                for block in _BASH_BLOCK.findall(content)[:1]:
                    out.add("tool_call", tool="bash", args=summarize_args({"command": block}))
            usage = as_dict(as_dict(extra.get("response")).get("usage"))
            if usage:
                out.add("usage", tokens=_OPENAI.normalize(usage))
        elif role == "tool":
            call_id = str(msg.get("tool_call_id", ""))
            code = extra.get("returncode")
            output = extra.get("raw_output", content)
            # The submit command is not executed (return code -1): not a failure.
            failed = isinstance(code, int) and code != 0 and call_id not in submits
            out.result(call_id, output, failed, out.tools.get(call_id, "bash"))
        elif role == "user" and assistant_seen and "<returncode>" in content:
            match = _RETURNCODE.search(content)
            code = int(match.group(1)) if match else 0
            out.add("tool_result", tool="bash", text=short(content), is_error=code != 0)
        elif role == "user" and not assistant_seen:
            out.add("message", role="user", text=short(content))
        elif role == "exit":
            status = str(extra.get("exit_status", "") or content)
            failed = status not in ("Submitted", "")
            if failed:
                out.add("error", text=short(f"{status}: {content}" if content else status))
            out.add("final", text=short(extra.get("submission") or status), is_error=failed)
    info = as_dict(data.get("info"))
    if not any(e.kind == "final" for e in out.events) and info.get("exit_status"):
        status = str(info["exit_status"])
        out.add("final", text=short(status), is_error=status != "Submitted")
    return out.events
