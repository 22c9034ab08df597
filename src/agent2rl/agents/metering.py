"""The LLM metering proxy: ``python -m agent2rl.agents.metering --usage-file F --ready-file R``.

One proxy runs per run, on 127.0.0.1 (a random free port). The agent is pointed at it instead
of the provider and given a per-run *proxy key*, never the real one:

==========================  ============================================================
agent's setting             value
==========================  ============================================================
``OPENAI_BASE_URL``         ``http://127.0.0.1:PORT/openai/v1``
``ANTHROPIC_BASE_URL``      ``http://127.0.0.1:PORT/anthropic``
``GOOGLE_GEMINI_BASE_URL``  ``http://127.0.0.1:PORT/gemini``
``*_API_KEY``               the proxy key (``Authorization: Bearer``, ``x-api-key``, or for
                            Gemini ``x-goog-api-key`` / a ``?key=`` query parameter)
==========================  ============================================================

Routes (anything else is a provider-shaped 404, so the real key cannot reach other endpoints,
e.g. fine-tuning or files)::

    POST /openai/v1/chat/completions          metered
    POST /openai/v1/responses                 metered
    GET  /openai/v1/models[/{id}]
    POST /anthropic/v1/messages               metered
    POST /anthropic/v1/messages/count_tokens
    GET  /anthropic/v1/models[/{id}]
    POST /gemini/v1beta/models/{m}:generateContent        metered
    POST /gemini/v1beta/models/{m}:streamGenerateContent  metered (``?alt=sse``: SSE events)
    POST /gemini/v1beta/models/{m}:countTokens
    GET  /gemini/v1beta/models[/{m}]
    GET  /healthz                             no key needed

Any other Gemini action (``:embedContent``, ``:batchGenerateContent``, cached contents, files)
is a 404 too. A Gemini key given as ``?key=`` is checked and then removed from the query; the
real key goes upstream only as ``x-goog-api-key``.

Responses pass through to the client byte for byte (streamed or not) while the proxy reads
the ``usage`` out of them, and every request — forwarded, refused or failed — appends one JSON
line to the usage file (``record/llm_usage.jsonl`` in a run, see :func:`usage_path`).

Token accounting, normalised across providers (one record's fields):

- ``input_tokens``: every prompt token the provider processed. OpenAI's ``prompt_tokens`` /
  ``input_tokens`` already include cached tokens; for Anthropic it is ``input_tokens +
  cache_read_input_tokens + cache_creation_input_tokens``.
- ``cached_tokens``: prompt tokens read from the provider's cache (a subset of input);
  ``cache_write_tokens``: Anthropic's cache creation tokens (a subset of input; 0 for OpenAI).
- ``output_tokens``: completion tokens (reasoning included).
- Gemini: ``input`` is ``promptTokenCount`` (cached content included) plus
  ``toolUsePromptTokenCount``; ``cached`` is ``cachedContentTokenCount``; ``output`` is
  ``candidatesTokenCount + thoughtsTokenCount`` (thinking tokens are billed as output).
- ``usage``: the provider's own usage object, unmodified, for anything not normalised here.

Streaming usage. Anthropic streams always carry usage (``message_start`` and the cumulative
``message_delta``); a Responses-API stream carries it in ``response.completed``; a Gemini SSE
stream (``:streamGenerateContent?alt=sse``) carries ``usageMetadata`` in its events, and the
last event that has it counts. A Chat Completions stream carries it only when the request asks
for ``stream_options.include_usage``; when the client did not ask, the proxy adds that option
upstream and then *drops* the extra usage-only chunk (``choices: []``) before it reaches the
client, so a client that indexes ``chunk.choices[0]`` keeps working. The other chunks then carry
``"usage": null``, which every client ignores; that field is the only byte difference from an
unmetered stream. When the client asked for usage itself, the stream is untouched. A Gemini
``:streamGenerateContent`` without ``alt=sse`` answers one JSON array; the proxy relays it
whole once it has ended (same bytes, no increments) and meters its last element with usage.

Token budget (``--max-total-tokens``): once the recorded ``input_tokens + output_tokens`` reach
the budget, metered requests are refused with a provider-shaped 429 ("token budget of N
exhausted"; Gemini's ``RESOURCE_EXHAUSTED``) carrying ``x-should-retry: false`` (the OpenAI and
Anthropic SDKs honour it and do not retry), and recorded with ``refused: true``. Requests
already in flight when the budget runs out finish, so the total can overshoot by them. The
running total starts from the usage file, so a restarted proxy keeps counting.

Failures. Upstream HTTP responses of any status (4xx, 5xx) pass through unchanged — they are
already provider-shaped — and are recorded with their status. When no response comes at all,
the client gets a provider-shaped 502 (connection refused, protocol error) or 504 (timeout).
If the upstream fails in the middle of a stream, the proxy ends the stream with a
provider-shaped error event. None of this stops the proxy.

Keys come from the environment (never the command line): ``AGENT2RL_PROXY_KEY`` (required),
``AGENT2RL_UPSTREAM_OPENAI_KEY``, ``AGENT2RL_UPSTREAM_ANTHROPIC_KEY``,
``AGENT2RL_UPSTREAM_GEMINI_KEY`` (any may be empty, e.g. for a local OpenAI-compatible server
without auth).
"""

