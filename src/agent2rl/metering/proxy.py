"""The metering proxy as an ASGI app: routes, path and key checks, budget, relay, retries and
recording.

Everything that differs between provider APIs is asked of the request's
:class:`~agent2rl.metering.providers.Provider`; this module is the same for all of them.
"""

from __future__ import annotations

import dataclasses
import email.utils
import json
import random
import string
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import anyio
import httpx
from fastapi import FastAPI, Request
from fastapi.responses import Response

from agent2rl.files import json_object
from agent2rl.metering.budget import Estimate, TokenBudget, estimate_request
from agent2rl.metering.pricing import estimate_cost
from agent2rl.metering.provider_tools import (
    ToolUse,
    append_tool_uses,
    provider_tools_path,
    refusal_message,
    text,
)
from agent2rl.metering.providers import PROVIDERS, Endpoint, Provider, Upstream
from agent2rl.metering.providers.base import json_array, safe_rest
from agent2rl.metering.stream import Relay, RelayResponse, StreamMeter
from agent2rl.metering.transcript import TranscriptWriter, reassemble, transcript_path
from agent2rl.metering.usage import TokenCounts, UsageRecord, append_record, summarize_usage

# A path under no provider's prefix gets this provider's error shape (the most widely spoken).
FALLBACK_PROVIDER = "openai"

#: The largest request body relayed (413 above it). Agents' requests are JSON conversations:
#: a 200k-token context is about 1 MiB, a screenshot a few MiB of base64. The bound keeps an
#: agent from making the proxy hold unbounded memory (64 requests in flight at once).
MAX_BODY_BYTES = 16 << 20

#: Upstream statuses retried before anything reached the client: rate limits, server errors,
#: Anthropic's 529 "overloaded".
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504, 529})

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

# Percent-escapes a path may carry: those of characters a model id may hold anyway. An
# escaped dot, slash, backslash, percent, '?' or '#' only ever serves to smuggle a path past
# a check, so it is refused rather than decoded.
_ESCAPABLE = frozenset(string.ascii_letters + string.digits + "_~:@+=-")


@dataclass
class ProxyConfig:
    """Everything the proxy app needs.

    ``upstreams`` by provider name; a provider without one goes to its own endpoint with no
    credentials. ``inject_stream_usage``: make streams carry usage where an API needs asking
    (OpenAI Chat Completions, see the package docstring). ``max_retries``: upstream retries
    of a 429/5xx (or a refused connection) before anything reached the client, waiting
    ``retry_backoff_s`` doubled each time, or the upstream's ``Retry-After`` when it says;
    a ``Retry-After`` above ``retry_after_cap_s`` is not waited for (the error goes to the
    client, whose SDK honours it). ``allowed_models``: the models a metered request may name
    (a run's driver models); any other, or none named, is refused with a provider-shaped 403
    naming the allowed ones (so the agent cannot call, say, its task's judge model). None
    allows every model. ``denied_prompts``: model (``"*"``: any) -> texts a metered request
    to it may not carry (:func:`denied_prompt`): a task's judge prompt to its judge model is a
    403 too. Every exchange's request and response are appended to ``transcript.jsonl`` beside the
    usage file (:mod:`agent2rl.metering.transcript`). ``allow_provider_tools``: relay requests
    that carry provider-side tools (web search, URL fetches, MCP servers:
    :mod:`agent2rl.metering.provider_tools`); False refuses them with a provider-shaped 403
    naming the run flag. Either way each one is a line of ``provider_tools.jsonl`` beside the
    usage file.
    """

    usage_file: Path
    proxy_key: str
    upstreams: dict[str, Upstream] = field(default_factory=dict)
    max_total_tokens: int | None = None
    upstream_timeout_s: float = 600.0
    connect_timeout_s: float = 10.0
    inject_stream_usage: bool = True
    max_retries: int = 2
    retry_backoff_s: float = 0.5
    retry_after_cap_s: float = 8.0
    allowed_models: tuple[str, ...] | None = None
    denied_prompts: dict[str, tuple[str, ...]] = field(default_factory=dict)
    allow_provider_tools: bool = False

    def upstream(self, provider: Provider) -> Upstream:
        return self.upstreams.get(provider.name) or Upstream(provider.default_base_url)


