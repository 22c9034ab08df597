"""The Anthropic Messages API."""

from __future__ import annotations

import re
from typing import Any

from agent2rl.metering.provider_tools import ToolUse, is_web_url, text, walk_dicts
from agent2rl.metering.providers.base import Endpoint, Provider, requested_count
from agent2rl.metering.stream import StreamMeter
from agent2rl.metering.usage import TokenCounts, token_count

#: ``anthropic-beta`` features forwarded upstream (a beta's name without its date): what
#: Claude Code and the SDKs turn on for plain Messages requests. Everything else is dropped,
#: notably the betas of server tools and remote content (``web-fetch``, ``web-search``,
#: ``code-execution``, ``mcp-client``, ``files-api``, ``skills``) and of other accounts'
#: credentials (``oauth``). Claude Code needs its betas (``claude-code``,
#: ``interleaved-thinking``, ``fine-grained-tool-streaming``, ``context-management``...):
#: a body using a feature whose beta is missing is a 400 upstream, so the header is filtered
#: name by name rather than dropped.
ANTHROPIC_BETAS = frozenset(
    {
        "claude-code",
        "interleaved-thinking",
        "fine-grained-tool-streaming",
        "context-management",
        "context-1m",
        "prompt-caching",
        "extended-cache-ttl",
        "token-efficient-tools",
        "token-counting",
        "output-128k",
        "max-tokens-3-5-sonnet",
        "model-context-window-exceeded",
        "effort",
        "structured-outputs",
    }
)
_BETA_DATE = re.compile(r"-(\d{4}-\d{2}-\d{2}|\d{8})$")

# Server tools by their ``type`` prefix (``web_search_20250305``, ``web_fetch_20250910``).
_SERVER_TOOL_TYPES = {"web_search_": "web_search", "web_fetch_": "web_fetch"}


def beta_name(beta: str) -> str:
    """A beta's name without its date (``claude-code-20250219`` -> ``claude-code``)."""
    return _BETA_DATE.sub("", beta.strip().lower())