from __future__ import annotations

import argparse
import hmac
import json
import os
import re
import secrets
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import anyio
import httpx
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from agent2rl.child_process import serve_on_free_port, start_announcing, stop_child
from agent2rl.recording.usage import summarize_usage
from agent2rl.rundir import RunPaths, write_json_atomic

Api = Literal["openai", "anthropic", "gemini"]

PROXY_KEY_ENV = "AGENT2RL_PROXY_KEY"
OPENAI_KEY_ENV = "AGENT2RL_UPSTREAM_OPENAI_KEY"
ANTHROPIC_KEY_ENV = "AGENT2RL_UPSTREAM_ANTHROPIC_KEY"
GEMINI_KEY_ENV = "AGENT2RL_UPSTREAM_GEMINI_KEY"

DEFAULT_OPENAI_BASE_URL = "https://api.openai.com/v1"
DEFAULT_ANTHROPIC_BASE_URL = "https://api.anthropic.com"
DEFAULT_GEMINI_BASE_URL = "https://generativelanguage.googleapis.com"


def usage_path(paths: RunPaths) -> Path:
    """Where a run's usage file lives: ``runs/<run_id>/record/llm_usage.jsonl``."""
    return paths.llm_usage


# --------------------------------------------------------------------------------------------
# Prices


@dataclass(frozen=True)
class Price:
    """List prices in USD per million tokens. ``cached_input`` / ``cache_write`` default to the
    input price when a provider has no separate rate."""

    input: float
    output: float
    cached_input: float | None = None
    cache_write: float | None = None


#: Public list prices (late 2025), for estimates in reports only — never for billing. A model
#: matches its entry exactly or with a snapshot suffix (``-20250514``, ``-2024-08-06``,
#: ``-latest``); anything else is unknown rather than guessed from a similar name, since one
#: family's versions differ in price (Opus 4.1 costs three times Opus 4.5).
PRICES: dict[str, Price] = {
    "gpt-4o": Price(2.50, 10.00, 1.25),
    "gpt-4o-mini": Price(0.15, 0.60, 0.075),
    "gpt-4.1": Price(2.00, 8.00, 0.50),
    "gpt-4.1-mini": Price(0.40, 1.60, 0.10),
    "gpt-4.1-nano": Price(0.10, 0.40, 0.025),
    "gpt-5": Price(1.25, 10.00, 0.125),
    "gpt-5-codex": Price(1.25, 10.00, 0.125),
    "gpt-5-mini": Price(0.25, 2.00, 0.025),
    "gpt-5-nano": Price(0.05, 0.40, 0.005),
    "gpt-5.1": Price(1.25, 10.00, 0.125),
    "gpt-5.1-codex": Price(1.25, 10.00, 0.125),
    "o3": Price(2.00, 8.00, 0.50),
    "o3-mini": Price(1.10, 4.40, 0.55),
    "o4-mini": Price(1.10, 4.40, 0.275),
    "claude-opus-4": Price(15.00, 75.00, 1.50, 18.75),
    "claude-opus-4-0": Price(15.00, 75.00, 1.50, 18.75),
    "claude-opus-4-1": Price(15.00, 75.00, 1.50, 18.75),
    "claude-opus-4-5": Price(5.00, 25.00, 0.50, 6.25),
    "claude-opus-4-6": Price(5.00, 25.00, 0.50, 6.25),
    "claude-sonnet-4": Price(3.00, 15.00, 0.30, 3.75),
    "claude-sonnet-4-0": Price(3.00, 15.00, 0.30, 3.75),
    "claude-sonnet-4-5": Price(3.00, 15.00, 0.30, 3.75),
    "claude-3-7-sonnet": Price(3.00, 15.00, 0.30, 3.75),
    "claude-3-5-sonnet": Price(3.00, 15.00, 0.30, 3.75),
    "claude-haiku-4-5": Price(1.00, 5.00, 0.10, 1.25),
    "claude-3-5-haiku": Price(0.80, 4.00, 0.08, 1.00),
    # Gemini: the rates for prompts up to 200k tokens (2.5 Pro charges more above that).
    "gemini-2.5-pro": Price(1.25, 10.00, 0.125),
    "gemini-2.5-flash": Price(0.30, 2.50, 0.03),
    "gemini-2.5-flash-lite": Price(0.10, 0.40, 0.01),
}

_SNAPSHOT = re.compile(r"-(\d{8}|\d{4}-\d{2}-\d{2}|latest)$")


def price_for(model: str | None, prices: dict[str, Price] | None = None) -> Price | None:
    """The price of ``model``, or None when it is unknown.

    A routing prefix (``openai/``, ``anthropic/``, ``models/``) and a snapshot suffix are
    ignored:
    ``gpt-4o-2024-08-06`` and ``anthropic/claude-sonnet-4-20250514`` are priced, ``gpt-4o-x``
    is not. Case-insensitive.
    """
    if not model:
        return None
    table = PRICES if prices is None else prices
    name = model.rsplit("/", 1)[-1].lower()
    return table.get(name) or table.get(_SNAPSHOT.sub("", name))


@dataclass(frozen=True)
class TokenCounts:
    """Normalised token counts of one response (see the module docstring)."""

    input: int = 0
    output: int = 0
    cached: int = 0
    cache_write: int = 0

    @property
    def total(self) -> int:
        return self.input + self.output