@dataclass
class _Exchange:
    """One client request on its way through; recorded exactly once, however it ends."""

    rec: UsageRecord
    started: float  # time.monotonic()
    provider: Provider  # also reads what its tools did from the answer
    #: its budget reservation (metered routes only)
    estimate: Estimate | None = None
    #: the tokens of failed attempts that reported usage
    failed_attempts: TokenCounts = field(default_factory=TokenCounts)
    done: bool = False
    #: for the transcript: the client's JSON body, and the answer (JSON, a reassembled
    #: stream, or text)
    request: dict[str, Any] | None = None
    response: Any = None
    #: the provider-side tools the request declared (relayed only when the run allows them)
    tools: list[ToolUse] = field(default_factory=list)


class _Proxy:
    def __init__(self, cfg: ProxyConfig) -> None:
        self.cfg = cfg
        self.client: httpx.AsyncClient | None = None
        # A restarted proxy keeps counting from what the run already used.
        used = summarize_usage(cfg.usage_file)["total_tokens"]
        self.budget = TokenBudget(cfg.max_total_tokens, used)
        # Every key the proxy holds is redacted from the transcript, wherever it appears.
        keys = [cfg.proxy_key, *(u.api_key for u in cfg.upstreams.values())]
        self.transcript = TranscriptWriter(transcript_path(cfg.usage_file), secrets=keys)

    def record(self, ex: _Exchange) -> None:
        """Write the exchange's usage line and settle its reservation to what it was charged;
        idempotent."""
        if ex.done:
            return
        ex.done = True
        rec = ex.rec
        if ex.failed_attempts.total:
            rec.set_usage(rec.usage, rec.tokens + ex.failed_attempts, None)
            rec.cost_usd = estimate_cost(rec.model, rec.tokens)
        rec.latency_s = round(time.monotonic() - ex.started, 4)
        self.budget.settle(ex.estimate, rec.tokens.total)
        append_record(self.cfg.usage_file, rec)
        self.record_tools(ex)
        try:
            self.transcript.write(dataclasses.asdict(rec), ex.request, ex.response)
        except (OSError, TypeError, ValueError) as exc:
            # The transcript is a record, not the meter: a full disk must not fail the
            # agent's request, whose usage line is already written.
            print(f"transcript not written: {type(exc).__name__}: {exc}", file=sys.stderr)

    def record_tools(self, ex: _Exchange) -> None:
        """Append the provider-side tools the exchange declared and those its answer shows
        the provider used (a search query, a fetched URL) to the provider-tool log."""
        response = ex.response
        if isinstance(response, str):  # a JSON array (Gemini's stream without alt=sse)
            response = json_array(response.encode())
        try:
            done = ex.provider.server_tool_uses(response)
        except (TypeError, AttributeError, ValueError):  # an answer of a shape never seen
            done = []
        if not ex.tools and not done:
            return
        try:
            append_tool_uses(
                provider_tools_path(self.cfg.usage_file),
                api=ex.rec.api,
                model=ex.rec.model,
                requested=ex.tools,
                done=done,
                allowed=not ex.rec.refused,
                status=ex.rec.status,
            )
        except OSError as exc:
            print(f"provider-tool uses not recorded: {exc}", file=sys.stderr)

    def charge_estimate(self, ex: _Exchange, why: str) -> None:
        """Charge a request the provider may have billed without saying how much: what its
        usage did report (Anthropic reports the prompt as the stream starts), the reservation
        for the rest — the prompt estimate, and all the output it reserved, since the
        provider may have generated it after the proxy stopped seeing the stream."""
        rec, est = ex.rec, ex.estimate
        if est is None:
            return
        seen = rec.tokens
        charged = dataclasses.replace(
            seen, input=seen.input or est.prompt, output=max(seen.output, est.output)
        )
        rec.set_usage(rec.usage, charged, estimate_cost(rec.model, charged))
        rec.estimated = True
        rec.error = rec.error or why

    def upstream_headers(self, request: Request, provider: Provider) -> dict[str, str]:
        """The client's headers :meth:`Provider.forward_header` keeps, ``identity`` encoding
        (the proxy reads the usage out of the very bytes it forwards) and the real key."""
        headers: dict[str, str] = {}
        for name, value in request.headers.items():
            kept = provider.forward_header(name.lower(), value)
            if kept is not None:
                headers[name.lower()] = kept
        headers["accept-encoding"] = "identity"
        headers.update(provider.auth_headers(self.cfg.upstream(provider).api_key))
        return headers

    def refuse(
        self, ex: _Exchange, status: int, msg: str, *, retry: bool = False, note: str = ""
    ) -> Response:
        """Record ``ex`` as refused (its line's error: ``note``, else ``msg``) and answer
        ``msg`` in the provider's error shape."""
        ex.rec.status, ex.rec.refused, ex.rec.error = status, True, note or msg
        self.record(ex)
        return ex.provider.error_response(status, msg, retry=retry)

    def policy_refusal(
        self, ex: _Exchange, path: str, payload: dict[str, Any]
    ) -> tuple[int, str] | None:
        """Why the run refuses a metered request, as ``(status, message)``, or None: a model
        it does not allow, the task's judge prompt, a mode the budget could not meter, or
        provider-side tools (which it notes in ``ex.tools``) when the run does not allow them."""
        provider, model = ex.provider, ex.rec.model
        allowed = self.cfg.allowed_models
        if allowed is not None and model not in allowed:
            named = f"model {model!r}" if model else "a request that names no model"
            return 403, (
                f"{named} is not allowed in this run; the metering proxy relays only "
                f"{', '.join(allowed) or '(no model)'} (the run's driver)"
            )
        denied = denied_prompt(self.cfg.denied_prompts, model, payload)
        if denied is not None:
            return 403, (
                f"this request carries the task's judge prompt ({denied[:60]!r}...) for "
                f"{model or 'its model'}: the agent may not ask the grader's own judge"
            )
        mode = provider.refused_mode(path, payload)
        if mode is not None:
            return 400, mode
        ex.tools = provider.server_tools(path, payload)
        if ex.tools and not self.cfg.allow_provider_tools:
            return 403, refusal_message(ex.tools)
        return None

    async def forward(self, request: Request, provider: Provider, ep: Endpoint) -> Response:
        started = time.monotonic()
        rest = request.path_params.get("rest")
        problem = path_problem(request)
        # An empty rest is the bare listing with a trailing slash (``models/``).
        if problem is None and rest and not safe_rest(rest):
            problem = "its model part is not a plain model id"
        if problem is not None:
            return refuse_path(request, provider, 400, problem)
        path = ep.path.split("{", 1)[0] + (rest or "")
        route = provider.route(request.method, path, ep)
        if route is None:
            return refuse_path(request, provider, 404, None)
        rec = UsageRecord(api=provider.name, endpoint=path.rstrip("/"))
        ex = _Exchange(rec, started, provider)
        if not provider.authorized(request, self.cfg.proxy_key):
            msg = "Invalid API key for the agent2rl metering proxy (use the run's key)."
            return self.refuse(ex, 401, msg, retry=True, note="invalid or missing proxy key")
        body = await _read_body(request, MAX_BODY_BYTES)
        if body is None:
            size = f"request body larger than the metering proxy's limit of {MAX_BODY_BYTES} bytes"
            return self.refuse(ex, 413, f"{size}; send a shorter conversation")
        payload = json_object(body) or {}
        # A copy: asking a stream for usage changes the payload (the transcript keeps what
        # the client sent). Only a JSON-object body is kept; a bare GET has none.
        ex.request = dict(payload) if payload else None
        rec.model, rec.stream = provider.model_and_stream(route, payload)
        if route.metered:
            refused = self.policy_refusal(ex, path, payload)
            if refused is not None:
                return self.refuse(ex, *refused)
            estimate = estimate_request(body, provider.requested_output_tokens(payload))
            refusal = self.budget.reserve(estimate)
            if refusal is not None:
                resp = self.refuse(ex, 429, refusal.message, retry=not refusal.final)
                if not refusal.final:
                    resp.headers["retry-after"] = "1"
                return resp
            ex.estimate = estimate
        inject = self.cfg.inject_stream_usage and provider.ask_stream_usage(path, payload)
        if inject:
            body = json.dumps(payload).encode()
        try:
            return await self._relay(request, path, body, ex, inject)
        except BaseException:
            # Cancelled or broken in the proxy itself: the provider may have the request.
            self.charge_estimate(ex, "the proxy failed while relaying the request")
            self.record(ex)
            raise

    async def _send(
        self, request: Request, path: str, body: bytes, ex: _Exchange
    ) -> httpx.Response | httpx.HTTPError:
        """Send upstream, retrying (bounded) a refused connection or a 429/5xx answer — all
        before the client got a byte. The response to relay, or the error that ended it."""
        assert self.client is not None
        cfg, provider = self.cfg, ex.provider
        url = provider.upstream_url(cfg.upstream(provider).base_url, path, request.url.query)
        headers = self.upstream_headers(request, provider)
        attempt = 0
        while True:
            upstream = self.client.build_request(request.method, url, headers=headers, content=body)
            try:
                resp = await self.client.send(upstream, stream=True)
            except httpx.ConnectError as exc:
                # Nothing reached the provider: safe to try again.
                if attempt >= cfg.max_retries:
                    return exc
                delay = _backoff(cfg, attempt)
            except httpx.HTTPError as exc:
                return exc
            else:
                delay = self._retry_delay(resp, attempt)
                if delay is None:
                    return resp
                try:
                    content = await resp.aread()
                except httpx.HTTPError:
                    content = b""
                finally:
                    await resp.aclose()
                # A failed attempt that reports usage was billed: count it.
                usage = provider.response_usage(content, json_object(content) or {})
                if ex.estimate is not None and usage is not None:
                    ex.failed_attempts += provider.normalize(usage)
            attempt += 1
            ex.rec.retries = attempt
            await anyio.sleep(delay)

    def _retry_delay(self, resp: httpx.Response, attempt: int) -> float | None:
        """How long to wait before retrying ``resp``, or None to relay it as it is: not a
        retried status, no retries left, the provider said not to (``x-should-retry:
        false``), or asked for a longer wait than the cap."""
        cfg = self.cfg
        if resp.status_code not in RETRY_STATUSES or attempt >= cfg.max_retries:
            return None
        if resp.headers.get("x-should-retry", "").lower() == "false":
            return None
        asked = _retry_after(resp.headers)
        if asked is None:
            return _backoff(cfg, attempt)
        return asked if asked <= cfg.retry_after_cap_s else None

    async def _relay(
        self, request: Request, path: str, body: bytes, ex: _Exchange, inject: bool
    ) -> Response:
        rec, provider = ex.rec, ex.provider
        metered = ex.estimate is not None  # every metered request holds a reservation
        resp = await self._send(request, path, body, ex)
        if isinstance(resp, httpx.HTTPError):
            return self._failed(ex, resp)
        headers = {k: v for k, v in resp.headers.items() if k.lower() not in _DROP_RESPONSE}
        rec.status = resp.status_code
        if resp.headers.get("content-type", "").startswith("text/event-stream"):
            meter = StreamMeter(provider.observe, drop_usage_chunk=inject)

            def on_end(relay: Relay) -> None:
                rec.model = rec.model or relay.meter.model
                ex.response = reassemble(provider.name, relay.meter.events)
                provider.meter(rec, relay.meter.usage)
                rec.error = relay.error or relay.meter.error or rec.error
                # A stream that ends before its final usage was cut, or (ended cleanly) its
                # API sent none: either way the provider did the work, and the reservation
                # is charged rather than nothing.
                how = "without reporting its usage"
                if not (relay.meter.ended and relay.error is None):
                    how = "before its usage was reported"
                if metered and resp.is_success and not relay.meter.final:
                    self.charge_estimate(ex, f"the stream ended {how}")
                self.record(ex)

            relay = Relay(resp, meter, error_event=provider.stream_error_event, on_end=on_end)
            return RelayResponse(relay, resp.status_code, headers)
        try:
            content = await resp.aread()
        except httpx.HTTPError as exc:
            return self._failed(ex, exc)
        finally:
            await resp.aclose()
        data = json_object(content) or {}
        # A non-JSON answer goes to the transcript as text, cut to 64 KiB.
        ex.response = data or (content[:65536].decode("utf-8", "replace") if content else None)
        if metered:
            usage = provider.response_usage(content, data)
            provider.meter(rec, usage)
            if usage is None and resp.is_success:
                # A success without usage (an answer that leaves the work for later, a
                # server that reports none) did work upstream: it costs its reservation,
                # never 0, or such requests would spend nothing of the budget.
                self.charge_estimate(ex, "the answer reported no token usage")
        rec.model = rec.model or text(data.get("model"))
        if resp.status_code >= 400:
            rec.error = _error_message(data, content)
        self.record(ex)
        return Response(content=content, status_code=resp.status_code, headers=headers)

    def _failed(self, ex: _Exchange, exc: httpx.HTTPError) -> Response:
        timeout = isinstance(exc, httpx.TimeoutException)
        status = 504 if timeout else 502
        what = "timed out" if timeout else "could not be reached"
        msg = f"upstream {ex.provider.name} API {what}: {type(exc).__name__}: {exc}".rstrip(": ")
        ex.rec.status, ex.rec.error = status, msg[:500]
        if not isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout):
            # The request went out: the provider may be generating (and billing) the answer.
            self.charge_estimate(ex, msg[:500])
        self.record(ex)
        return ex.provider.error_response(status, msg)


