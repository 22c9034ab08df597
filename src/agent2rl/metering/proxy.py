"""The metering proxy as an ASGI app: routes, key check, budget, relay and recording.

Everything that differs between provider APIs is asked of the request's
:class:`~agent2rl.metering.providers.Provider`; this module is the same for all of them.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from fastapi import FastAPI, Request
from fastapi.responses import Response

from agent2rl.metering.providers import PROVIDERS, Endpoint, Provider, Upstream
from agent2rl.metering.stream import Relay, RelayResponse, StreamMeter
from agent2rl.metering.usage import UsageRecord, append_record, summarize_usage

# A path under no provider's prefix gets this provider's 404 (the most widely spoken shape).
FALLBACK_PROVIDER = "openai"

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
    """Everything the proxy app needs.

    ``upstreams`` by provider name; a provider without one goes to its own endpoint with no
    credentials. ``inject_stream_usage``: make streams carry usage where an API needs asking
    (OpenAI Chat Completions, see the package docstring).
    """

    usage_file: Path
    proxy_key: str
    upstreams: dict[str, Upstream] = field(default_factory=dict)
    max_total_tokens: int | None = None
    upstream_timeout_s: float = 600.0
    connect_timeout_s: float = 10.0
    inject_stream_usage: bool = True

    def upstream(self, provider: Provider) -> Upstream:
        return self.upstreams.get(provider.name) or Upstream(provider.default_base_url)


class _Proxy:
    def __init__(self, cfg: ProxyConfig) -> None:
        self.cfg = cfg
        self.client: httpx.AsyncClient | None = None
        # A restarted proxy keeps counting from what the run already used.
        self.used_tokens = summarize_usage(cfg.usage_file)["total_tokens"]

    def record(self, rec: UsageRecord, started: float) -> None:
        rec.latency_s = round(time.monotonic() - started, 4)
        self.used_tokens += rec.tokens.total
        append_record(self.cfg.usage_file, rec)

    def upstream_headers(self, request: Request, provider: Provider) -> dict[str, str]:
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _DROP_REQUEST}
        headers["accept-encoding"] = "identity"
        headers.update(provider.auth_headers(self.cfg.upstream(provider).api_key))
        return headers

    async def forward(self, request: Request, provider: Provider, ep: Endpoint) -> Response:
        started = time.monotonic()
        path = ep.path.split("{", 1)[0] + request.path_params.get("rest", "")
        route = provider.route(request.method, path, ep)
        if route is None:
            return provider.error_response(
                404, f"{request.url.path} is not served by the agent2rl metering proxy"
            )
        rec = UsageRecord(api=provider.name, endpoint=path.rstrip("/"))
        if not provider.authorized(request, self.cfg.proxy_key):
            rec.status, rec.refused, rec.error = 401, True, "invalid or missing proxy key"
            self.record(rec, started)
            return provider.error_response(
                401, "Invalid API key for the agent2rl metering proxy (use the run's key)."
            )
        body = await request.body()
        payload = _json_object(body)
        rec.model, rec.stream = provider.model_and_stream(route, payload)
        limit = self.cfg.max_total_tokens
        if route.metered and limit is not None and self.used_tokens >= limit:
            msg = f"token budget of {limit} exhausted ({self.used_tokens} tokens used in this run)"
            rec.status, rec.refused, rec.error = 429, True, msg
            self.record(rec, started)
            return provider.error_response(429, msg, retry=False)
        inject = self.cfg.inject_stream_usage and provider.ask_stream_usage(path, payload)
        if inject:
            body = json.dumps(payload).encode()
        assert self.client is not None
        upstream = self.client.build_request(
            request.method,
            provider.upstream_url(self.cfg.upstream(provider).base_url, path, request.url.query),
            headers=self.upstream_headers(request, provider),
            content=body,
        )
        try:
            resp = await self.client.send(upstream, stream=True)
        except httpx.HTTPError as exc:
            return self._failed(rec, provider, started, exc)
        headers = {k: v for k, v in resp.headers.items() if k.lower() not in _DROP_RESPONSE}
        rec.status = resp.status_code
        if resp.headers.get("content-type", "").startswith("text/event-stream"):
            meter = StreamMeter(provider.observe, drop_usage_chunk=inject)

            def on_end(relay: Relay) -> None:
                rec.model = rec.model or relay.meter.model
                provider.meter(rec, relay.meter.usage)
                rec.error = relay.error or relay.meter.error or rec.error
                self.record(rec, started)

            relay = Relay(resp, meter, error_event=provider.stream_error_event, on_end=on_end)
            return RelayResponse(relay, resp.status_code, headers)
        try:
            content = await resp.aread()
        except httpx.HTTPError as exc:
            return self._failed(rec, provider, started, exc)
        finally:
            await resp.aclose()
        data = _json_object(content)
        if route.metered:
            provider.meter(rec, provider.response_usage(content, data))
        rec.model = rec.model or (data.get("model") if isinstance(data.get("model"), str) else None)
        if resp.status_code >= 400:
            rec.error = _error_message(data, content)
        self.record(rec, started)
        return Response(content=content, status_code=resp.status_code, headers=headers)

    def _failed(
        self, rec: UsageRecord, provider: Provider, started: float, exc: httpx.HTTPError
    ) -> Response:
        timeout = isinstance(exc, httpx.TimeoutException)
        status = 504 if timeout else 502
        what = "timed out" if timeout else "could not be reached"
        msg = f"upstream {provider.name} API {what}: {type(exc).__name__}: {exc}".rstrip(": ")
        rec.status, rec.error = status, msg[:500]
        self.record(rec, started)
        return provider.error_response(status, msg)


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
    async def unknown(rest: str) -> Response:
        provider = PROVIDERS.get(rest.split("/", 1)[0]) or PROVIDERS[FALLBACK_PROVIDER]
        return provider.error_response(404, f"/{rest} is not served by the agent2rl metering proxy")

    return app