def estimate_cost(
    model: str | None, tokens: TokenCounts, prices: dict[str, Price] | None = None
) -> float | None:
    """Estimated USD cost of ``tokens`` on ``model``; None for an unknown model."""
    price = price_for(model, prices)
    if price is None:
        return None
    uncached = max(tokens.input - tokens.cached - tokens.cache_write, 0)
    cached_rate = price.input if price.cached_input is None else price.cached_input
    write_rate = price.input if price.cache_write is None else price.cache_write
    usd = (
        uncached * price.input
        + tokens.cached * cached_rate
        + tokens.cache_write * write_rate
        + tokens.output * price.output
    )
    return round(usd / 1e6, 8)


def _int(value: Any) -> int:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0


def normalize_usage(api: Api, usage: dict[str, Any]) -> TokenCounts:
    """Provider usage -> :class:`TokenCounts`. Missing fields count as 0.

    OpenAI: Chat Completions (``prompt_tokens``, ``completion_tokens``,
    ``prompt_tokens_details.cached_tokens``) or Responses (``input_tokens``, ``output_tokens``,
    ``input_tokens_details.cached_tokens``). Anthropic: ``input_tokens`` excludes cache reads
    and writes, so they are added to make ``input`` the full prompt. Gemini
    (``usageMetadata``): ``promptTokenCount`` already includes ``cachedContentTokenCount``;
    ``toolUsePromptTokenCount`` (prompts of built-in tools) is added to the input and
    ``thoughtsTokenCount`` to the output.
    """
    if api == "gemini":
        return TokenCounts(
            input=_int(usage.get("promptTokenCount")) + _int(usage.get("toolUsePromptTokenCount")),
            output=_int(usage.get("candidatesTokenCount")) + _int(usage.get("thoughtsTokenCount")),
            cached=_int(usage.get("cachedContentTokenCount")),
        )
    if api == "anthropic":
        read = _int(usage.get("cache_read_input_tokens"))
        write = _int(usage.get("cache_creation_input_tokens"))
        return TokenCounts(
            input=_int(usage.get("input_tokens")) + read + write,
            output=_int(usage.get("output_tokens")),
            cached=read,
            cache_write=write,
        )
    if "prompt_tokens" in usage or "completion_tokens" in usage:
        details = usage.get("prompt_tokens_details") or {}
        return TokenCounts(
            input=_int(usage.get("prompt_tokens")),
            output=_int(usage.get("completion_tokens")),
            cached=_int(details.get("cached_tokens")),
        )
    details = usage.get("input_tokens_details") or {}
    return TokenCounts(
        input=_int(usage.get("input_tokens")),
        output=_int(usage.get("output_tokens")),
        cached=_int(details.get("cached_tokens")),
    )


# --------------------------------------------------------------------------------------------
# The usage file


@dataclass
class UsageRecord:
    """One line of the usage file: one request to the proxy."""

    api: Api
    endpoint: str
    time: float = field(default_factory=time.time)
    model: str | None = None
    stream: bool = False
    status: int = 0
    input_tokens: int | None = None
    output_tokens: int | None = None
    cached_tokens: int | None = None
    cache_write_tokens: int | None = None
    latency_s: float = 0.0
    cost_usd: float | None = None
    refused: bool = False
    error: str | None = None
    usage: dict[str, Any] | None = None

    def set_usage(self, usage: dict[str, Any] | None) -> None:
        """Fill the token fields and cost from the provider's usage object (None: unknown)."""
        self.usage = usage
        if usage is None:
            return
        counts = normalize_usage(self.api, usage)
        self.input_tokens, self.output_tokens = counts.input, counts.output
        self.cached_tokens, self.cache_write_tokens = counts.cached, counts.cache_write
        self.cost_usd = estimate_cost(self.model, counts)


def append_record(path: Path, record: UsageRecord) -> None:
    """Append ``record`` as one JSON line with a single ``write`` on an ``O_APPEND`` file, so a
    reader never sees half a line from a live writer (lines here are far below a page)."""
    line = json.dumps(record.__dict__, separators=(",", ":"), default=str) + "\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


# --------------------------------------------------------------------------------------------
# Provider-shaped errors


def error_body(api: Api, status: int, message: str) -> dict[str, Any]:
    """An error body in the provider's own shape, so SDKs raise their usual exception.

    Gemini's is Google's ``{"error": {"code", "message", "status"}}`` with the canonical
    status name (401 ``UNAUTHENTICATED``, 429 ``RESOURCE_EXHAUSTED``, 502 ``UNAVAILABLE``,
    504 ``DEADLINE_EXCEEDED``; anything unlisted ``INTERNAL``).
    """
    if api == "gemini":
        status_name = {
            400: "INVALID_ARGUMENT",
            401: "UNAUTHENTICATED",
            403: "PERMISSION_DENIED",
            404: "NOT_FOUND",
            429: "RESOURCE_EXHAUSTED",
            502: "UNAVAILABLE",
            503: "UNAVAILABLE",
            504: "DEADLINE_EXCEEDED",
        }.get(status, "INTERNAL")
        return {"error": {"code": status, "message": message, "status": status_name}}
    if api == "anthropic":
        kind = {
            401: "authentication_error",
            404: "not_found_error",
            429: "rate_limit_error",
        }.get(status, "api_error")
        return {"type": "error", "error": {"type": kind, "message": message}}
    kind, code = {
        401: ("invalid_request_error", "invalid_api_key"),
        404: ("invalid_request_error", "not_found"),
        429: ("insufficient_quota", "insufficient_quota"),
        502: ("api_error", "upstream_unavailable"),
        504: ("api_error", "upstream_timeout"),
    }.get(status, ("api_error", None))
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


