"""Any other log, as plain text (also the fallback when a structured log is missing or
unreadable)."""

from __future__ import annotations

from agent2rl.agents.logs.base import Collector, Event, is_error_line, short

LOG_FORMAT = "text"


def parse(text: str) -> list[Event]:
    """Any log: each non-empty line is an assistant message, or an error when it looks like
    one (a traceback start, ``SomeError:``, ``ERROR``, ``fatal:``)."""
    out = Collector()
    for line in filter(None, map(str.strip, text.splitlines())):
        if is_error_line(line):
            out.add("error", text=short(line))
        else:
            out.add("message", role="assistant", text=short(line))
    return out.events
