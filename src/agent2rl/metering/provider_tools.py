"""Provider-side tools: what in a request makes the provider itself reach the web.

A provider's server tools run on the provider's machines, not the agent's: Anthropic's
``web_search``/``web_fetch`` tools, its MCP connector (``mcp_servers``) and ``url`` content
sources; OpenAI's ``web_search`` (``web_search_preview``) and ``mcp`` tools, ``input_file``
with a ``file_url``, image URLs, Chat Completions' ``web_search_options`` and its search
models; Gemini's ``google_search`` (``googleSearch``, ``google_search_retrieval``) and
``url_context`` tools and ``fileData`` URLs. Each fetches whatever the model asks for — a
benchmark's public test set included — past every deny list of the run's sandbox, which only
sees the agent's own traffic.

The metering proxy therefore refuses a request that carries any of them (each provider finds
its own, :meth:`~agent2rl.metering.providers.base.Provider.server_tools`) unless the run allows
them (``agent2rl run --allow-provider-tools``, or an agent spec with ``provider_tools =
true``). Every use it lets through, and every one it refuses, is a line of the run's
``record/provider_tools.jsonl`` (:func:`provider_tools_path`, beside the usage file): what the
request declared (a tool, a URL it hands the provider) and what the answer shows the provider
did (a search query, a fetched URL: :meth:`~agent2rl.metering.providers.base.Provider.
server_tool_uses`). The contamination check reads that file
(:func:`agent2rl.integrity.contamination.read_provider_tool_log`).

A line: ``{"time", "api", "model", "tool", "query", "url", "source", "allowed", "status"}``
where ``source`` is ``request`` (declared) or ``response`` (done), ``query``/``url`` may be
null (a declared search tool names no query yet), ``allowed`` says whether the request was
relayed (false: refused, for its tools or any other reason) and ``status`` is its answer's.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent2rl.files import append_jsonl_line, read_jsonl_tolerant

#: the file beside the usage file that lists every provider-side tool use
PROVIDER_TOOLS_LOG = "provider_tools.jsonl"
#: the run flag that lets a run's agent use provider-side tools (named by every refusal)
ALLOW_FLAG = "--allow-provider-tools"


@dataclass(frozen=True)
class ToolUse:
    """One provider-side tool in a request or an answer: ``tool`` (``web_search``,
    ``web_fetch``, ``url_source``, ``mcp``, ``file_url``, ``image_url``, ``google_search``,
    ``url_context``...) and, when known, the ``query`` searched or the ``url`` fetched."""

    tool: str
    query: str | None = None
    url: str | None = None

    def describe(self) -> str:
        """``tool`` with its URL or query, as a refusal names it."""
        what = self.url or self.query
        return f"{self.tool} ({what[:80]})" if what else self.tool


def provider_tools_path(usage_file: Path) -> Path:
    """The provider-tool log beside a usage file (``record/llm_usage.jsonl`` ->
    ``record/provider_tools.jsonl``)."""
    return Path(usage_file).with_name(PROVIDER_TOOLS_LOG)


def is_web_url(value: Any) -> bool:
    """Whether ``value`` is an ``http(s)://`` address (a ``data:`` URL carries its bytes)."""
    return isinstance(value, str) and value[:8].lower().startswith(("http://", "https://"))


def text(value: Any) -> str | None:
    """``value`` when it is a string (a field of untrusted JSON), else None."""
    return value if isinstance(value, str) else None


def walk_dicts(value: Any) -> Iterable[dict[str, Any]]:
    """Every JSON object inside ``value`` (``value`` itself first), depth first."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            yield item
            stack.extend(reversed(list(item.values())))
        elif isinstance(item, list):
            stack.extend(reversed(item))


def refusal_message(uses: list[ToolUse]) -> str:
    """The one error a refused request gets: what it asked for, and the flag that allows it."""
    named = ", ".join(dict.fromkeys(u.describe() for u in uses))
    return (
        f"this request asks the provider to reach the web itself ({named}): provider-side "
        f"tools are off in this run, since they fetch past the run's deny lists. Run with "
        f"`agent2rl run {ALLOW_FLAG}` to allow them (each use is then recorded in "
        f"record/{PROVIDER_TOOLS_LOG}), or leave the tool out of the request"
    )


def append_tool_uses(
    path: Path,
    *,
    api: str,
    model: str | None,
    requested: list[ToolUse],
    done: list[ToolUse],
    allowed: bool,
    status: int | None,
) -> None:
    """Append one line per use, declared (``requested``) then done (``done``)."""
    now = round(time.time(), 3)
    for source, uses in (("request", requested), ("response", done)):
        for use in uses:
            line = {"time": now, "api": api, "model": model, **dataclasses.asdict(use)}
            line.update(source=source, allowed=allowed, status=status)
            append_jsonl_line(path, line)


#: The lines of a provider-tool log (a torn or foreign line skipped; none when absent).
read_tool_uses = read_jsonl_tolerant