def _error_response(api: Api, status: int, message: str, *, retry: bool = True) -> JSONResponse:
    headers = {} if retry else {"x-should-retry": "false"}
    return JSONResponse(error_body(api, status, message), status_code=status, headers=headers)


def _stream_error_event(api: Api, message: str) -> bytes:
    # The SDKs turn these into an exception instead of a silently truncated answer.
    if api == "anthropic":
        data = json.dumps(error_body(api, 502, message))
        return f"event: error\ndata: {data}\n\n".encode()
    return f"data: {json.dumps(error_body(api, 502, message))}\n\n".encode()


# --------------------------------------------------------------------------------------------
# Streams

_EVENT_END = re.compile(rb"\r\n\r\n|\n\n|\r\r")


class StreamMeter:
    """Splits an SSE byte stream into whole events, reads usage out of them, and returns the
    bytes to forward (unchanged, except the usage-only chat chunk when ``drop_usage_chunk``)."""

    def __init__(self, api: Api, *, drop_usage_chunk: bool = False) -> None:
        self.api = api
        self.drop_usage_chunk = drop_usage_chunk
        self.usage: dict[str, Any] | None = None
        self.model: str | None = None
        self.error: str | None = None
        self._buf = b""

    def feed(self, chunk: bytes) -> bytes:
        """Take raw bytes; return the complete events among them that are to be forwarded."""
        self._buf += chunk
        out = []
        while m := _EVENT_END.search(self._buf):
            event, self._buf = self._buf[: m.end()], self._buf[m.end() :]
            if self._keep(event):
                out.append(event)
        return b"".join(out)

    def flush(self) -> bytes:
        """What is left at the end of the stream (an unterminated last event), forwarded as is."""
        rest, self._buf = self._buf, b""
        if rest:
            self._keep(rest)
        return rest

    def _keep(self, event: bytes) -> bool:
        data_lines = []
        for raw in event.decode("utf-8", "replace").splitlines():
            if raw.startswith("data:"):
                data_lines.append(raw[5:].removeprefix(" "))
        data = "\n".join(data_lines)
        if not data or data == "[DONE]":
            return True
        try:
            obj = json.loads(data)
        except json.JSONDecodeError:
            return True
        if not isinstance(obj, dict):
            return True
        return self._observe(obj)

    def _observe(self, obj: dict[str, Any]) -> bool:
        kind = obj.get("type")
        if isinstance(obj.get("error"), dict):
            self.error = str(obj["error"].get("message") or obj["error"])[:500]
        if self.api == "gemini":
            # Each event may carry usageMetadata (cumulative); the last one that does counts.
            if isinstance(obj.get("usageMetadata"), dict):
                self.usage = obj["usageMetadata"]
            if isinstance(obj.get("modelVersion"), str):
                self.model = self.model or obj["modelVersion"]
            return True
        if self.api == "anthropic":
            if kind == "message_start":
                message = obj.get("message") or {}
                self.model = message.get("model") or self.model
                self.usage = dict(message.get("usage") or {})
            elif kind == "message_delta" and isinstance(obj.get("usage"), dict):
                # message_delta usage is cumulative; null fields mean "unchanged".
                self.usage = {**(self.usage or {})}
                self.usage.update({k: v for k, v in obj["usage"].items() if v is not None})
            return True
        if isinstance(kind, str) and kind.startswith("response."):
            response = obj.get("response")
            if isinstance(response, dict):
                self.model = response.get("model") or self.model
                if isinstance(response.get("usage"), dict):
                    self.usage = response["usage"]
                if isinstance(response.get("error"), dict):
                    self.error = str(response["error"].get("message"))[:500]
            return True
        self.model = obj.get("model") or self.model
        if isinstance(obj.get("usage"), dict):
            self.usage = obj["usage"]
            if self.drop_usage_chunk and obj.get("choices") == []:
                return False
        return True


