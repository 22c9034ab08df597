"""A scripted fake LLM provider: a real HTTP server on loopback that speaks the OpenAI Chat
Completions and Responses APIs, the Anthropic Messages API and the Gemini API
(``/v1beta/models/{m}:generateContent`` and ``:streamGenerateContent?alt=sse``; tool calls as
``functionCall`` parts, usage as ``usageMetadata``), streaming and not.

It replays a :class:`Script` — a list of assistant turns, each text, tool calls, or both — so
tests (and users dry-running an agent adapter) get realistic provider traffic without a paid
API. Usage numbers are deterministic: input tokens are counted from the request's message text
(:func:`prompt_tokens`), output tokens from the reply (:func:`reply_tokens`), both with the
crude word-and-punctuation tokenizer :func:`count_tokens`. Every answer is kept in
:attr:`FakeProvider.served` (usage, the exact response bytes, the key the client sent) so a test
can compare what was served with what a client or the metering proxy saw.

One global cursor walks the script: each generation request (chat completion, response,
message, generateContent — on any API, from any conversation) takes the next turn; once the
script is used up every request gets ``final_text``. Requests for models or token counts do
not move the cursor.

Per-request scripting: :meth:`FakeProvider.respond_with` installs a responder, a function of
the request body that returns the turn for that request (or None for the script's next
turn), so concurrent clients get answers that depend on what they asked rather than on the
order they arrived in — e.g. a judge's verdict per instruction. A chat completion that asks
for ``logprobs`` gets ``choices[0].logprobs.content[0]`` with the turn's scripted
``top_logprobs`` (cut to the request's ``top_logprobs``). Failures are turns too:
``error_status`` (a provider-shaped error, e.g. 503), ``delay_s`` (a hang past the client's
timeout) and ``drop_connection`` (headers and a partial body, then the connection closed);
a refused connection is a stopped provider (:meth:`FakeProvider.stop`, then
``start_fake_provider(port=...)`` again to recover on the same port).

Script files (JSON or TOML) hold the same fields as :class:`Script`::

    {"turns": ["Looking.", {"tool_calls": [{"name": "bash", "arguments": {"cmd": "ls"}}]}],
     "final_text": "Done."}

Run one by hand with ``python tests/support/fake_provider.py script.json --port 8765``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import socket
import sys
import threading
import time
import tomllib
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

# --------------------------------------------------------------------------------------------
# Scripts


@dataclass
class ToolCall:
    """One tool call: ``arguments`` is a dict (serialised to JSON) or a ready JSON string.
    ``id`` defaults to a deterministic ``call_fake_<request>_<i>`` / ``toolu_fake_...``."""

    name: str
    arguments: dict[str, Any] | str = field(default_factory=dict)
    id: str | None = None

    def arguments_json(self) -> str:
        return self.arguments if isinstance(self.arguments, str) else json.dumps(self.arguments)

    def arguments_dict(self) -> dict[str, Any]:
        """The arguments as a dict (a JSON string that is not an object gives ``{}``)."""
        if isinstance(self.arguments, dict):
            return self.arguments
        try:
            value = json.loads(self.arguments)
        except json.JSONDecodeError:
            return {}
        return value if isinstance(value, dict) else {}


@dataclass
class Turn:
    """One scripted assistant turn.

    ``text`` and ``tool_calls`` may both be set (text first). ``cached_input_tokens`` reports
    that many prompt tokens as cache reads (capped at the prompt size). ``delay_s`` waits
    before answering (to exercise timeouts); ``chunk_delay_s`` between stream events (to
    exercise clients that hang up mid-stream). ``error_status`` answers with a provider-shaped
    error of that status instead of a reply (with a ``Retry-After: <retry_after>`` header when
    that is set); ``drop_connection`` sends the response headers and the start of a body, then
    closes the connection (the client sees it dropped). ``cut_stream_after``: a streamed reply
    sends that many events and then stops: no usage event, no end marker (the server ends the
    chunked body after the handler's exception), as a provider's stream cut short.

    ``web_searches``: queries the provider's own web search ran for this turn, shown in the
    API's shape before the reply (a Responses ``web_search_call`` item, an Anthropic
    ``server_tool_use`` block, Gemini ``groundingMetadata.webSearchQueries``). ``no_usage``:
    an answer without its usage object (a server that reports none): non-streamed on every
    API, and a Responses stream whose ``response.completed`` has ``usage: null``.

    ``top_logprobs``: the first token's candidates as ``[token, logprob]`` pairs (or a
    ``{token: logprob}`` table), most likely first; served as Chat Completions ``logprobs``
    when the request asks for them. ``text`` defaults to the most likely candidate then.
    """

    text: str | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)
    cached_input_tokens: int = 0
    delay_s: float = 0.0
    chunk_delay_s: float = 0.0
    error_status: int | None = None
    error_message: str = "scripted provider error"
    drop_connection: bool = False
    retry_after: str | None = None
    cut_stream_after: int | None = None
    top_logprobs: list[tuple[str, float]] | dict[str, float] | None = None
    web_searches: list[str] = field(default_factory=list)
    no_usage: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.top_logprobs, dict):
            self.top_logprobs = list(self.top_logprobs.items())
        if self.top_logprobs is not None:
            self.top_logprobs = [(str(t), float(lp)) for t, lp in self.top_logprobs]
            if self.text is None and self.top_logprobs and not self.tool_calls:
                self.text = self.top_logprobs[0][0]

    @classmethod
    def from_obj(cls, obj: Turn | str | dict[str, Any]) -> Turn:
        """A turn from a string (its text) or a dict of the fields; tool calls may be dicts."""
        if isinstance(obj, Turn):
            return obj
        if isinstance(obj, str):
            return cls(text=obj)
        if not isinstance(obj, dict):
            raise ValueError(f"a script turn must be a string or a table, not {obj!r}")
        data = dict(obj)
        calls = [
            c if isinstance(c, ToolCall) else ToolCall(**c) for c in data.pop("tool_calls", [])
        ]
        unknown = set(data) - set(cls.__dataclass_fields__)
        if unknown:
            raise ValueError(f"unknown script turn field(s): {', '.join(sorted(unknown))}")
        return cls(tool_calls=calls, **data)


@dataclass
class Script:
    """The turns to replay, then ``final_text`` for every request after them."""

    turns: list[Turn] = field(default_factory=list)
    final_text: str = "Done."

    @classmethod
    def from_obj(cls, obj: Script | list[Any] | dict[str, Any]) -> Script:
        """A script from a list of turns or a ``{"turns": [...], "final_text": ...}`` dict."""
        if isinstance(obj, Script):
            return obj
        if isinstance(obj, list):
            obj = {"turns": obj}
        turns = [Turn.from_obj(t) for t in obj.get("turns", [])]
        return cls(turns=turns, final_text=str(obj.get("final_text", "Done.")))

    @classmethod
    def load(cls, path: Path) -> Script:
        """Load a ``.json`` or ``.toml`` script file; ValueError names a bad file."""
        path = Path(path)
        try:
            text = path.read_text()
            data = tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)
            return cls.from_obj(data)
        except (OSError, ValueError, TypeError) as exc:
            raise ValueError(f"bad fake-provider script {path}: {exc}") from exc


# --------------------------------------------------------------------------------------------
# Token counts

_TOKEN = re.compile(r"\w+|[^\w\s]")
_PROMPT_FIELDS = (
    "system",
    "messages",
    "tools",
    "instructions",
    "input",
    "systemInstruction",
    "contents",
)


def count_tokens(text: str) -> int:
    """Words and punctuation marks in ``text`` — deterministic, roughly a real token count."""
    return len(_TOKEN.findall(text))


def _strings(obj: Any) -> Iterator[str]:
    if isinstance(obj, str):
        yield obj
    elif isinstance(obj, dict):
        for value in obj.values():
            yield from _strings(value)
    elif isinstance(obj, list):
        for value in obj:
            yield from _strings(value)


def prompt_tokens(body: dict[str, Any]) -> int:
    """Input tokens of a request: the string values (not the keys) of its system prompt,
    messages / input items / Gemini ``contents``, instructions and tool definitions, plus 3 per
    message. A Gemini ``countTokens`` body's ``generateContentRequest`` counts as the request
    itself. Other
    fields (``stream``, ``stream_options``, sampling settings) do not count, so a proxy that
    adds ``stream_options`` does not change the count. At least 1."""
    if isinstance(body.get("generateContentRequest"), dict):
        body = body["generateContentRequest"]
    n = sum(count_tokens(s) for key in _PROMPT_FIELDS for s in _strings(body.get(key)))
    for key in ("messages", "input", "contents"):
        if isinstance(body.get(key), list):
            n += 3 * len(body[key])
    return max(n, 1)


def reply_tokens(turn: Turn) -> int:
    """Output tokens of a turn: its text plus each tool call's name and JSON arguments."""
    n = count_tokens(turn.text or "")
    for call in turn.tool_calls:
        n += count_tokens(call.name) + count_tokens(call.arguments_json())
    return max(n, 1)


