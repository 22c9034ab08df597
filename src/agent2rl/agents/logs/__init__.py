"""Agent logs as typed events: what each coding-agent CLI did, in one shape.

Each CLI logs in its own format; a parser per format (a spec's ``log_format``), one module
each, turns a log into a list of :class:`Event`, and :data:`PARSERS` merges them into one
table:

==================  ==================================================================
kind                meaning (fields used)
==================  ==================================================================
``message``         text from the model (``role`` assistant, or ``reasoning``) or the
                    user prompt (``role`` user); ``text``
``tool_call``       the agent called a tool: ``tool``, ``args`` (a short summary),
                    ``call_id``
``tool_result``     a tool's answer: ``tool``, ``text`` (shortened output), ``is_error``,
                    ``call_id``
``usage``           ``tokens`` (:class:`~agent2rl.metering.TokenCounts`: ``input``, cached
                    included, ``output``, ``cached``, ``cache_write``); ``cumulative``
                    when it is a running total for the whole session (it replaces what
                    came before) rather than one call's
``error``           an error the CLI reported (or a stderr line that looks like one)
``final``           the agent's final answer or exit status: ``text``, ``is_error``
==================  ==================================================================

Each format's module names the CLI command that writes it (``text.py``: anything else);
``base.py`` holds Event, AgentLog, total_usage and the helpers the parsers share.

Parsers are tolerant: agent logs interleave stderr with the JSON lines and may end in a torn
line (the agent was killed at the deadline). Lines that are not JSON objects are skipped,
except that a line that looks like an error becomes an ``error`` event; unknown event types
and malformed fields are skipped. No parser raises on any input.

The metering proxy's usage file is the authoritative token count of a run; the usage here is
what the CLI itself reported, for cross-checking and for agents run without the proxy. Where
a log carries a provider's own usage object (Claude Code, mini-SWE-agent), it is normalised
by the proxy's provider class, so both counts mean the same.

A new format is one module with ``LOG_FORMAT`` and ``parse(text) -> list[Event]``, added to
:data:`PARSERS`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from agent2rl.agents.logs import (
    claude_code,
    codex,
    gemini_cli,
    mini_swe_agent,
    opencode,
    openhands,
)
from agent2rl.agents.logs import text as plain_text
from agent2rl.agents.logs.base import AgentLog, Event, EventKind, summarize_args, total_usage
from agent2rl.registry import Registry

Parser = Callable[[str], list[Event]]


def _parser(obj: object) -> Parser:
    """An ``agent2rl.log_parsers`` entry point names a parse function, or a module with
    ``parse`` (like the modules here)."""
    return getattr(obj, "parse", obj)  # type: ignore[return-value]


#: Every log format by name (a spec's ``log_format``) -> its parser: the modules here, and
#: installed distributions' entry points in the ``agent2rl.log_parsers`` group (so an agent
#: spec TOML can name a parser shipped with it). A second parser under a taken name is
#: refused (:class:`~agent2rl.registry.RegistryConflict`).
PARSERS: Registry[Parser] = Registry("log_parsers", "log format", coerce=_parser)
for _module in (plain_text, claude_code, codex, gemini_cli, opencode, openhands, mini_swe_agent):
    PARSERS.register(_module.LOG_FORMAT, _module.parse)


class LogSpec(Protocol):
    """What reading a run's log needs of its agent spec (an
    :class:`~agent2rl.agents.spec.AgentSpec`, which imports this package, not the reverse)."""

    @property
    def log_format(self) -> str: ...

    @property
    def log_file(self) -> str: ...


def parse_log(text: str, log_format: str) -> list[Event]:
    """``text`` parsed with the parser named ``log_format``; an unknown name falls back to
    plain text. Never raises (a parser bug on odd input degrades to plain text)."""
    try:
        return PARSERS.get(log_format, plain_text.parse)(text)
    except Exception:  # a malformed log must never break a run's report
        return plain_text.parse(text)


def read_agent_log(spec: LogSpec, agent_log: Path, workspace: Path | None = None) -> AgentLog:
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
        content = path.read_bytes().decode("utf-8", errors="replace")
    except OSError:
        return AgentLog(source=path)
    events = parse_log(content, log_format)
    return AgentLog(events, total_usage(events), path)


__all__ = [
    "PARSERS",
    "AgentLog",
    "Event",
    "EventKind",
    "LogSpec",
    "Parser",
    "parse_log",
    "read_agent_log",
    "summarize_args",
    "total_usage",
]
