"""What a provider API is to the proxy: its routes, keys, usage, errors and stream events."""

from __future__ import annotations

import hmac
import json
import os
import re
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

from fastapi import Request
from fastapi.responses import JSONResponse

from agent2rl.metering.pricing import estimate_cost
from agent2rl.metering.provider_tools import ToolUse
from agent2rl.metering.stream import StreamMeter
from agent2rl.metering.usage import TokenCounts, UsageRecord, token_count

#: One path segment a relayed route may carry in its ``{rest:path}`` part (a model id): the
#: characters model ids use, nothing that changes a URL's meaning (``%``, ``?``, ``#``, ``\``)
#: and no leading dot, so neither ``.`` nor ``..`` (nor a hidden name) is a segment.
SAFE_SEGMENT = re.compile(r"[A-Za-z0-9_~:@+=-][A-Za-z0-9._~:@+=-]*")


#: Request headers every provider gets as the client sent them: the body's type, what the
#: client accepts, who it is, and the Stainless SDKs' telemetry (``x-stainless-*``: language,
#: version, retry count, timeout). Everything else is dropped unless the provider forwards it
#: (:attr:`Provider.forwarded_headers`), notably the headers that pick the account, project or
#: billing (``openai-organization``, ``openai-project``, ``x-goog-user-project``) and the
#: credentials, which the proxy replaces with the run's real key.
COMMON_HEADERS = frozenset({"content-type", "accept", "user-agent", "idempotency-key"})
COMMON_HEADER_PREFIXES = ("x-stainless-",)


def requested_count(value: Any) -> int | None:
    """A ``max_tokens``-like field of a request: a positive count, else None (absent, zero,
    negative or not a number: the request did not say)."""
    return token_count(value) or None


def safe_rest(rest: str) -> bool:
    """Whether ``rest`` (a decoded ``{rest:path}`` value, ``a/b``) is one or more
    :data:`SAFE_SEGMENT` segments joined by single slashes: no dot segment, no empty segment,
    no characters a URL would read as anything but a name. ``""`` is not."""
    return all(SAFE_SEGMENT.fullmatch(seg) for seg in rest.split("/"))


def json_array(content: bytes) -> list[Any] | None:
    """A JSON-array answer (Gemini's ``:streamGenerateContent`` without ``alt=sse``), or
    None for any other body."""
    if not content.lstrip().startswith(b"["):
        return None
    try:
        value = json.loads(content)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    return value if isinstance(value, list) else None


@dataclass(frozen=True)
class Endpoint:
    """A proxied route: ``/{provider}/{version}/{path}`` -> the same path on the upstream.

    ``path`` may end in ``{rest:path}`` (a route parameter: one or more model-id segments,
    checked by :func:`safe_rest` before anything is forwarded). ``metered``: whether the proxy
    reads usage from the response and reserves and charges the token budget for it; a
    provider may decide per request instead (see :meth:`Provider.route`).
    """

    path: str
    methods: tuple[str, ...]
    metered: bool


@dataclass(frozen=True)
class Route:
    """What the proxy knows of a request from its method and path, before reading the body:
    whether it is metered and, for an API that puts them in the URL, its model and whether
    it streams."""

    metered: bool
    model: str | None = None
    stream: bool = False


@dataclass(frozen=True)
class Upstream:
    """Where one provider's requests go and the real key they carry (``""`` sends none, e.g.
    to a local OpenAI-compatible server without auth)."""

    base_url: str
    api_key: str = ""