# --------------------------------------------------------------------------------------------
# What was served


@dataclass
class Served:
    """One answered generation request."""

    index: int  # 1-based request number
    api: str  # "openai-chat" | "openai-responses" | "anthropic" | "gemini"
    model: str
    stream: bool
    turn: int | None  # index into the script, None for the final text
    status: int
    input_tokens: int = 0  # the whole prompt, cache reads included
    output_tokens: int = 0
    cached_tokens: int = 0
    usage: dict[str, Any] | None = None  # the usage object in the API's own shape
    api_key: str | None = None  # the credential the client sent
    query: str = ""  # the raw query string (Gemini: ``alt=sse``)
    request: dict[str, Any] = field(default_factory=dict)
    response: bytes = b""  # the exact body sent


def _pieces(text: str, size: int = 1) -> list[str]:
    # Word-sized deltas whose concatenation is exactly ``text``.
    words = re.findall(r"\S+\s*|\s+", text)
    return ["".join(words[i : i + size]) for i in range(0, len(words), size)] or [""]


def _split(text: str, width: int = 12) -> list[str]:
    return [text[i : i + width] for i in range(0, len(text), width)] or [""]


def _sse(data: Any, event: str | None = None) -> bytes:
    head = f"event: {event}\n" if event else ""
    body = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    return f"{head}data: {body}\n\n".encode()