class _Relay:
    """One upstream stream on its way to the client: the body to send, and the bookkeeping
    that must run exactly once however the stream ends."""

    def __init__(
        self,
        proxy: _Proxy,
        resp: httpx.Response,
        meter: StreamMeter,
        rec: UsageRecord,
        started: float,
    ) -> None:
        self.proxy = proxy
        self.resp = resp
        self.meter = meter
        self.rec = rec
        self.started = started
        self.error: str | None = None
        self.complete = False
        self._finished = False

    async def body(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self.resp.aiter_bytes():
                out = self.meter.feed(chunk)
                if out:
                    yield out
            tail = self.meter.flush()
            if tail:
                yield tail
        except httpx.HTTPError as exc:
            what = "timed out" if isinstance(exc, httpx.TimeoutException) else "failed"
            self.error = f"upstream stream {what}: {type(exc).__name__}: {exc}"[:500]
            yield _stream_error_event(self.rec.api, self.error)
        self.complete = True
        # Record before the response ends, so a client that has the whole answer finds its
        # line in the usage file (almost always: SDKs may close at [DONE] a moment earlier).
        await self.finish()

    async def finish(self) -> None:
        """Record the request and release the upstream connection; idempotent."""
        if self._finished:
            return
        self._finished = True
        rec, meter = self.rec, self.meter
        if not self.complete and self.error is None:
            self.error = "client disconnected before the stream ended"
        rec.model = rec.model or meter.model
        rec.set_usage(meter.usage)
        rec.error = self.error or meter.error or rec.error
        self.proxy.record(rec, self.started)
        with anyio.CancelScope(shield=True):
            await self.resp.aclose()


class _RelayResponse(StreamingResponse):
    """Streams a :class:`_Relay` and finishes it however streaming ends — the client hanging
    up included, even before the first byte, when the body iterator never runs at all."""

    def __init__(self, relay: _Relay, status_code: int, headers: dict[str, str]) -> None:
        super().__init__(relay.body(), status_code=status_code, headers=headers)
        self.relay = relay

    async def stream_response(self, send: Any) -> None:
        try:
            await super().stream_response(send)
        finally:
            with anyio.CancelScope(shield=True):
                await self.body_iterator.aclose()  # type: ignore[attr-defined]
                await self.relay.finish()


# --------------------------------------------------------------------------------------------
# The proxy app


@dataclass(frozen=True)
class Endpoint:
    """A proxied route: ``/{api}/{version}/{path}`` -> the same path on the upstream (the
    OpenAI base URL includes ``/v1`` already; Anthropic's and Gemini's are roots).

    A Gemini ``POST models/{rest}`` is metered or not by its action (see
    :func:`gemini_action`); ``metered`` is unused for it.
    """

    api: Api
    path: str
    methods: tuple[str, ...]
    metered: bool
    version: str = "v1"


ENDPOINTS: tuple[Endpoint, ...] = (
    Endpoint("openai", "chat/completions", ("POST",), True),
    Endpoint("openai", "responses", ("POST",), True),
    Endpoint("openai", "models", ("GET",), False),
    Endpoint("openai", "models/{rest:path}", ("GET",), False),
    Endpoint("anthropic", "messages", ("POST",), True),
    Endpoint("anthropic", "messages/count_tokens", ("POST",), False),
    Endpoint("anthropic", "models", ("GET",), False),
    Endpoint("anthropic", "models/{rest:path}", ("GET",), False),
    Endpoint("gemini", "models", ("GET",), False, "v1beta"),
    Endpoint("gemini", "models/{rest:path}", ("GET", "POST"), True, "v1beta"),
)

#: Gemini model actions the proxy relays, and whether each is metered.
GEMINI_ACTIONS = {"generateContent": True, "streamGenerateContent": True, "countTokens": False}


def gemini_action(method: str, path: str) -> tuple[str | None, str | None] | None:
    """``(model, action)`` of a Gemini request to ``path`` (below ``v1beta/``), or None when
    the proxy does not relay it (a 404).

    ``POST models/gemini-2.5-pro:generateContent`` -> ``("gemini-2.5-pro",
    "generateContent")``; a POST needs one of :data:`GEMINI_ACTIONS` and a non-empty model.
    ``GET models`` and ``GET models/{m}`` are listings -> ``(m or None, None)``; a GET with an
    action (``models/m:foo``) or a deeper path (``models/m/operations``) is refused.
    """
    rest = path.removeprefix("models").removeprefix("/")
    model, sep, action = rest.partition(":")
    if "/" in model:
        return None
    if method == "GET":
        return None if sep else (model or None, None)
    if not model or action not in GEMINI_ACTIONS:
        return None
    return model, action


# Never forwarded upstream: hop-by-hop headers, credentials (replaced) and encodings (the
# proxy asks for identity so it can read usage and forward the very same bytes).
_DROP_REQUEST = {
    "host",
    "content-length",
    "connection",
    "keep-alive",
    "proxy-authorization",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "accept-encoding",
    "authorization",
    "x-api-key",
    "api-key",
    "x-goog-api-key",
    "cookie",
}
_DROP_RESPONSE = {
    "content-length",
    "content-encoding",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "date",
    "server",
    "set-cookie",
}


@dataclass
class ProxyConfig:
    """Everything the proxy app needs. Empty upstream keys send no credentials upstream."""

    usage_file: Path
    proxy_key: str
    openai_base_url: str = DEFAULT_OPENAI_BASE_URL
    anthropic_base_url: str = DEFAULT_ANTHROPIC_BASE_URL
    gemini_base_url: str = DEFAULT_GEMINI_BASE_URL
    openai_api_key: str = ""
    anthropic_api_key: str = ""
    gemini_api_key: str = ""
    max_total_tokens: int | None = None
    upstream_timeout_s: float = 600.0
    connect_timeout_s: float = 10.0
    inject_stream_usage: bool = True


class _Proxy:
    def __init__(self, cfg: ProxyConfig) -> None:
        self.cfg = cfg
        self.client: httpx.AsyncClient | None = None
        # A restarted proxy keeps counting from what the run already used.
        self.used_tokens = summarize_usage(cfg.usage_file)["total_tokens"]

    def record(self, rec: UsageRecord, started: float) -> None:
        rec.latency_s = round(time.monotonic() - started, 4)
        if rec.input_tokens or rec.output_tokens:
            self.used_tokens += (rec.input_tokens or 0) + (rec.output_tokens or 0)
        append_record(self.cfg.usage_file, rec)

    def authorized(self, request: Request, api: Api) -> bool:
        given = []
        auth = request.headers.get("authorization", "")
        if auth[:7].lower() == "bearer ":
            given.append(auth[7:].strip())
        if api == "anthropic" and "x-api-key" in request.headers:
            given.append(request.headers["x-api-key"].strip())
        if api == "gemini":
            if "x-goog-api-key" in request.headers:
                given.append(request.headers["x-goog-api-key"].strip())
            given += [v.strip() for v in request.query_params.getlist("key")]
        want = self.cfg.proxy_key.encode()
        return any(hmac.compare_digest(g.encode(), want) for g in given)

    def upstream_headers(self, request: Request, api: Api) -> dict[str, str]:
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _DROP_REQUEST}
        headers["accept-encoding"] = "identity"
        if api == "openai" and self.cfg.openai_api_key:
            headers["authorization"] = f"Bearer {self.cfg.openai_api_key}"
        if api == "anthropic" and self.cfg.anthropic_api_key:
            headers["x-api-key"] = self.cfg.anthropic_api_key
        if api == "gemini" and self.cfg.gemini_api_key:
            headers["x-goog-api-key"] = self.cfg.gemini_api_key
        return headers

    def upstream_url(self, ep: Endpoint, path: str, query: str) -> str:
        """The upstream URL; a Gemini query loses its ``key`` parameters (the proxy key)."""
        if ep.api == "openai":
            base = self.cfg.openai_base_url.rstrip("/")
        else:
            root = (
                self.cfg.anthropic_base_url if ep.api == "anthropic" else self.cfg.gemini_base_url
            )
            base = f"{root.rstrip('/')}/{ep.version}"
        if ep.api == "gemini":
            query = _without_key_param(query)
        return f"{base}/{path}" + (f"?{query}" if query else "")

    async def forward(self, request: Request, ep: Endpoint) -> Response:
        started = time.monotonic()
        path = ep.path.split("{", 1)[0] + request.path_params.get("rest", "")
        metered, gemini_model, stream = ep.metered, None, None
        if ep.api == "gemini":
            parsed = gemini_action(request.method, path)
            if parsed is None:
                return _error_response(
                    "gemini",
                    404,
                    f"{request.url.path} is not served by the agent2rl metering proxy",
                )
            gemini_model, action = parsed
            metered = GEMINI_ACTIONS.get(action or "", False)
            stream = action == "streamGenerateContent"
        rec = UsageRecord(api=ep.api, endpoint=path.rstrip("/"))
        if not self.authorized(request, ep.api):
            rec.status, rec.refused, rec.error = 401, True, "invalid or missing proxy key"
            self.record(rec, started)
            return _error_response(
                ep.api, 401, "Invalid API key for the agent2rl metering proxy (use the run's key)."
            )
        body = await request.body()
        payload = _json_object(body)
        rec.model = payload.get("model") if isinstance(payload.get("model"), str) else None
        rec.stream = payload.get("stream") is True
        if ep.api == "gemini":
            rec.model, rec.stream = gemini_model, bool(stream)
        limit = self.cfg.max_total_tokens
        if metered and limit is not None and self.used_tokens >= limit:
            msg = f"token budget of {limit} exhausted ({self.used_tokens} tokens used in this run)"
            rec.status, rec.refused, rec.error = 429, True, msg
            self.record(rec, started)
            return _error_response(ep.api, 429, msg, retry=False)
        inject = (
            self.cfg.inject_stream_usage
            and ep.api == "openai"
            and path == "chat/completions"
            and rec.stream
            and not (payload.get("stream_options") or {}).get("include_usage")
        )
        if inject:
            payload["stream_options"] = {**(payload.get("stream_options") or {})}
            payload["stream_options"]["include_usage"] = True
            body = json.dumps(payload).encode()
        assert self.client is not None
        upstream = self.client.build_request(
            request.method,
            self.upstream_url(ep, path, request.url.query),
            headers=self.upstream_headers(request, ep.api),
            content=body,
        )
        try:
            resp = await self.client.send(upstream, stream=True)
        except httpx.HTTPError as exc:
            return self._failed(rec, started, exc)
        headers = {k: v for k, v in resp.headers.items() if k.lower() not in _DROP_RESPONSE}
        rec.status = resp.status_code
        if resp.headers.get("content-type", "").startswith("text/event-stream"):
            meter = StreamMeter(ep.api, drop_usage_chunk=inject)
            relay = _Relay(self, resp, meter, rec, started)
            return _RelayResponse(relay, resp.status_code, headers)
        try:
            content = await resp.aread()
        except httpx.HTTPError as exc:
            return self._failed(rec, started, exc)
        finally:
            await resp.aclose()
        data = _json_object(content)
        if metered:
            rec.set_usage(_response_usage(ep.api, content, data))
        rec.model = rec.model or (data.get("model") if isinstance(data.get("model"), str) else None)
        if resp.status_code >= 400:
            rec.error = _error_message(data, content)
        self.record(rec, started)
        return Response(content=content, status_code=resp.status_code, headers=headers)

    def _failed(self, rec: UsageRecord, started: float, exc: httpx.HTTPError) -> Response:
        timeout = isinstance(exc, httpx.TimeoutException)
        status = 504 if timeout else 502
        what = "timed out" if timeout else "could not be reached"
        msg = f"upstream {rec.api} API {what}: {type(exc).__name__}: {exc}".rstrip(": ")
        rec.status, rec.error = status, msg[:500]
        self.record(rec, started)
        return _error_response(rec.api, status, msg)


