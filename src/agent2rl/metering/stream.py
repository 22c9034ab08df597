"""Server-sent-event streams on their way through the proxy, whichever provider sent them.

:class:`StreamMeter` splits the upstream bytes into whole SSE events, hands each JSON event to
the provider's reader (which picks out usage, model and error, see
:meth:`agent2rl.metering.providers.Provider.observe`) and returns the bytes to forward.
:class:`Relay` and :class:`RelayResponse` stream them to the client and make sure the request
is recorded exactly once however the stream ends: completed, failed upstream, or abandoned by
a client that hung up.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
import httpx
from fastapi.responses import StreamingResponse

from agent2rl.files import json_object

#: The most events a meter keeps for the transcript: bounds the proxy's memory per stream.
MAX_KEPT_EVENTS = 200_000

_EVENT_END = re.compile(rb"\r\n\r\n|\n\n|\r\r")

#: A provider's event reader: notes what one JSON event says in the meter and returns
#: whether the event is forwarded to the client.
Observe = Callable[[dict[str, Any], "StreamMeter"], bool]


class StreamMeter:
    """Splits an SSE byte stream into whole events, reads usage out of them, and returns the
    bytes to forward (unchanged, except events ``observe`` drops: the usage-only chat chunk
    the proxy asked for itself when ``drop_usage_chunk``).

    ``usage`` (the provider's usage object), ``model`` and ``error`` hold what the events
    said so far. An event whose ``error`` is an object sets ``error`` whatever the provider;
    events that are not JSON objects (``[DONE]``, comments, pings) are forwarded unread.
    """

    def __init__(self, observe: Observe, *, drop_usage_chunk: bool = False) -> None:
        self.observe = observe
        self.drop_usage_chunk = drop_usage_chunk
        self.usage: dict[str, Any] | None = None
        self.model: str | None = None
        self.error: str | None = None
        #: the stream's own last event went by (OpenAI's ``data: [DONE]``, Anthropic's
        #: ``message_stop``, or what the provider's ``observe`` marks: a Responses stream's
        #: ``response.completed``, a Gemini event with a finish reason): a client may close
        #: right after it without cutting anything, and an upstream that ends the stream
        #: before it (or before ``final``) cut it short
        self.ended = False
        #: the event carrying the stream's final usage went by (set by the provider's
        #: ``observe``); a stream that ends without it was cut, and the proxy charges its
        #: reservation instead of the partial (or missing) usage
        self.final = False
        #: every JSON-object event, in order, for the transcript's reassembled response
        #: (:func:`agent2rl.metering.transcript.reassemble`); at most :data:`MAX_KEPT_EVENTS`
        self.events: list[dict[str, Any]] = []
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
        lines = event.decode("utf-8", "replace").splitlines()
        data = "\n".join(line[5:].removeprefix(" ") for line in lines if line.startswith("data:"))
        if data == "[DONE]":
            self.ended = True
        obj = json_object(data)  # None for [DONE] too
        if obj is None:
            return True
        if len(self.events) < MAX_KEPT_EVENTS:
            self.events.append(obj)
        if isinstance(obj.get("error"), dict):
            self.error = str(obj["error"].get("message") or obj["error"])[:500]
        if obj.get("type") == "message_stop":
            self.ended = True
        return self.observe(obj, self)


class Relay:
    """One upstream stream on its way to the client: the body to send, and the bookkeeping
    that must run exactly once however the stream ends.

    ``error_event`` turns a message into the provider's stream error event, sent when the
    upstream fails mid-stream; ``on_end`` records the request (it reads ``meter`` and
    ``error``) before the upstream connection is released.
    """

    def __init__(
        self,
        resp: httpx.Response,
        meter: StreamMeter,
        *,
        error_event: Callable[[str], bytes],
        on_end: Callable[[Relay], None],
    ) -> None:
        self.resp = resp
        self.meter = meter
        self.error_event = error_event
        self.on_end = on_end
        self.error: str | None = None
        self.complete = False
        self._finished = False

    async def body(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self.resp.aiter_bytes():
                if out := self.meter.feed(chunk):
                    yield out
            if tail := self.meter.flush():
                yield tail
            if not (self.meter.ended or self.meter.final):
                # A clean end of the body but not of the stream: the client would take the
                # truncated answer for a whole one; the SDKs raise on the error event.
                self.error = "upstream stream ended before its last event"
                yield self.error_event(self.error)
        except httpx.HTTPError as exc:
            what = "timed out" if isinstance(exc, httpx.TimeoutException) else "failed"
            self.error = f"upstream stream {what}: {type(exc).__name__}: {exc}"[:500]
            yield self.error_event(self.error)
        self.complete = True
        # Record before the response ends, so a client that has the whole answer finds its
        # line in the usage file (almost always: SDKs may close at [DONE] a moment earlier).
        await self.finish()

    async def finish(self) -> None:
        """Record the request and release the upstream connection; idempotent."""
        if self._finished:
            return
        self._finished = True
        # A client that closes right after the end marker has the whole answer (SDKs do, at
        # [DONE]); only a close before it cut the stream.
        if not self.complete and self.error is None and not self.meter.ended:
            self.error = "client disconnected before the stream ended"
        self.on_end(self)
        with anyio.CancelScope(shield=True):
            await self.resp.aclose()


class RelayResponse(StreamingResponse):
    """Streams a :class:`Relay` and finishes it however streaming ends — the client hanging
    up included, even before the first byte, when the body iterator never runs at all."""

    def __init__(self, relay: Relay, status_code: int, headers: dict[str, str]) -> None:
        super().__init__(relay.body(), status_code=status_code, headers=headers)
        self.relay = relay

    async def stream_response(self, send: Any) -> None:
        try:
            await super().stream_response(send)
        finally:
            with anyio.CancelScope(shield=True):
                await self.body_iterator.aclose()  # type: ignore[attr-defined]
                await self.relay.finish()