class _Engine:
    """The script cursor and the three wire formats."""

    def __init__(self, script: Script, api_key: str | None, models: list[str]) -> None:
        self.lock = threading.Lock()
        self.api_key = api_key
        self.models = models
        self.received: list[str] = []
        #: the headers of each request received, in order (names lower case)
        self.headers: list[dict[str, str]] = []
        self.epoch = 0  # bumped by reset(): which script a request was answered from
        #: per-request answers (see FakeProvider.respond_with); None: the script only
        self.responder: Any = None
        self.reset(script)

    def reset(self, script: Script) -> None:
        with self.lock:
            self.script = script
            self.cursor = 0
            self.count = 0
            self.epoch += 1
            self.served: list[Served] = []

    def next_turn(self, body: Any = None) -> tuple[int, int, int | None, Turn]:
        """(epoch, request number, script index or None for the final text or a responder's
        turn, the turn). A responder's answer for ``body`` wins over the script."""
        responder = self.responder
        answer = responder(body) if responder is not None else None
        with self.lock:
            self.count += 1
            n = self.count
            if answer is not None:
                return self.epoch, n, None, Turn.from_obj(answer)
            if self.cursor < len(self.script.turns):
                i = self.cursor
                self.cursor += 1
                return self.epoch, n, i, self.script.turns[i]
            return self.epoch, n, None, Turn(text=self.script.final_text)

    def add(self, served: Served, epoch: int) -> None:
        with self.lock:
            # A request still delayed when the script was replaced belongs to the old one.
            if epoch == self.epoch:
                self.served.append(served)

    # ---- OpenAI Chat Completions

    def chat(self, n: int, turn: Turn, body: dict[str, Any], tokens: tuple[int, int, int]):
        model, stream = body["model"], body.get("stream") is True
        inp, out, cached = tokens
        usage = {
            "prompt_tokens": inp,
            "completion_tokens": out,
            "total_tokens": inp + out,
            "prompt_tokens_details": {"cached_tokens": cached, "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0},
        }
        cid, created = f"chatcmpl-fake-{n}", int(time.time())
        calls = [
            {
                "id": c.id or f"call_fake_{n}_{i}",
                "type": "function",
                "function": {"name": c.name, "arguments": c.arguments_json()},
            }
            for i, c in enumerate(turn.tool_calls)
        ]
        finish = "tool_calls" if calls else "stop"
        logprobs = _chat_logprobs(turn, body) if body.get("logprobs") is True else None
        if logprobs is not None and body.get("max_tokens") == 1:
            finish = "length"
        if not stream:
            message: dict[str, Any] = {"role": "assistant", "content": turn.text, "refusal": None}
            if calls:
                message["tool_calls"] = calls
            return usage, {
                "id": cid,
                "object": "chat.completion",
                "created": created,
                "model": model,
                "choices": [
                    {"index": 0, "message": message, "finish_reason": finish, "logprobs": logprobs}
                ],
                "usage": usage,
            }
        with_usage = bool((body.get("stream_options") or {}).get("include_usage"))

        def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> bytes:
            obj: dict[str, Any] = {
                "id": cid,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "choices": [
                    {"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": None}
                ],
            }
            if with_usage:
                obj["usage"] = None
            return _sse(obj)

        events = [chunk({"role": "assistant", "content": "", "refusal": None})]
        if turn.text:
            events += [chunk({"content": p}) for p in _pieces(turn.text)]
        for i, call in enumerate(calls):
            head = {**call, "index": i, "function": {"name": call["function"]["name"]}}
            head["function"]["arguments"] = ""
            events.append(chunk({"tool_calls": [head]}))
            for part in _split(call["function"]["arguments"]):
                events.append(
                    chunk({"tool_calls": [{"index": i, "function": {"arguments": part}}]})
                )
        events.append(chunk({}, finish))
        if with_usage:
            events.append(
                _sse(
                    {
                        "id": cid,
                        "object": "chat.completion.chunk",
                        "created": created,
                        "model": model,
                        "choices": [],
                        "usage": usage,
                    }
                )
            )
        events.append(_sse("[DONE]"))
        return usage, events

    # ---- OpenAI Responses

    def responses(self, n: int, turn: Turn, body: dict[str, Any], tokens: tuple[int, int, int]):
        model, stream = body["model"], body.get("stream") is True
        inp, out, cached = tokens
        usage = {
            "input_tokens": inp,
            "input_tokens_details": {"cached_tokens": cached},
            "output_tokens": out,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": inp + out,
        }
        items: list[dict[str, Any]] = [
            {
                "id": f"ws_fake_{n}_{i}",
                "type": "web_search_call",
                "status": "completed",
                "action": {"type": "search", "query": q},
            }
            for i, q in enumerate(turn.web_searches)
        ]
        if turn.text:
            part = {"type": "output_text", "text": turn.text, "annotations": []}
            items.append(
                {
                    "id": f"msg_fake_{n}",
                    "type": "message",
                    "status": "completed",
                    "role": "assistant",
                    "content": [part],
                }
            )
        for i, c in enumerate(turn.tool_calls):
            items.append(
                {
                    "id": f"fc_fake_{n}_{i}",
                    "type": "function_call",
                    "status": "completed",
                    "call_id": c.id or f"call_fake_{n}_{i}",
                    "name": c.name,
                    "arguments": c.arguments_json(),
                }
            )
        full = {
            "id": f"resp_fake_{n}",
            "object": "response",
            "created_at": int(time.time()),
            "status": "completed",
            "model": model,
            "output": items,
            "usage": usage,
            "error": None,
            "incomplete_details": None,
            "instructions": body.get("instructions"),
            "metadata": {},
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": body.get("tools") or [],
        }
        if turn.no_usage:  # a stream too: response.completed without usage
            full["usage"] = None
        if not stream:
            return usage, full
        seq = iter(range(10**9))

        def ev(kind: str, **data: Any) -> bytes:
            return _sse({"type": kind, "sequence_number": next(seq), **data}, event=kind)

        start = {**full, "status": "in_progress", "output": [], "usage": None}
        events = [
            ev("response.created", response=start),
            ev("response.in_progress", response=start),
        ]
        for o, item in enumerate(items):
            ref = {"item_id": item["id"], "output_index": o}
            if item["type"] == "web_search_call":
                events.append(ev("response.output_item.added", output_index=o, item=item))
            elif item["type"] == "message":
                text = item["content"][0]["text"]
                empty = {"type": "output_text", "text": "", "annotations": []}
                events.append(
                    ev(
                        "response.output_item.added",
                        output_index=o,
                        item={**item, "status": "in_progress", "content": []},
                    )
                )
                events.append(ev("response.content_part.added", **ref, content_index=0, part=empty))
                for p in _pieces(text):
                    events.append(ev("response.output_text.delta", **ref, content_index=0, delta=p))
                events.append(ev("response.output_text.done", **ref, content_index=0, text=text))
                events.append(
                    ev(
                        "response.content_part.done",
                        **ref,
                        content_index=0,
                        part=item["content"][0],
                    )
                )
            else:
                events.append(
                    ev(
                        "response.output_item.added",
                        output_index=o,
                        item={**item, "status": "in_progress", "arguments": ""},
                    )
                )
                for p in _split(item["arguments"]):
                    events.append(ev("response.function_call_arguments.delta", **ref, delta=p))
                events.append(
                    ev("response.function_call_arguments.done", **ref, arguments=item["arguments"])
                )
            events.append(ev("response.output_item.done", output_index=o, item=item))
        events.append(ev("response.completed", response=full))
        return usage, events

    # ---- Anthropic Messages

    def messages(self, n: int, turn: Turn, body: dict[str, Any], tokens: tuple[int, int, int]):
        model, stream = body["model"], body.get("stream") is True
        inp, out, cached = tokens
        usage = {
            "input_tokens": inp - cached,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": cached,
            "output_tokens": out,
        }
        blocks: list[dict[str, Any]] = [
            {
                "type": "server_tool_use",
                "id": f"srvtoolu_fake_{n}_{i}",
                "name": "web_search",
                "input": {"query": q},
            }
            for i, q in enumerate(turn.web_searches)
        ]
        if turn.text:
            blocks.append({"type": "text", "text": turn.text})
        for i, c in enumerate(turn.tool_calls):
            blocks.append(
                {
                    "type": "tool_use",
                    "id": c.id or f"toolu_fake_{n}_{i}",
                    "name": c.name,
                    "input": c.arguments_dict(),
                }
            )
        stop = "tool_use" if turn.tool_calls else "end_turn"
        message = {
            "id": f"msg_fake_{n}",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": blocks,
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": usage,
        }
        if not stream:
            return usage, message

        def ev(kind: str, **data: Any) -> bytes:
            return _sse({"type": kind, **data}, event=kind)

        start = {
            **message,
            "content": [],
            "stop_reason": None,
            "usage": {**usage, "output_tokens": 1},
        }
        events = [ev("message_start", message=start), ev("ping")]
        for i, block in enumerate(blocks):
            if block["type"] == "text":
                events.append(
                    ev("content_block_start", index=i, content_block={"type": "text", "text": ""})
                )
                for p in _pieces(block["text"]):
                    events.append(
                        ev("content_block_delta", index=i, delta={"type": "text_delta", "text": p})
                    )
            else:
                events.append(
                    ev("content_block_start", index=i, content_block={**block, "input": {}})
                )
                for p in _split(json.dumps(block["input"])):
                    delta = {"type": "input_json_delta", "partial_json": p}
                    events.append(ev("content_block_delta", index=i, delta=delta))
            events.append(ev("content_block_stop", index=i))
        events.append(
            ev(
                "message_delta",
                delta={"stop_reason": stop, "stop_sequence": None},
                usage={"output_tokens": out},
            )
        )
        events.append(ev("message_stop"))
        return usage, events

    # ---- Gemini

    def gemini(self, n: int, turn: Turn, body: dict[str, Any], tokens: tuple[int, int, int]):
        """``body`` carries the model and stream flag from the URL as ``_model`` / ``_stream``.

        Usage is ``usageMetadata``: ``promptTokenCount`` includes the cached tokens
        (``cachedContentTokenCount``, present only when non-zero, as Google sends it). A stream
        sends one event per text piece (usage without candidates yet), then the function
        calls, whole, in the last event with ``finishReason`` and the full usage.
        """
        model, stream = body["_model"], body["_stream"]
        inp, out, cached = tokens
        usage: dict[str, Any] = {
            "promptTokenCount": inp,
            "candidatesTokenCount": out,
            "totalTokenCount": inp + out,
        }
        if cached:
            usage["cachedContentTokenCount"] = cached
        usage["promptTokensDetails"] = [{"modality": "TEXT", "tokenCount": inp}]
        calls = []
        for c in turn.tool_calls:
            call: dict[str, Any] = {"name": c.name, "args": c.arguments_dict()}
            if c.id:
                call["id"] = c.id
            calls.append({"functionCall": call})

        def response(parts: list[dict[str, Any]], meta: dict[str, Any], done: bool):
            cand: dict[str, Any] = {"content": {"parts": parts, "role": "model"}, "index": 0}
            if done:
                cand["finishReason"] = "STOP"
                if turn.web_searches:
                    cand["groundingMetadata"] = {"webSearchQueries": list(turn.web_searches)}
            return {
                "candidates": [cand],
                "usageMetadata": meta,
                "modelVersion": model,
                "responseId": f"fake-gemini-{n}",
            }

        if not stream:
            parts = ([{"text": turn.text}] if turn.text else []) + calls
            return usage, response(parts or [{"text": ""}], usage, True)
        steps = [[{"text": p}] for p in _pieces(turn.text)] if turn.text else []
        if calls:
            steps.append(calls)
        steps = steps or [[{"text": ""}]]
        partial = {"promptTokenCount": inp, "totalTokenCount": inp}
        events = [_sse(response(parts, partial, False)) for parts in steps[:-1]]
        events.append(_sse(response(steps[-1], usage, True)))
        return usage, events


def _chat_logprobs(turn: Turn, body: dict[str, Any]) -> dict[str, Any]:
    """Chat Completions ``logprobs`` for the reply's first token: the turn's scripted
    candidates cut to the request's ``top_logprobs`` (the reply text with logprob 0 when
    none are scripted)."""

    def entry(token: str, logprob: float) -> dict[str, Any]:
        return {"token": token, "logprob": logprob, "bytes": list(token.encode())}

    top = turn.top_logprobs or [(turn.text or "", 0.0)]
    n = body.get("top_logprobs")
    shown = top[: n if isinstance(n, int) and n >= 0 else 0]
    first = entry(*top[0])
    first["top_logprobs"] = [entry(t, lp) for t, lp in shown]
    return {"content": [first], "refusal": None}


def _error(kind: str, status: int, message: str) -> JSONResponse:
    if kind == "gemini":
        name = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 404: "NOT_FOUND"}.get(
            status, "INTERNAL"
        )
        body = {"error": {"code": status, "message": message, "status": name}}
        return JSONResponse(body, status_code=status)
    if kind == "anthropic":
        etype = {401: "authentication_error", 400: "invalid_request_error"}.get(status, "api_error")
        return JSONResponse(
            {"type": "error", "error": {"type": etype, "message": message}}, status_code=status
        )
    etype = {401: "invalid_request_error", 400: "invalid_request_error"}.get(status, "server_error")
    code = "invalid_api_key" if status == 401 else None
    return JSONResponse(
        {"error": {"message": message, "type": etype, "param": None, "code": code}},
        status_code=status,
    )