class AnthropicProvider(Provider):
    """``/anthropic/v1/...``; the key comes as ``x-api-key`` (or a bearer token)."""

    name = "anthropic"
    client_path = "/anthropic"
    default_base_url = "https://api.anthropic.com"
    base_url_env = "ANTHROPIC_BASE_URL"
    key_envs = ("ANTHROPIC_API_KEY",)
    key_header = "x-api-key"
    # What Claude Code uses: Messages, token counting, and the model listing. Message
    # batches, files, skills and the admin API are refused.
    endpoints = (
        Endpoint("messages", ("POST",), True),
        Endpoint("messages/count_tokens", ("POST",), False),
        Endpoint("models", ("GET",), False),
        Endpoint("models/{rest:path}", ("GET",), False),
    )
    # ``x-app`` and the browser flag are what Claude Code and the SDK send; harmless.
    forwarded_headers = frozenset(
        {
            "anthropic-version",
            "anthropic-beta",
            "anthropic-dangerous-direct-browser-access",
            "x-app",
        }
    )

    def forward_header(self, name: str, value: str) -> str | None:
        """``anthropic-beta`` keeps only the betas of :data:`ANTHROPIC_BETAS` (dropped when
        none is left); the rest as the base allowlist says."""
        if name != "anthropic-beta":
            return super().forward_header(name, value)
        kept = [b.strip() for b in value.split(",") if beta_name(b) in ANTHROPIC_BETAS]
        return ",".join(kept) or None

    def server_tools(self, path: str, payload: dict[str, Any]) -> list[ToolUse]:
        """``tools`` of a server type (``web_search_*``, ``web_fetch_*``, ``mcp_toolset``),
        ``mcp_servers`` (the MCP connector: the provider calls a remote server), and content
        blocks whose ``source`` is a ``url`` (a document or image the provider fetches)."""
        uses: list[ToolUse] = []
        for tool in payload.get("tools") or []:
            kind = tool.get("type") if isinstance(tool, dict) else None
            if not isinstance(kind, str):
                continue
            for prefix, name in _SERVER_TOOL_TYPES.items():
                if kind.startswith(prefix):
                    uses.append(ToolUse(name))
            if kind == "mcp_toolset":
                uses.append(ToolUse("mcp", query=str(tool.get("mcp_server_name") or "")))
        for server in payload.get("mcp_servers") or []:
            uses.append(
                ToolUse("mcp", url=text(server.get("url")) if isinstance(server, dict) else None)
            )
        for block in walk_dicts([payload.get("system"), payload.get("messages")]):
            source = block.get("source")
            if isinstance(source, dict) and source.get("type") == "url":
                uses.append(ToolUse("url_source", url=text(source.get("url"))))
            elif is_web_url(block.get("url")) and block.get("type") in ("document", "image"):
                uses.append(ToolUse("url_source", url=block["url"]))
        return uses

    def server_tool_uses(self, response: Any) -> list[ToolUse]:
        """``server_tool_use`` blocks (``web_search`` with its ``query``, ``web_fetch``
        with its ``url``) and ``mcp_tool_use`` blocks."""
        if not isinstance(response, dict) or not isinstance(response.get("content"), list):
            return []
        uses: list[ToolUse] = []
        for block in response["content"]:
            if not isinstance(block, dict):
                continue
            args = block.get("input") if isinstance(block.get("input"), dict) else {}
            if block.get("type") == "server_tool_use":
                name = str(block.get("name") or "server_tool")
                uses.append(ToolUse(name, query=text(args.get("query")), url=text(args.get("url"))))
            elif block.get("type") == "mcp_tool_use":
                uses.append(ToolUse("mcp", query=f"{block.get('server_name')}:{block.get('name')}"))
        return uses

    def normalize(self, usage: dict[str, Any]) -> TokenCounts:
        """``input_tokens`` excludes cache reads and writes, so they are added to make
        ``input`` the full prompt; ``cached`` is ``cache_read_input_tokens`` and
        ``cache_write`` is ``cache_creation_input_tokens``."""
        read = token_count(usage.get("cache_read_input_tokens"))
        write = token_count(usage.get("cache_creation_input_tokens"))
        return TokenCounts(
            input=token_count(usage.get("input_tokens")) + read + write,
            output=token_count(usage.get("output_tokens")),
            cached=read,
            cache_write=write,
        )

    def observe(self, event: dict[str, Any], meter: StreamMeter) -> bool:
        """Every stream carries usage: ``message_start`` has the prompt's, each
        ``message_delta`` the cumulative rest."""
        kind = event.get("type")
        if kind == "message_start":
            message = event.get("message") or {}
            meter.model = message.get("model") or meter.model
            meter.usage = dict(message.get("usage") or {})
        elif kind == "message_delta" and isinstance(event.get("usage"), dict):
            # message_delta usage is cumulative; null fields mean "unchanged".
            meter.usage = {**(meter.usage or {})}
            meter.usage.update({k: v for k, v in event["usage"].items() if v is not None})
            # The one message_delta comes last, right before message_stop.
            meter.final = True
        return True

    def requested_output_tokens(self, payload: dict[str, Any]) -> int | None:
        """``max_tokens`` (required by the Messages API)."""
        return requested_count(payload.get("max_tokens"))

    def error_body(self, status: int, message: str) -> dict[str, Any]:
        """``{"type": "error", "error": {"type", "message"}}``."""
        kind = {
            400: "invalid_request_error",
            401: "authentication_error",
            403: "permission_error",
            404: "not_found_error",
            413: "request_too_large",
            429: "rate_limit_error",
        }.get(status, "api_error")
        return {"type": "error", "error": {"type": kind, "message": message}}

    def stream_error_event(self, message: str) -> bytes:
        # Anthropic names its events; the SDK raises on ``event: error``.
        return b"event: error\n" + super().stream_error_event(message)