def _without_key_param(query: str) -> str:
    """``query`` without its ``key=...`` pairs (the name compared after percent-decoding);
    every other pair is kept byte for byte, in order."""
    from urllib.parse import unquote_plus

    pairs = [p for p in query.split("&") if p and unquote_plus(p.split("=", 1)[0]) != "key"]
    return "&".join(pairs)


def _response_usage(api: Api, content: bytes, data: dict[str, Any]) -> dict[str, Any] | None:
    """The usage object of a whole (non-SSE) response body, or None.

    Gemini: ``usageMetadata``; a ``:streamGenerateContent`` without ``alt=sse`` is a JSON
    array of responses, whose last element carrying ``usageMetadata`` counts.
    """
    if api != "gemini":
        return data["usage"] if isinstance(data.get("usage"), dict) else None
    if isinstance(data.get("usageMetadata"), dict):
        return data["usageMetadata"]
    try:
        items = json.loads(content) if content.lstrip().startswith(b"[") else []
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    found = [
        i["usageMetadata"]
        for i in items
        if isinstance(i, dict) and isinstance(i.get("usageMetadata"), dict)
    ]
    return found[-1] if found else None


def _json_object(body: bytes) -> dict[str, Any]:
    try:
        obj = json.loads(body) if body else {}
    except (json.JSONDecodeError, UnicodeDecodeError):
        return {}
    return obj if isinstance(obj, dict) else {}