def create_app(engine: _Engine) -> FastAPI:
    """The fake provider's ASGI app over ``engine`` (its script, cursor and record)."""
    app = FastAPI(
        title="agent2rl fake LLM provider", docs_url=None, redoc_url=None, openapi_url=None
    )

    @app.middleware("http")
    async def log_requests(request: Request, call_next: Any) -> Response:
        with engine.lock:
            engine.received.append(f"{request.method} {request.url.path}")
            engine.headers.append({k.lower(): v for k, v in request.headers.items()})
        return await call_next(request)

    def key_of(request: Request) -> str | None:
        auth = request.headers.get("authorization", "")
        if auth[:7].lower() == "bearer ":
            return auth[7:].strip()
        return request.headers.get("x-api-key")

    def gemini_keys(request: Request) -> list[str]:
        # Every credential a Gemini request carries: the header and any ``?key=``.
        keys = [request.headers["x-goog-api-key"]] if "x-goog-api-key" in request.headers else []
        return keys + request.query_params.getlist("key")

    def key_ok(request: Request, kind: str) -> tuple[bool, str | None]:
        """(accepted, the key to record). Gemini needs *every* credential it was sent to be
        the right one, so a stray ``?key=`` next to a good header is refused too."""
        if kind != "gemini":
            key = key_of(request)
            return engine.api_key is None or key == engine.api_key, key
        keys = gemini_keys(request)
        key = keys[0] if keys else None
        return engine.api_key is None or (bool(keys) and set(keys) == {engine.api_key}), key

    async def generate(
        request: Request, kind: str, model: str | None = None, stream: bool = False
    ) -> Response:
        api = kind if kind in ("anthropic", "gemini") else "openai"
        ok, key = key_ok(request, kind)
        if not ok:
            return _error(api, 401, "Incorrect API key provided to the fake provider.")
        try:
            body = json.loads(await request.body())
        except json.JSONDecodeError:
            return _error(api, 400, "request body is not JSON")
        if kind == "gemini":
            if not isinstance(body, dict) or not isinstance(body.get("contents"), list):
                return _error(api, 400, "request needs a JSON object with a 'contents' list")
        elif not isinstance(body, dict) or not isinstance(body.get("model"), str):
            return _error(api, 400, "request needs a JSON object with a string 'model'")
        elif kind != "openai-responses" and not isinstance(body.get("messages"), list):
            return _error(api, 400, "request needs a 'messages' list")
        if kind == "openai-responses" and body.get("background") is True:
            # OpenAI's background mode: the response is queued and answered at once, with
            # no output and no usage (read later by GET /v1/responses/{id}).
            with engine.lock:
                engine.count += 1
                n = engine.count
            queued = {"id": f"resp_fake_{n}", "object": "response", "status": "queued"}
            queued.update(model=body["model"], background=True, output=[], usage=None)
            return JSONResponse(queued)
        epoch, n, index, turn = engine.next_turn(body)
        if kind != "gemini":
            model, stream = body["model"], body.get("stream") is True
        assert model is not None
        served = Served(n, kind, model, stream, index, 200, api_key=key, request=body)
        served.query = request.url.query
        if turn.delay_s:
            await asyncio.sleep(turn.delay_s)
        if turn.drop_connection:
            served.status = 0
            engine.add(served, epoch)

            # Promise a longer body than is sent: the server closes the connection mid-body
            # and the client sees it dropped (uvicorn ends a failed chunked stream cleanly).
            return Response(
                b'{"id":', media_type="application/json", headers={"content-length": "4096"}
            )
        if turn.error_status is not None:
            resp = _error(api, turn.error_status, turn.error_message)
            if turn.retry_after is not None:
                resp.headers["retry-after"] = turn.retry_after
            served.status, served.response = turn.error_status, bytes(resp.body)
            engine.add(served, epoch)
            return resp
        inp = prompt_tokens(body)
        cached = min(max(turn.cached_input_tokens, 0), inp)
        served.input_tokens, served.output_tokens = inp, reply_tokens(turn)
        served.cached_tokens = cached
        build = {
            "openai-chat": engine.chat,
            "openai-responses": engine.responses,
            "anthropic": engine.messages,
            "gemini": engine.gemini,
        }[kind]
        wire = {**body, "_model": model, "_stream": stream} if kind == "gemini" else body
        usage, result = build(n, turn, wire, (inp, served.output_tokens, cached))
        served.usage = usage
        if not stream and turn.no_usage:
            served.usage = None
            result = {k: v for k, v in result.items() if k not in ("usage", "usageMetadata")}
        if not stream:
            served.response = json.dumps(result).encode()
            engine.add(served, epoch)
            return Response(served.response, media_type="application/json")
        served.response = b"".join(result)
        engine.add(served, epoch)

        cut = turn.cut_stream_after

        async def events() -> AsyncIterator[bytes]:
            for i, event in enumerate(result):
                if cut is not None and i >= cut:
                    # Raised after the response started: the server ends the body here.
                    raise ConnectionAbortedError("scripted cut of the stream")
                yield event
                # Separate writes, as a real provider's stream has.
                await asyncio.sleep(turn.chunk_delay_s)

        return StreamingResponse(events(), media_type="text/event-stream")

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Response:
        return await generate(request, "openai-chat")

    @app.post("/v1/responses")
    async def responses(request: Request) -> Response:
        return await generate(request, "openai-responses")

    @app.post("/v1/messages")
    async def messages(request: Request) -> Response:
        return await generate(request, "anthropic")

    @app.post("/v1beta/models/{rest:path}")
    async def gemini(request: Request, rest: str) -> Response:
        model, _, action = rest.partition(":")
        if action in ("generateContent", "streamGenerateContent"):
            # Only the SSE form is served as a stream; without alt=sse the fake answers one
            # JSON object like generateContent (Google would send a JSON array).
            sse = action == "streamGenerateContent" and request.query_params.get("alt") == "sse"
            return await generate(request, "gemini", model, sse)
        if action != "countTokens":
            return _error("gemini", 404, f"models/{rest} is not served by the fake provider")
        if not key_ok(request, "gemini")[0]:
            return _error("gemini", 401, "Incorrect API key provided to the fake provider.")
        try:
            body = json.loads(await request.body())
        except json.JSONDecodeError:
            return _error("gemini", 400, "request body is not JSON")
        return JSONResponse({"totalTokens": prompt_tokens(body)})

    @app.get("/v1beta/models")
    async def gemini_models(request: Request) -> Response:
        if not key_ok(request, "gemini")[0]:
            return _error("gemini", 401, "Incorrect API key provided to the fake provider.")
        data = [
            {
                "name": f"models/{m}",
                "displayName": m,
                "supportedGenerationMethods": ["generateContent", "countTokens"],
            }
            for m in engine.models
        ]
        return JSONResponse({"models": data})

    @app.post("/v1/messages/count_tokens")
    async def count(request: Request) -> Response:
        try:
            body = json.loads(await request.body())
        except json.JSONDecodeError:
            return _error("anthropic", 400, "request body is not JSON")
        return JSONResponse({"input_tokens": prompt_tokens(body)})

    @app.get("/v1/models")
    async def models(request: Request) -> Response:
        if "anthropic-version" in request.headers:
            data = [
                {"type": "model", "id": m, "display_name": m, "created_at": "2025-01-01T00:00:00Z"}
                for m in engine.models
            ]
            first, last = (data[0]["id"], data[-1]["id"]) if data else (None, None)
            return JSONResponse(
                {"data": data, "has_more": False, "first_id": first, "last_id": last}
            )
        data = [
            {"id": m, "object": "model", "created": 0, "owned_by": "fake"} for m in engine.models
        ]
        return JSONResponse({"object": "list", "data": data})

    return app


