"""The Gemini API (Google AI Studio's ``generativelanguage`` v1beta)."""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote_plus

from fastapi import Request

from agent2rl.metering.provider_tools import ToolUse, is_web_url, walk_dicts
from agent2rl.metering.providers.base import (
    SAFE_SEGMENT,
    Endpoint,
    Provider,
    Route,
    json_array,
    requested_count,
)
from agent2rl.metering.stream import StreamMeter
from agent2rl.metering.usage import TokenCounts, token_count

#: Gemini model actions the proxy relays, and whether each is metered.
GEMINI_ACTIONS = {"generateContent": True, "streamGenerateContent": True, "countTokens": False}

# Google's canonical status names; anything unlisted is INTERNAL.
_STATUS_NAMES = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    413: "INVALID_ARGUMENT",
    429: "RESOURCE_EXHAUSTED",
    502: "UNAVAILABLE",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}


#: Gemini's server tools, as a ``tools`` entry names them (either spelling) -> the name
#: recorded: Google Search (and its older retrieval form), URL context, enterprise web
#: search and Maps grounding, each run by Google on the model's behalf.
_SERVER_TOOLS = {
    "google_search": "google_search",
    "google_search_retrieval": "google_search",
    "url_context": "url_context",
    "enterprise_web_search": "google_search",
    "google_maps": "google_maps",
}
_SERVER_TOOLS |= {
    key.split("_")[0] + "".join(w.title() for w in key.split("_")[1:]): name
    for key, name in _SERVER_TOOLS.items()
}


def gemini_action(method: str, path: str) -> tuple[str | None, str | None] | None:
    """``(model, action)`` of a Gemini request to ``path`` (below ``v1beta/``), or None when
    the proxy does not relay it (a 404).

    ``POST models/gemini-2.5-pro:generateContent`` -> ``("gemini-2.5-pro",
    "generateContent")``; a POST needs one of :data:`GEMINI_ACTIONS` and a non-empty model.
    ``GET models`` and ``GET models/{m}`` are listings -> ``(m or None, None)``; a GET with an
    action (``models/m:foo``) or a deeper path (``models/m/operations``) is refused, and so is
    a model that is not one safe path segment (``..``, ``.x``, anything percent-decoded to
    ``/``, ``?`` or ``%``).
    """
    rest = path.removeprefix("models").removeprefix("/")
    model, sep, action = rest.partition(":")
    if model and not SAFE_SEGMENT.fullmatch(model):
        return None
    if method == "GET":
        return None if sep else (model or None, None)
    if not model or action not in GEMINI_ACTIONS:
        return None
    return model, action


def _without_key_param(query: str) -> str:
    """``query`` without its ``key=...`` pairs (the name compared after percent-decoding);
    every other pair is kept byte for byte, in order."""
    pairs = [p for p in query.split("&") if p and unquote_plus(p.split("=", 1)[0]) != "key"]
    return "&".join(pairs)