def _error_message(data: dict[str, Any], content: bytes) -> str:
    err = data.get("error")
    if isinstance(err, dict) and err.get("message"):
        return str(err["message"])[:500]
    return content[:500].decode("utf-8", "replace") or "(empty body)"


def create_app(cfg: ProxyConfig) -> FastAPI:
    """The proxy as an ASGI app (the process entry point serves it; tests may embed it)."""
    from contextlib import asynccontextmanager

    proxy = _Proxy(cfg)
    cfg.usage_file.parent.mkdir(parents=True, exist_ok=True)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        timeout = httpx.Timeout(cfg.upstream_timeout_s, connect=cfg.connect_timeout_s)
        limits = httpx.Limits(max_connections=64, max_keepalive_connections=16)
        async with httpx.AsyncClient(timeout=timeout, limits=limits) as client:
            proxy.client = client
            yield

    app = FastAPI(
        title="agent2rl metering proxy",
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
        lifespan=lifespan,
    )

    @app.get("/healthz")
    async def healthz() -> dict[str, Any]:
        return {"ok": True, "used_tokens": proxy.used_tokens, "budget": cfg.max_total_tokens}

    def route(ep: Endpoint) -> Any:
        # A closure per endpoint: FastAPI would read an extra parameter as a query field.
        async def handler(request: Request) -> Response:
            return await proxy.forward(request, ep)

        return handler

    for ep in ENDPOINTS:
        app.add_api_route(
            f"/{ep.api}/{ep.version}/{ep.path}",
            route(ep),
            methods=list(ep.methods),
            include_in_schema=False,
        )

    @app.api_route("/{rest:path}", methods=["GET", "POST", "PUT", "PATCH", "DELETE"])
    async def unknown(rest: str) -> Response:
        prefix = rest.split("/", 1)[0]
        api: Api = prefix if prefix in ("anthropic", "gemini") else "openai"  # type: ignore[assignment]
        return _error_response(api, 404, f"/{rest} is not served by the agent2rl metering proxy")

    return app


# --------------------------------------------------------------------------------------------
# The process and its handle