# --------------------------------------------------------------------------------------------
# The handle


class FakeProvider:
    """A fake provider serving on a thread of this process (see :func:`start_fake_provider`)."""

    def __init__(self, engine: _Engine, server: Any, thread: threading.Thread, port: int) -> None:
        self._engine, self._server, self._thread = engine, server, thread
        self.port = port

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def openai_base_url(self) -> str:
        return f"{self.url}/v1"

    @property
    def anthropic_base_url(self) -> str:
        return self.url

    @property
    def gemini_base_url(self) -> str:
        """The Gemini root (``GOOGLE_GEMINI_BASE_URL``; clients add ``/v1beta/...``)."""
        return self.url

    @property
    def served(self) -> list[Served]:
        """Every answered generation request so far, in the order answered (a copy; a delayed
        turn is listed once its delay is over, so ``index`` may run out of order)."""
        with self._engine.lock:
            return list(self._engine.served)

    @property
    def received(self) -> list[str]:
        """``"METHOD /path"`` of every request that reached the server, refused ones included."""
        with self._engine.lock:
            return list(self._engine.received)

    @property
    def headers(self) -> list[dict[str, str]]:
        """The headers of every request that reached the server (as :attr:`received`)."""
        with self._engine.lock:
            return list(self._engine.headers)

    def respond_with(self, responder: Any) -> None:
        """Answer each generation request with ``responder(body)`` — a :class:`Turn`, its
        string or dict form, or None for the script's next turn. ``None`` removes it. It is
        called on the server's event loop, so it must not block."""
        self._engine.responder = responder

    def load(self, script: Script | list[Any] | dict[str, Any]) -> None:
        """Replace the script, rewind the cursor and forget what was served."""
        self._engine.reset(Script.from_obj(script))
        with self._engine.lock:
            self._engine.received.clear()
            self._engine.headers.clear()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop serving and join the thread; idempotent."""
        self._server.should_exit = True
        self._thread.join(timeout)

    def __enter__(self) -> FakeProvider:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_fake_provider(
    script: Script | list[Any] | dict[str, Any] | Path | None = None,
    *,
    api_key: str | None = None,
    models: list[str] | None = None,
    port: int = 0,
    ready_timeout: float = 10.0,
) -> FakeProvider:
    """Serve ``script`` on 127.0.0.1 (``port`` 0: a free one) from a daemon thread.

    ``script`` is a :class:`Script`, its list/dict form, or a path to a JSON/TOML file.
    ``api_key``: when set, requests without it (Bearer or ``x-api-key``; for Gemini
    ``x-goog-api-key`` or ``?key=``, and every one given must be it) get a 401 and do not
    move the cursor. ``models`` is what ``GET /v1/models`` lists. Raises RuntimeError if the
    server does not start within ``ready_timeout`` seconds.
    """
    import uvicorn

    if isinstance(script, str | Path):
        script = Script.load(Path(script))
    engine = _Engine(Script.from_obj(script or []), api_key, models or ["fake-model"])
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(128)
    bound = sock.getsockname()[1]
    config = uvicorn.Config(create_app(engine), log_level="warning", timeout_graceful_shutdown=2)
    server = uvicorn.Server(config)
    thread = threading.Thread(
        target=lambda: asyncio.run(server.serve(sockets=[sock])),
        name=f"fake-provider-{bound}",
        daemon=True,
    )
    thread.start()
    deadline = time.time() + ready_timeout
    while not server.started:
        if not thread.is_alive() or time.time() > deadline:
            server.should_exit = True
            raise RuntimeError("the fake provider did not start")
        time.sleep(0.01)
    return FakeProvider(engine, server, thread, bound)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Serve a scripted fake LLM provider on loopback.")
    ap.add_argument("script", type=Path, help="a JSON or TOML script file")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--api-key", default=None, help="require this key (default: accept any)")
    args = ap.parse_args(argv)
    try:
        provider = start_fake_provider(args.script, api_key=args.api_key, port=args.port)
    except ValueError as exc:
        print(exc, file=sys.stderr)
        return 2
    print(f"OpenAI base URL:    {provider.openai_base_url}", flush=True)
    print(f"Anthropic base URL: {provider.anthropic_base_url}", flush=True)
    print(f"Gemini base URL:    {provider.gemini_base_url}", flush=True)
    try:
        while provider._thread.is_alive():
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    provider.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