class GeminiProvider(Provider):
    """``/gemini/v1beta/models[/{m}[:action]]``. The model and the action are in the URL,
    not the body; any action but those in :data:`GEMINI_ACTIONS` (``:embedContent``,
    ``:batchGenerateContent``) is a 404, and so are cached contents and files. The key comes
    as ``x-goog-api-key`` or a ``?key=`` query parameter, which is checked and then removed:
    the real key goes upstream only as ``x-goog-api-key``."""

    name = "gemini"
    version = "v1beta"
    client_path = "/gemini"
    default_base_url = "https://generativelanguage.googleapis.com"
    base_url_env = "GOOGLE_GEMINI_BASE_URL"
    key_envs = ("GEMINI_API_KEY", "GOOGLE_API_KEY")
    key_header = "x-goog-api-key"
    # What Gemini CLI uses: generateContent, streamGenerateContent, countTokens and the model
    # listing. Embeddings, batches, cached contents, files and tuned models are refused.
    endpoints = (
        Endpoint("models", ("GET",), False),
        # Metered or not by its action (see route()).
        Endpoint("models/{rest:path}", ("GET", "POST"), True),
    )

    # ``x-goog-api-client`` is the SDK's telemetry; ``x-goog-user-project`` (who pays) is
    # not forwarded.
    forwarded_headers = frozenset({"x-goog-api-client"})

    def server_tools(self, path: str, payload: dict[str, Any]) -> list[ToolUse]:
        """``tools`` entries of :data:`_SERVER_TOOLS` (``google_search``, ``url_context``...)
        and ``fileData`` parts whose ``fileUri`` is an ``http(s)`` URL."""
        uses: list[ToolUse] = []
        for tool in payload.get("tools") or []:
            if isinstance(tool, dict):
                uses += [ToolUse(_SERVER_TOOLS[k]) for k in tool if k in _SERVER_TOOLS]
        for part in walk_dicts(payload.get("contents")):
            data = part.get("fileData", part.get("file_data"))
            if isinstance(data, dict):
                uri = data.get("fileUri", data.get("file_uri"))
                if is_web_url(uri):
                    uses.append(ToolUse("file_url", url=uri))
        return uses

    def server_tool_uses(self, response: Any) -> list[ToolUse]:
        """Each candidate's ``groundingMetadata`` (``webSearchQueries``, the
        ``groundingChunks``' ``web.uri``) and ``urlContextMetadata`` (each
        ``retrievedUrl``); a ``:streamGenerateContent`` JSON array is read whole."""
        uses: list[ToolUse] = []
        answers = response if isinstance(response, list) else [response]
        for answer in answers:
            cands = answer.get("candidates") if isinstance(answer, dict) else None
            for cand in cands if isinstance(cands, list) else []:
                if not isinstance(cand, dict):
                    continue
                ground = cand.get("groundingMetadata") or cand.get("grounding_metadata") or {}
                if isinstance(ground, dict):
                    for q in ground.get("webSearchQueries") or []:
                        if isinstance(q, str):
                            uses.append(ToolUse("google_search", query=q))
                    for chunk in ground.get("groundingChunks") or []:
                        web = chunk.get("web") if isinstance(chunk, dict) else None
                        if isinstance(web, dict) and isinstance(web.get("uri"), str):
                            uses.append(ToolUse("google_search", url=web["uri"]))
                context = cand.get("urlContextMetadata") or cand.get("url_context_metadata")
                for meta in walk_dicts(context):
                    url = meta.get("retrievedUrl", meta.get("retrieved_url"))
                    if isinstance(url, str):
                        uses.append(ToolUse("url_context", url=url))
        return uses

    def allowed_endpoints(self) -> list[str]:
        """The listing, one model, and each action of :data:`GEMINI_ACTIONS`."""
        models = f"{self.prefix}/models"
        return [f"GET {models}", f"GET {models}/{{model}}"] + [
            f"POST {models}/{{model}}:{action}" for action in GEMINI_ACTIONS
        ]

    def normalize(self, usage: dict[str, Any]) -> TokenCounts:
        """``usageMetadata``: ``promptTokenCount`` already includes
        ``cachedContentTokenCount``; ``toolUsePromptTokenCount`` (prompts of built-in tools)
        is added to the input and ``thoughtsTokenCount`` to the output (thinking tokens are
        billed as output)."""
        return TokenCounts(
            input=token_count(usage.get("promptTokenCount"))
            + token_count(usage.get("toolUsePromptTokenCount")),
            output=token_count(usage.get("candidatesTokenCount"))
            + token_count(usage.get("thoughtsTokenCount")),
            cached=token_count(usage.get("cachedContentTokenCount")),
        )

    def response_usage(self, content: bytes, data: dict[str, Any]) -> dict[str, Any] | None:
        """``usageMetadata``; a ``:streamGenerateContent`` without ``alt=sse`` is a JSON
        array of responses, whose last element carrying ``usageMetadata`` counts."""
        if isinstance(data.get("usageMetadata"), dict):
            return data["usageMetadata"]
        found = [
            i["usageMetadata"]
            for i in json_array(content) or []
            if isinstance(i, dict) and isinstance(i.get("usageMetadata"), dict)
        ]
        return found[-1] if found else None

    def observe(self, event: dict[str, Any], meter: StreamMeter) -> bool:
        """Each event may carry ``usageMetadata`` (cumulative); the last one that does
        counts. The model is the first ``modelVersion``."""
        if isinstance(event.get("usageMetadata"), dict):
            meter.usage = event["usageMetadata"]
        # The stream has no end marker: its last event is the one with a finish reason, and
        # the usage that comes with it is final.
        candidates = event.get("candidates")
        if isinstance(candidates, list) and any(
            isinstance(c, dict) and c.get("finishReason") for c in candidates
        ):
            meter.ended = True
            meter.final = meter.usage is not None
        if isinstance(event.get("modelVersion"), str):
            meter.model = meter.model or event["modelVersion"]
        return True

    def requested_output_tokens(self, payload: dict[str, Any]) -> int | None:
        """``generationConfig.maxOutputTokens``."""
        config = payload.get("generationConfig")
        return requested_count(config.get("maxOutputTokens")) if isinstance(config, dict) else None

    def route(self, method: str, path: str, endpoint: Endpoint) -> Route | None:
        parsed = gemini_action(method, path)
        if parsed is None:
            return None
        model, action = parsed
        metered = GEMINI_ACTIONS.get(action or "", False)
        return Route(metered, model, stream=action == "streamGenerateContent")

    def model_and_stream(self, route: Route, payload: dict[str, Any]) -> tuple[str | None, bool]:
        return route.model, route.stream

    def given_keys(self, request: Request) -> list[str]:
        return super().given_keys(request) + [
            v.strip() for v in request.query_params.getlist("key")
        ]

    def upstream_url(self, base_url: str, path: str, query: str) -> str:
        """The version is added to the root; the query loses its ``key`` (the proxy key)."""
        return super().upstream_url(base_url, path, _without_key_param(query))

    def error_body(self, status: int, message: str) -> dict[str, Any]:
        """Google's ``{"error": {"code", "message", "status"}}`` with the canonical status
        name (401 ``UNAUTHENTICATED``, 429 ``RESOURCE_EXHAUSTED``, 502 ``UNAVAILABLE``, 504
        ``DEADLINE_EXCEEDED``; anything unlisted ``INTERNAL``)."""
        name = _STATUS_NAMES.get(status, "INTERNAL")
        return {"error": {"code": status, "message": message, "status": name}}
