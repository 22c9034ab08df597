"""The OpenAI API: Chat Completions and Responses (and any OpenAI-compatible server)."""

from __future__ import annotations

import re
from typing import Any

from agent2rl.metering.provider_tools import ToolUse, is_web_url, text, walk_dicts
from agent2rl.metering.providers.base import Endpoint, Provider, requested_count
from agent2rl.metering.stream import StreamMeter
from agent2rl.metering.usage import TokenCounts, token_count

# Chat Completions models that search the web whatever the request says
# (gpt-4o-search-preview, gpt-5-search-api).
_SEARCH_MODEL = re.compile(r"-search-(preview|api)\b")


class OpenAIProvider(Provider):
    """``/openai/v1/...``. The upstream base URL includes ``/v1`` already (as the SDKs'
    ``OPENAI_BASE_URL`` does), so that an OpenAI-compatible server can live under any path."""

    name = "openai"
    client_path = "/openai/v1"
    default_base_url = "https://api.openai.com/v1"
    base_url_env = "OPENAI_BASE_URL"
    key_envs = ("OPENAI_API_KEY",)
    # What the drivers use: Chat Completions (OpenHands, mini-swe-agent and OpenCode through
    # litellm / the AI SDK, an OpenAI-compatible server), Responses (Codex CLI), and the model
    # listing some of them read at start-up. Files, batches, fine-tuning, assistants, images,
    # audio and the rest are refused.
    endpoints = (
        Endpoint("chat/completions", ("POST",), True),
        Endpoint("responses", ("POST",), True),
        Endpoint("models", ("GET",), False),
        Endpoint("models/{rest:path}", ("GET",), False),
    )
    # ``openai-beta`` (``responses=experimental``) and Codex CLI's session headers are
    # harmless; ``openai-organization`` and ``openai-project`` (which account pays) are not
    # forwarded.
    forwarded_headers = frozenset(
        {"openai-beta", "originator", "session_id", "conversation_id", "version"}
    )

    def server_tools(self, path: str, payload: dict[str, Any]) -> list[ToolUse]:
        """Responses ``tools`` of type ``web_search*`` (``web_search_preview``...) or ``mcp``;
        ``web_search_options`` and search models (``*-search-preview``, ``*-search-api``);
        input files with a ``file_url`` and images given by ``http(s)`` URL (the provider
        fetches them)."""
        uses: list[ToolUse] = []
        for tool in payload.get("tools") or []:
            kind = text(tool.get("type")) if isinstance(tool, dict) else None
            if kind is None:
                continue
            if kind.startswith("web_search"):
                uses.append(ToolUse("web_search"))
            elif kind == "mcp":
                where = text(tool.get("server_url")) or text(tool.get("connector_id"))
                uses.append(ToolUse("mcp", url=where))
        if "web_search_options" in payload:
            uses.append(ToolUse("web_search"))
        model = text(payload.get("model")) or ""
        if _SEARCH_MODEL.search(model):
            uses.append(ToolUse("web_search", query=f"model {model}"))
        for part in walk_dicts([payload.get("input"), payload.get("messages")]):
            kind = part.get("type")
            if kind == "input_file" and part.get("file_url") is not None:
                uses.append(ToolUse("file_url", url=text(part.get("file_url"))))
            elif kind == "file" and isinstance(part.get("file"), dict):
                if part["file"].get("file_url") is not None:
                    uses.append(ToolUse("file_url", url=text(part["file"]["file_url"])))
            elif kind == "input_image" and is_web_url(part.get("image_url")):
                uses.append(ToolUse("image_url", url=part["image_url"]))
            elif kind == "image_url" and isinstance(part.get("image_url"), dict):
                if is_web_url(part["image_url"].get("url")):
                    uses.append(ToolUse("image_url", url=part["image_url"]["url"]))
        return uses

    def server_tool_uses(self, response: Any) -> list[ToolUse]:
        """Responses output items ``web_search_call`` (its action's ``query``/``queries``
        or ``url``) and ``mcp_call``; Chat Completions' ``url_citation`` annotations."""
        if not isinstance(response, dict):
            return []
        uses: list[ToolUse] = []
        for item in response.get("output") or []:
            if not isinstance(item, dict):
                continue
            if item.get("type") == "web_search_call":
                action = item.get("action") if isinstance(item.get("action"), dict) else {}
                queries = [action.get("query"), *(action.get("queries") or [])]
                found = [ToolUse("web_search", query=q) for q in dict.fromkeys(queries) if q]
                if text(action.get("url")):
                    found.append(ToolUse("web_search", url=action["url"]))
                uses += found or [ToolUse("web_search")]
            elif item.get("type") == "mcp_call":
                uses.append(ToolUse("mcp", query=f"{item.get('server_label')}:{item.get('name')}"))
        for choice in response.get("choices") or []:
            message = choice.get("message") if isinstance(choice, dict) else None
            notes = message.get("annotations") if isinstance(message, dict) else None
            for note in notes if isinstance(notes, list) else []:
                cite = note.get("url_citation") if isinstance(note, dict) else None
                if isinstance(cite, dict) and text(cite.get("url")):
                    uses.append(ToolUse("web_search", url=cite["url"]))
        return uses

    def refused_mode(self, path: str, payload: dict[str, Any]) -> str | None:
        """A Responses request with ``background: true`` answers at once with no usage (the
        work is done later, and its usage is known only to a later ``GET
        /responses/{id}``, which the proxy does not relay): the budget could not count it."""
        if path == "responses" and payload.get("background") not in (None, False):
            return (
                "background responses are refused by the agent2rl metering proxy: their "
                "answer and its token usage come later, out of the run's token budget. Send "
                "the request without background (stream it for a long answer)"
            )
        return None

    def normalize(self, usage: dict[str, Any]) -> TokenCounts:
        """Chat Completions (``prompt_tokens``, ``completion_tokens``,
        ``prompt_tokens_details.cached_tokens``) or Responses (``input_tokens``,
        ``output_tokens``, ``input_tokens_details.cached_tokens``). Both prompt counts
        include the cached tokens already; OpenAI has no cache writes."""
        chat = "prompt_tokens" in usage or "completion_tokens" in usage
        prompt, completion = ("prompt", "completion") if chat else ("input", "output")
        details = usage.get(f"{prompt}_tokens_details") or {}
        return TokenCounts(
            input=token_count(usage.get(f"{prompt}_tokens")),
            output=token_count(usage.get(f"{completion}_tokens")),
            cached=token_count(details.get("cached_tokens")),
        )

    def observe(self, event: dict[str, Any], meter: StreamMeter) -> bool:
        """A Responses stream carries usage in ``response.completed`` (and errors in
        ``response.failed``); a Chat Completions stream in a last chunk with ``choices: []``,
        which is dropped when the proxy asked for it (see :meth:`ask_stream_usage`)."""
        kind = event.get("type")
        if isinstance(kind, str) and kind.startswith("response."):
            response = event.get("response")
            if isinstance(response, dict):
                meter.model = response.get("model") or meter.model
                if isinstance(response.get("usage"), dict):
                    meter.usage = response["usage"]
                if isinstance(response.get("error"), dict):
                    meter.error = str(response["error"].get("message"))[:500]
            # The Responses stream's last event, whichever way the response ended.
            if kind in ("response.completed", "response.incomplete", "response.failed"):
                meter.ended = True
                meter.final = meter.usage is not None
            return True
        meter.model = event.get("model") or meter.model
        if isinstance(event.get("usage"), dict):
            # Chat Completions sends usage once, in the stream's last chunk.
            meter.usage = event["usage"]
            meter.final = True
            if meter.drop_usage_chunk and event.get("choices") == []:
                return False
        return True

    def requested_output_tokens(self, payload: dict[str, Any]) -> int | None:
        """``max_completion_tokens`` (Chat Completions), its older name ``max_tokens``, or
        ``max_output_tokens`` (Responses)."""
        keys = ("max_completion_tokens", "max_tokens", "max_output_tokens")
        return next(filter(None, (requested_count(payload.get(k)) for k in keys)), None)

    def ask_stream_usage(self, path: str, payload: dict[str, Any]) -> bool:
        """A Chat Completions stream carries usage only with ``stream_options.include_usage``:
        added when the client did not ask (its extra usage-only chunk is then dropped, so a
        client that indexes ``chunk.choices[0]`` keeps working); a stream whose client asked
        is left untouched."""
        if path != "chat/completions" or payload.get("stream") is not True:
            return False
        options = payload.get("stream_options") or {}
        if options.get("include_usage"):
            return False
        payload["stream_options"] = {**options, "include_usage": True}
        return True

    def upstream_url(self, base_url: str, path: str, query: str) -> str:
        return f"{base_url.rstrip('/')}/{path}" + (f"?{query}" if query else "")

    def error_body(self, status: int, message: str) -> dict[str, Any]:
        """``{"error": {"message", "type", "param", "code"}}``; a spent budget is
        ``insufficient_quota``, as OpenAI says of an account out of credit."""
        kind, code = {
            400: ("invalid_request_error", "invalid_path"),
            401: ("invalid_request_error", "invalid_api_key"),
            403: ("invalid_request_error", "permission_denied"),
            404: ("invalid_request_error", "not_found"),
            413: ("invalid_request_error", "request_too_large"),
            429: ("insufficient_quota", "insufficient_quota"),
            502: ("api_error", "upstream_unavailable"),
            504: ("api_error", "upstream_timeout"),
        }.get(status, ("api_error", None))
        return {"error": {"message": message, "type": kind, "param": None, "code": code}}
