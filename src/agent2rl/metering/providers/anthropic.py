"""The Anthropic Messages API."""

from __future__ import annotations

from typing import Any

from fastapi import Request

from agent2rl.metering.providers.base import Endpoint, Provider, requested_count
from agent2rl.metering.stream import StreamMeter
from agent2rl.metering.usage import TokenCounts, token_count


class AnthropicProvider(Provider):
    """``/anthropic/v1/...``; the key comes as ``x-api-key`` (or a bearer token)."""

    name = "anthropic"
    client_path = "/anthropic"
    default_base_url = "https://api.anthropic.com"
    base_url_env = "ANTHROPIC_BASE_URL"
    key_envs = ("ANTHROPIC_API_KEY",)
    # What Claude Code uses: Messages, token counting, and the model listing. Message
    # batches, files, skills and the admin API are refused.
    endpoints = (
        Endpoint("messages", ("POST",), True),
        Endpoint("messages/count_tokens", ("POST",), False),
        Endpoint("models", ("GET",), False),
        Endpoint("models/{rest:path}", ("GET",), False),
    )

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

    def given_keys(self, request: Request) -> list[str]:
        keys = super().given_keys(request)
        if "x-api-key" in request.headers:
            keys.append(request.headers["x-api-key"].strip())
        return keys

    def auth_headers(self, api_key: str) -> dict[str, str]:
        return {"x-api-key": api_key} if api_key else {}

    def error_body(self, status: int, message: str) -> dict[str, Any]:
        """``{"type": "error", "error": {"type", "message"}}``."""
        kind = {
            400: "invalid_request_error",
            401: "authentication_error",
            404: "not_found_error",
            413: "request_too_large",
            429: "rate_limit_error",
        }.get(status, "api_error")
        return {"type": "error", "error": {"type": kind, "message": message}}

    def stream_error_event(self, message: str) -> bytes:
        # Anthropic names its events; the SDK raises on ``event: error``.
        return b"event: error\n" + super().stream_error_event(message)
