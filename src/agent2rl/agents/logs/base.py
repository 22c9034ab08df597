"""The shape every agent log parser produces (:class:`Event`), the parsed log with its
summary (:class:`AgentLog`), and the tolerant helpers that keep the parsers from raising
(:func:`as_dict` / :func:`as_list` / :func:`short` turn a malformed field into an empty one).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from agent2rl.metering.usage import TokenCounts, token_count

EventKind = Literal["message", "tool_call", "tool_result", "usage", "error", "final"]

TEXT_LIMIT = 500  # characters kept of a message, tool output or error
ARGS_LIMIT = 160  # characters of a tool call's argument summary


@dataclass(frozen=True)
class Event:
    """One thing an agent did (see :mod:`agent2rl.agents.logs` for the fields each kind
    uses). ``tokens`` is set on ``usage`` events only."""

    kind: EventKind
    text: str = ""
    role: str = ""
    tool: str = ""
    args: str = ""
    call_id: str = ""
    is_error: bool = False
    tokens: TokenCounts = TokenCounts()
    cumulative: bool = False


@dataclass(frozen=True)
class AgentLog:
    """A parsed agent log: its events, token usage (as the CLI reported it) and a summary
    for reports."""

    events: list[Event] = field(default_factory=list)
    usage: TokenCounts = field(default_factory=TokenCounts)
    source: Path | None = None

    def summary(self) -> dict[str, Any]:
        """Counts for a report: ``messages`` (assistant), ``tool_calls`` (total and
        ``tools`` by name), ``tool_errors``, ``errors``, the ``usage`` totals
        (``input_tokens``, ``output_tokens``, ``cached_tokens``), the ``final`` text (the
        last final event's, ``""`` if the agent never finished) and ``last_error``: the
        CLI's own words for the last error it reported (``""`` if none) — for a CLI that
        could not start (a refused key, an outage), the reason the report shows."""
        tools = Counter(e.tool for e in self.events if e.kind == "tool_call")
        finals = [e for e in self.events if e.kind == "final"]
        errors = [e.text for e in self.events if e.kind == "error" and e.text]
        errors += [e.text for e in finals if e.is_error and e.text]
        return {
            "messages": sum(e.kind == "message" and e.role == "assistant" for e in self.events),
            "tool_calls": sum(tools.values()),
            "tools": dict(tools.most_common()),
            "tool_errors": sum(e.kind == "tool_result" and e.is_error for e in self.events),
            "errors": sum(e.kind == "error" for e in self.events),
            "input_tokens": self.usage.input,
            "output_tokens": self.usage.output,
            "cached_tokens": self.usage.cached,
            "final": finals[-1].text if finals else "",
            "last_error": errors[-1] if errors else "",
        }


def total_usage(events: list[Event]) -> TokenCounts:
    """Token totals: per-call usage events add up; a ``cumulative`` one (a session total)
    replaces everything before it. No usage events give zeros."""
    total = TokenCounts()
    for e in events:
        if e.kind == "usage":
            total = e.tokens if e.cumulative else total + e.tokens
    return total


def short(text: Any, limit: int = TEXT_LIMIT) -> str:
    """``text`` as a stripped string of at most ``limit`` characters (cut with ``…``);
    None is ``""`` and anything else its ``str``."""
    s = ("" if text is None else str(text)).strip()
    return s if len(s) <= limit else s[: limit - 1] + "…"


def as_dict(value: Any) -> dict[str, Any]:
    """``value`` if it is a dict, else ``{}`` (a log field of an unexpected type)."""
    return value if isinstance(value, dict) else {}


def as_list(value: Any) -> list[Any]:
    """``value`` if it is a list, else ``[]``."""
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
            return short(" ".join(args.split()), limit)
    if isinstance(args, dict):
        for key in _SUMMARY_KEYS:
            value = args.get(key)
            if isinstance(value, list):
                value = " ".join(str(v) for v in value)
            if isinstance(value, str) and value.strip():
                return short(" ".join(value.split()), limit)
    try:
        text = json.dumps(args, ensure_ascii=False, separators=(",", ":"), default=str)
    except (TypeError, ValueError):
        text = str(args)
    return short(text, limit)


_ERROR_LINE = re.compile(
    r"^\s*(Traceback \(most recent call last\)|\w*(Error|Exception)\b[:\s]|ERROR\b|error:|"
    r"fatal:|FATAL\b)|cannot be used with|Invalid auth",
    re.IGNORECASE,
)


def is_error_line(line: str) -> bool:
    """Whether a non-JSON line looks like an error: a traceback start, ``SomeError:``,
    ``ERROR``, ``error:``, ``fatal:`` or a CLI's known refusals."""
    return bool(_ERROR_LINE.search(line))


def json_lines(text: str, on_other: Callable[[str], None]) -> Iterator[dict[str, Any]]:
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


class Collector:
    """Collects a parser's events; non-JSON lines that look like errors become error
    events (pass :meth:`other` to :func:`json_lines`). Remembers each tool call's name by
    its id, for results that carry only the id."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.tools: dict[str, str] = {}

    def add(self, kind: EventKind, **fields: Any) -> None:
        self.events.append(Event(kind, **fields))

    def other(self, line: str) -> None:
        if is_error_line(line):
            self.add("error", text=short(line))

    def message(self, role: str, text: Any) -> None:
        """A message of ``text`` (shortened), unless it is blank."""
        if str(text).strip():
            self.add("message", role=role, text=short(text))

    def call(self, tool: str, args: str, call_id: str = "") -> None:
        self.tools[call_id] = tool
        self.add("tool_call", tool=tool, args=args, call_id=call_id)

    def result(self, call_id: str, text: Any, is_error: bool, tool: str | None = None) -> None:
        """A tool result (``text`` shortened); ``tool`` defaults to the call's."""
        tool = self.tools.get(call_id, "") if tool is None else tool
        self.add("tool_result", tool=tool, call_id=call_id, text=short(text), is_error=is_error)

    def fail(self, message: str) -> None:
        """The CLI's own failure: an error, then a final event with the same text."""
        self.add("error", text=message)
        self.add("final", text=message, is_error=True)


def read_tokens(
    usage: dict[str, Any], input_key: str, output_key: str, cached_key: str
) -> TokenCounts:
    """Counts from a CLI's own usage object, read by its field names (the input count
    includes the cached tokens in every CLI here); a missing or malformed field counts 0."""
    return TokenCounts(
        input=token_count(usage.get(input_key)),
        output=token_count(usage.get(output_key)),
        cached=token_count(usage.get(cached_key)),
    )


def tool_output(content: Any) -> str:
    """Text of a tool result's content: a string, or a list of text blocks."""
    if isinstance(content, str):
        return content
    parts = [
        str(block.get("text", "") or "") if isinstance(block, dict) else block
        for block in as_list(content)
        if isinstance(block, dict | str)
    ]
    return "\n".join(p for p in parts if p)