def _backoff(cfg: ProxyConfig, attempt: int) -> float:
    # Jitter, so that requests failed together do not come back together.
    return cfg.retry_backoff_s * (2**attempt) * random.uniform(0.8, 1.2)


def _retry_after(headers: httpx.Headers) -> float | None:
    """The wait a response asks for: ``retry-after-ms`` (OpenAI), else ``Retry-After`` in
    seconds or as an HTTP date; None when it says nothing readable."""
    try:
        if "retry-after-ms" in headers:
            return max(float(headers["retry-after-ms"]) / 1000, 0.0)
        value = headers.get("retry-after")
        if value is None:
            return None
        try:
            return max(float(value), 0.0)
        except ValueError:
            when = email.utils.parsedate_to_datetime(value)
            return max(when.timestamp() - time.time(), 0.0)
    except (ValueError, TypeError, OverflowError):
        return None


async def _read_body(request: Request, limit: int) -> bytes | None:
    """The request body, or None when it is larger than ``limit`` bytes: a declared
    ``Content-Length`` above it is refused unread, a chunked body as soon as it passes it."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        return None
    buf = bytearray()
    async for chunk in request.stream():
        buf += chunk
        if len(buf) > limit:
            return None
    return bytes(buf)


def path_problem(request: Request) -> str | None:
    """Why the request's path is refused before any routing decision counts, or None.

    The path is read as the client sent it (``raw_path``, before percent-decoding): anything
    but printable ASCII, a backslash, an empty segment (``//``), a dot segment (``.`` or
    ``..``, also after decoding) or a percent-escape of anything but a model-id character
    (so ``%2e``, ``%2f``, ``%5c``, ``%25``, ``%3f`` are refused). Each would let a relayed
    route (``models/{id}``) reach another upstream endpoint with the real key once the URL is
    normalised on the way out (``models/../files`` is ``/files``).
    """
    try:
        text = _raw_path(request).decode("ascii")
    except UnicodeDecodeError:
        return "it is not ASCII"
    if any(not ("!" <= c <= "~") for c in text):
        return "it holds a space or a control character"
    if "\\" in text:
        return "it holds a backslash"
    for i, c in enumerate(text):
        if c == "%":
            code = text[i + 1 : i + 3]
            if len(code) != 2 or not all(h in string.hexdigits for h in code):
                return "it holds a malformed percent-escape"
            if chr(int(code, 16)) not in _ESCAPABLE:
                return f"it holds an encoded {chr(int(code, 16))!r} (%{code})"
    if "//" in text:
        return "it holds an empty segment (//)"
    if any(seg in (".", "..") for seg in unquote(text).split("/")):
        return "it holds a dot segment (. or ..)"
    return None


def _raw_path(request: Request) -> bytes:
    """The path as the client sent it, before percent-decoding."""
    return request.scope.get("raw_path") or request.url.path.encode()


def refuse_path(
    request: Request, provider: Provider | None, status: int, why: str | None
) -> Response:
    """The refusal of a path the proxy does not relay: ``status`` (400: a malformed or
    traversing path, ``why`` says how; 404: no such endpoint) in the provider's error shape,
    naming the endpoints it does relay (every provider's, for a path under none)."""
    shown = _raw_path(request).decode("ascii", "replace")[:200]
    providers = [provider] if provider is not None else list(PROVIDERS.values())
    allowed = ", ".join(line for p in providers for line in p.allowed_endpoints())
    what = f"is refused: {why}" if why else "is not an endpoint the agent2rl metering proxy relays"
    msg = f"{request.method} {shown} {what}. The metering proxy relays only: {allowed}"
    return (provider or PROVIDERS[FALLBACK_PROVIDER]).error_response(status, msg, retry=False)


def _squash(text: str) -> str:
    return " ".join(text.split()).casefold()


def _strings(value: Any) -> list[str]:
    """Every string inside a JSON value (keys left out)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def denied_prompt(
    rules: dict[str, tuple[str, ...]], model: str | None, payload: dict[str, Any]
) -> str | None:
    """The first text of ``rules`` (for ``model`` and for ``"*"``) that the request body
    ``payload`` carries, compared case-folded with whitespace runs collapsed over all its
    strings joined; None when it carries none (or no rule applies)."""
    texts = [*rules.get("*", ()), *(rules.get(model, ()) if model else ())]
    if not texts:
        return None
    body = _squash("\n".join(_strings(payload)))
    return next((t for t in texts if _squash(t) and _squash(t) in body), None)


def _error_message(data: dict[str, Any], content: bytes) -> str:
    err = data.get("error")
    if isinstance(err, dict) and err.get("message"):
        return str(err["message"])[:500]
    return content[:500].decode("utf-8", "replace") or "(empty body)"


def create_app(cfg: ProxyConfig) -> FastAPI:
    """The proxy as an ASGI app (the process entry point serves it; tests may embed it)."""
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
        return {
            "ok": True,
            "used_tokens": proxy.budget.used,
            "reserved_tokens": proxy.budget.reserved,
            "budget": cfg.max_total_tokens,
        }

    def route(provider: Provider, ep: Endpoint) -> Any:
        # A closure per endpoint: FastAPI would read an extra parameter as a query field.
        async def handler(request: Request) -> Response:
            return await proxy.forward(request, provider, ep)

        return handler

    for provider in PROVIDERS.values():
        for ep in provider.endpoints:
            app.add_api_route(
                f"/{provider.name}/{provider.version}/{ep.path}",
                route(provider, ep),
                methods=list(ep.methods),
                include_in_schema=False,
            )

    @app.api_route("/{rest:path}", methods=["GET", "POST", "PUT", "PATCH", "DELETE"])
    async def unknown(request: Request, rest: str) -> Response:
        provider = PROVIDERS.get(rest.split("/", 1)[0])
        problem = path_problem(request)
        return refuse_path(request, provider, 404 if problem is None else 400, problem)

    return app