@dataclass
class MeteringProxy:
    """A running proxy process."""

    proc: subprocess.Popen
    port: int
    key: str
    usage_file: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def openai_base_url(self) -> str:
        return f"{self.url}/openai/v1"

    @property
    def anthropic_base_url(self) -> str:
        return f"{self.url}/anthropic"

    @property
    def gemini_base_url(self) -> str:
        """The Gemini root (the SDKs add ``/v1beta/models/...``)."""
        return f"{self.url}/gemini"

    def agent_env(self) -> dict[str, str]:
        """Environment variables that point the usual SDKs and CLIs at this proxy."""
        return {
            "OPENAI_BASE_URL": self.openai_base_url,
            "OPENAI_API_KEY": self.key,
            "ANTHROPIC_BASE_URL": self.anthropic_base_url,
            "ANTHROPIC_API_KEY": self.key,
            "GOOGLE_GEMINI_BASE_URL": self.gemini_base_url,
            "GEMINI_API_KEY": self.key,
        }

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM (in-flight requests get a few seconds), then SIGKILL; idempotent."""
        stop_child(self.proc, timeout)


def start_metering_proxy(
    usage_file: Path,
    *,
    proxy_key: str | None = None,
    openai_api_key: str | None = None,
    anthropic_api_key: str | None = None,
    gemini_api_key: str | None = None,
    openai_base_url: str = DEFAULT_OPENAI_BASE_URL,
    anthropic_base_url: str = DEFAULT_ANTHROPIC_BASE_URL,
    gemini_base_url: str = DEFAULT_GEMINI_BASE_URL,
    max_total_tokens: int | None = None,
    upstream_timeout_s: float = 600.0,
    ready_file: Path | None = None,
    log_file: Path | None = None,
    ready_timeout: float = 30.0,
) -> MeteringProxy:
    """Start a proxy process recording to ``usage_file`` and wait until it serves.

    ``proxy_key`` is the key the agent gets (a fresh random one when None).
    ``openai_api_key`` / ``anthropic_api_key`` / ``gemini_api_key`` are the real upstream
    keys; None takes ``OPENAI_API_KEY`` / ``ANTHROPIC_API_KEY`` / ``GEMINI_API_KEY`` (else
    ``GOOGLE_API_KEY``) from this process's environment, "" sends none.
    They reach the child through its environment only. ``ready_file`` (default
    ``llm_proxy.json`` beside the usage file) receives ``{"port", "pid"}`` once the proxy
    accepts connections; ``log_file`` (default ``llm_proxy.log`` beside it) gets its output.
    Raises RuntimeError, naming the log, if the process exits or is not ready in time.
    """
    usage_file = Path(usage_file).resolve()
    usage_file.parent.mkdir(parents=True, exist_ok=True)
    ready_file = Path(ready_file or usage_file.with_name("llm_proxy.json"))
    log_file = Path(log_file or usage_file.with_name("llm_proxy.log"))
    key = proxy_key or secrets.token_urlsafe(24)
    env = {
        **os.environ,
        PROXY_KEY_ENV: key,
        OPENAI_KEY_ENV: os.environ.get("OPENAI_API_KEY", "")
        if openai_api_key is None
        else openai_api_key,
        ANTHROPIC_KEY_ENV: os.environ.get("ANTHROPIC_API_KEY", "")
        if anthropic_api_key is None
        else anthropic_api_key,
        GEMINI_KEY_ENV: os.environ.get("GEMINI_API_KEY") or os.environ.get("GOOGLE_API_KEY", "")
        if gemini_api_key is None
        else gemini_api_key,
    }
    cmd = [
        sys.executable,
        "-m",
        "agent2rl.agents.metering",
        "--usage-file",
        str(usage_file),
        "--ready-file",
        str(ready_file),
        "--openai-base-url",
        openai_base_url,
        "--anthropic-base-url",
        anthropic_base_url,
        "--gemini-base-url",
        gemini_base_url,
        "--timeout",
        str(upstream_timeout_s),
    ]
    if max_total_tokens is not None:
        cmd += ["--max-total-tokens", str(max_total_tokens)]
    proc, port = start_announcing(
        cmd,
        env=env,
        ready_file=ready_file,
        log_file=log_file,
        name="metering proxy",
        ready_timeout=ready_timeout,
    )
    return MeteringProxy(proc, port, key, usage_file)


def main(argv: Iterable[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="agent2rl LLM metering proxy")
    ap.add_argument("--usage-file", type=Path, required=True)
    ap.add_argument("--ready-file", type=Path, required=True)
    ap.add_argument("--openai-base-url", default=DEFAULT_OPENAI_BASE_URL)
    ap.add_argument("--anthropic-base-url", default=DEFAULT_ANTHROPIC_BASE_URL)
    ap.add_argument("--gemini-base-url", default=DEFAULT_GEMINI_BASE_URL)
    ap.add_argument("--max-total-tokens", type=int, default=None)
    ap.add_argument("--timeout", type=float, default=600.0, help="upstream read timeout (s)")
    ap.add_argument("--no-inject-stream-usage", action="store_true")
    args = ap.parse_args(None if argv is None else list(argv))
    # Pop the keys so nothing this process starts could inherit them.
    proxy_key = os.environ.pop(PROXY_KEY_ENV, "")
    if not proxy_key:
        print(f"{PROXY_KEY_ENV} is not set", file=sys.stderr)
        return 2
    cfg = ProxyConfig(
        usage_file=args.usage_file.resolve(),
        proxy_key=proxy_key,
        openai_base_url=args.openai_base_url,
        anthropic_base_url=args.anthropic_base_url,
        gemini_base_url=args.gemini_base_url,
        openai_api_key=os.environ.pop(OPENAI_KEY_ENV, ""),
        anthropic_api_key=os.environ.pop(ANTHROPIC_KEY_ENV, ""),
        gemini_api_key=os.environ.pop(GEMINI_KEY_ENV, ""),
        max_total_tokens=args.max_total_tokens,
        upstream_timeout_s=args.timeout,
        inject_stream_usage=not args.no_inject_stream_usage,
    )
    ready = args.ready_file
    serve_on_free_port(
        create_app(cfg), lambda port: write_json_atomic(ready, {"port": port, "pid": os.getpid()})
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