class Provider(ABC):
    """One provider API as the proxy relays it. Subclasses set the class attributes and
    implement :meth:`normalize`, :meth:`observe` and :meth:`error_body`; the other methods
    are the common behaviour, overridden where an API differs. Instances hold no state:
    one per API (in ``PROVIDERS``) serves every request."""

    #: The route prefix (``/openai/...``), a usage record's ``api`` and a driver's API.
    name: ClassVar[str]
    #: The API version segment of the routes (``/anthropic/v1/messages``).
    version: ClassVar[str] = "v1"
    #: What the agent's base URL adds to the proxy's root (the SDKs append the rest).
    client_path: ClassVar[str]
    #: The provider's own endpoint.
    default_base_url: ClassVar[str]
    #: The base URL variable the usual SDKs and CLIs read: the agent gets the proxy's in it,
    #: and the host's (a gateway) is the run's upstream.
    base_url_env: ClassVar[str]
    #: Host variables that may hold the real key, first found wins; the agent gets the proxy
    #: key in the first.
    key_envs: ClassVar[tuple[str, ...]]
    #: The routes the proxy serves for this API, the allowlist of what an agent's CLI needs;
    #: anything else is refused (a 404 naming them) and never reaches the provider.
    endpoints: ClassVar[tuple[Endpoint, ...]]
    #: Request headers of this API forwarded upstream besides :data:`COMMON_HEADERS` (lower
    #: case); :meth:`forward_header` may still filter their values.
    forwarded_headers: ClassVar[frozenset[str]] = frozenset()
    #: The header a client may put the key in besides ``Authorization: Bearer``, and the one
    #: that carries the real key upstream; None: the bearer token alone.
    key_header: ClassVar[str | None] = None

    @property
    def prefix(self) -> str:
        """The routes' common prefix on the proxy (``/openai/v1``)."""
        return f"/{self.name}/{self.version}"

    def allowed_endpoints(self) -> list[str]:
        """The endpoints the proxy relays for this API, ``METHOD /path`` each (the route
        parameter as ``{model}``), as refusals name them."""
        return [
            f"{m} {self.prefix}/{ep.path.replace('{rest:path}', '{model}')}"
            for ep in self.endpoints
            for m in ep.methods
        ]

    @property
    def upstream_key_env(self) -> str:
        """The variable that hands the real key to the proxy process."""
        return f"AGENT2RL_UPSTREAM_{self.name.upper()}_KEY"

    def host_base_url(self) -> str:
        """The upstream this host configures: its :attr:`base_url_env` (a gateway), else the
        provider's own endpoint."""
        return os.environ.get(self.base_url_env) or self.default_base_url

    def host_key(self) -> str:
        """The real key from this host's :attr:`key_envs`, first found wins; ``""`` if none."""
        return next((os.environ[k] for k in self.key_envs if os.environ.get(k)), "")

    # ----------------------------------------------------------------------------------------
    # Usage

    @abstractmethod
    def normalize(self, usage: dict[str, Any]) -> TokenCounts:
        """The provider's usage object -> :class:`TokenCounts`. Missing or malformed fields
        count 0."""

    def meter(self, rec: UsageRecord, usage: dict[str, Any] | None) -> None:
        """Fill ``rec``'s token fields and estimated cost (on ``rec.model``) from this
        provider's usage object; None (no usage seen) leaves them unknown."""
        if usage is not None:
            tokens = self.normalize(usage)
            rec.set_usage(usage, tokens, estimate_cost(rec.model, tokens))

    def response_usage(self, content: bytes, data: dict[str, Any]) -> dict[str, Any] | None:
        """The usage object of a whole (non-SSE) response: ``content`` is its body, ``data``
        the body as a JSON object (``{}`` if it is not one). None when it has none."""
        return data["usage"] if isinstance(data.get("usage"), dict) else None

    @abstractmethod
    def observe(self, event: dict[str, Any], meter: StreamMeter) -> bool:
        """Note what one SSE event says (usage, model, error) in ``meter``, and set
        ``meter.final`` once the event carrying the stream's final usage went by; return
        whether the event is forwarded to the client."""

    # ----------------------------------------------------------------------------------------
    # Requests

    def route(self, method: str, path: str, endpoint: Endpoint) -> Route | None:
        """How the proxy treats ``method path`` (``path`` below the API version) served by
        ``endpoint``; None refuses it with a 404."""
        return Route(endpoint.metered)

    def model_and_stream(self, route: Route, payload: dict[str, Any]) -> tuple[str | None, bool]:
        """A request's model and whether it streams, from its JSON body ``payload``."""
        model = payload.get("model")
        return (model if isinstance(model, str) else None), payload.get("stream") is True

    def requested_output_tokens(self, payload: dict[str, Any]) -> int | None:
        """The most output tokens the request ``payload`` asks for (``max_tokens`` or its
        API's name for it); None when it does not say or says something that is not a
        number. What the token budget reserves for the output (capped)."""
        return None

    def ask_stream_usage(self, path: str, payload: dict[str, Any]) -> bool:
        """Make a streaming request carry usage when it would not (changing ``payload`` in
        place); True when the proxy must then drop the extra usage-only event (see
        :attr:`StreamMeter.drop_usage_chunk`). Most APIs always stream usage: False."""
        return False

    def given_keys(self, request: Request) -> list[str]:
        """The keys a client presented: ``Authorization: Bearer`` for every API, then the
        API's :attr:`key_header`."""
        auth = request.headers.get("authorization", "")
        keys = [auth[7:].strip()] if auth[:7].lower() == "bearer " else []
        if self.key_header is not None and self.key_header in request.headers:
            keys.append(request.headers[self.key_header].strip())
        return keys

    def authorized(self, request: Request, proxy_key: str) -> bool:
        """Whether any key the client presented is the proxy key (in constant time)."""
        want = proxy_key.encode()
        return any(hmac.compare_digest(g.encode(), want) for g in self.given_keys(request))

    def auth_headers(self, api_key: str) -> dict[str, str]:
        """The header that carries the real key upstream (none for an empty key):
        :attr:`key_header`, else a bearer token."""
        if not api_key:
            return {}
        if self.key_header is None:
            return {"authorization": f"Bearer {api_key}"}
        return {self.key_header: api_key}

    def upstream_url(self, base_url: str, path: str, query: str) -> str:
        """The upstream URL of ``path`` (below the API version) with the client's ``query``;
        ``base_url`` is a root, to which the version is added."""
        base = f"{base_url.rstrip('/')}/{self.version}"
        return f"{base}/{path}" + (f"?{query}" if query else "")

    def forward_header(self, name: str, value: str) -> str | None:
        """The value of the client's request header ``name`` (lower case) to send upstream,
        or None to drop it (see :data:`COMMON_HEADERS`). Hop-by-hop headers and
        ``accept-encoding`` are dropped too: the proxy asks for identity, to read the usage."""
        allowed = name in COMMON_HEADERS or name in self.forwarded_headers
        return value if allowed or name.startswith(COMMON_HEADER_PREFIXES) else None

    def server_tools(self, path: str, payload: dict[str, Any]) -> list[ToolUse]:
        """What in the request ``payload`` to ``path`` (below the API version) makes the
        provider reach the web itself (see :mod:`agent2rl.metering.provider_tools`): its
        server tools and the URLs it hands the provider to fetch. None in a plain request."""
        return []

    def server_tool_uses(self, response: Any) -> list[ToolUse]:
        """What an answer (a JSON response, or a stream reassembled into one) shows the
        provider's tools did: the queries searched, the URLs fetched."""
        return []

    def refused_mode(self, path: str, payload: dict[str, Any]) -> str | None:
        """Why the proxy refuses the request ``payload`` to ``path`` whatever the run allows
        (a mode whose usage the proxy could not meter), or None."""
        return None

    # ----------------------------------------------------------------------------------------
    # Errors

    @abstractmethod
    def error_body(self, status: int, message: str) -> dict[str, Any]:
        """An error body in the provider's own shape, so SDKs raise their usual exception."""

    def error_response(self, status: int, message: str, *, retry: bool = True) -> JSONResponse:
        """A provider-shaped error response; ``retry=False`` adds ``x-should-retry: false``,
        which the OpenAI and Anthropic SDKs honour (a spent budget will not come back)."""
        headers = {} if retry else {"x-should-retry": "false"}
        return JSONResponse(self.error_body(status, message), status_code=status, headers=headers)

    def stream_error_event(self, message: str) -> bytes:
        """The SSE event that ends a stream the upstream broke off; the SDKs turn it into an
        exception instead of a silently truncated answer."""
        return f"data: {json.dumps(self.error_body(502, message))}\n\n".encode()
