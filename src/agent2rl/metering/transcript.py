"""The LLM transcript: every request and response the metering proxy relayed, whatever the
agent's CLI logs.

A run's transcript is ``record/transcript.jsonl`` beside the usage file
(:func:`transcript_path`), one JSON line per exchange, appended by the proxy in one ``write``
(a reader of a live run never sees half a line; a torn last line after a kill is skipped by
:func:`read_transcript`). A line (format :data:`TRANSCRIPT_VERSION`)::

    {"v": 1, "seq": 7, "time": 1732540000.1, "api": "anthropic", "endpoint": "messages",
     "model": "claude-haiku-4-5", "stream": true, "status": 200, "latency_s": 1.2,
     "input_tokens": 812, "output_tokens": 40, "cached_tokens": 0, "cache_write_tokens": 0,
     "cost_usd": 0.0011, "error": null, "refused": false,
     "request": {...}, "prefix": {"seq": 6, "n": 4}, "same": {"tools": 2},
     "response": {...}}

``request`` is the client's JSON body as sent (never a header, so never a key: the proxy
reads keys only from headers and the query string, and neither is stored). To keep a 10,000-
call run's transcript linear in what was said rather than quadratic, a conversation field
(``messages``, ``input``, ``contents``) holds only the items not already sent in an earlier
request: ``prefix`` says that the first ``n`` items are those of line ``seq``'s full
conversation; and a large top-level field equal to an earlier line's (``tools``, ``system``)
is left out and named in ``same`` (field -> the line that has it). :func:`full_requests`
rebuilds the whole body.

``response`` is the provider's answer in its non-streamed shape: the JSON body as returned,
or for a stream the events reassembled (:func:`reassemble`) into the body the same request
would have got unstreamed (an OpenAI chat completion, a Responses ``response``, an Anthropic
message, a Gemini ``GenerateContentResponse``), with ``"reassembled": true``.

Any secret the proxy holds (the run's proxy key, the upstream keys), and the run's other
secrets it is handed in :data:`REDACT_ENV` (the grading token the agent submits with), is
replaced by ``[redacted]`` wherever it appears in a line, so not even a client that pasted a
key or the grading token into a prompt puts it on disk, where the viewer and the export
would show it.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from agent2rl.files import read_jsonl_tolerant

#: The transcript line format; bumped when a field changes meaning (new fields only add).
TRANSCRIPT_VERSION = 1
#: What a secret is replaced by.
REDACTED = "[redacted]"
#: Environment variable of the proxy process: more secrets to redact, one a line (the run's
#: grading token; :func:`agent2rl.metering.process.start_metering_proxy`'s ``redact``).
REDACT_ENV = "AGENT2RL_REDACT"
#: The request fields that carry the conversation, whose already-sent prefix is left out.
CONVERSATION_FIELDS = ("messages", "input", "contents")
#: A top-level request field at least this large (JSON bytes) equal to an earlier line's is
#: left out (``same``); smaller ones cost less than the reference.
SAME_MIN_BYTES = 512
#: The conversations remembered for prefix matching (several agents or sub-agents may
#: alternate through one proxy); the oldest is forgotten first.
MAX_CONVERSATIONS = 16
#: The usage-line fields a transcript line starts with, in this order.
USAGE_KEYS = (
    "time",
    "api",
    "endpoint",
    "model",
    "stream",
    "status",
    "latency_s",
    "input_tokens",
    "output_tokens",
    "cached_tokens",
    "cache_write_tokens",
    "cost_usd",
    "estimated",
    "retries",
    "refused",
    "error",
)


def transcript_path(usage_file: Path) -> Path:
    """The transcript beside a usage file (``record/llm_usage.jsonl`` ->
    ``record/transcript.jsonl``)."""
    return Path(usage_file).with_name("transcript.jsonl")


def _digest(value: Any) -> str:
    return hashlib.blake2b(
        json.dumps(value, sort_keys=True, separators=(",", ":"), default=str).encode(),
        digest_size=16,
    ).hexdigest()


def _count_lines(path: Path) -> int:
    try:
        with open(path, "rb") as f:
            return sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b""))
    except OSError:
        return 0


class TranscriptWriter:
    """Appends exchanges to one transcript file, leaving out what earlier lines hold.

    ``secrets``: strings never written, and so are those of :data:`REDACT_ENV` in this
    process's environment (empty and very short ones are ignored: a 1-character "key" would
    redact half the text). Its state (remembered conversations and fields) is in
    memory: a restarted proxy starts over, writing its first request whole, and numbers its
    lines on from the file's line count.
    """

    def __init__(self, path: Path, secrets: Iterable[str] = ()) -> None:
        self.path = Path(path)
        given = [*secrets, *os.environ.get(REDACT_ENV, "").splitlines()]
        self.secrets = sorted({s for s in given if s and len(s) >= 6}, key=len, reverse=True)
        self.seq = _count_lines(self.path)
        # (api, field) -> list of (seq, item digests), most recent last
        self._convs: dict[tuple[str, str], list[tuple[int, list[str]]]] = {}
        # (api, field) -> (digest, seq of the line that holds it)
        self._same: dict[tuple[str, str], tuple[str, int]] = {}

    def _compact(self, api: str, request: dict[str, Any], seq: int) -> dict[str, Any]:
        out: dict[str, Any] = {}
        request = dict(request)
        for name in CONVERSATION_FIELDS:
            items = request.get(name)
            if not isinstance(items, list):
                continue
            digests = [_digest(item) for item in items]
            convs = self._convs.setdefault((api, name), [])
            best_seq, best_n = -1, 0
            for prev_seq, prev in convs:
                n = len(os.path.commonprefix([prev, digests]))
                # A partial match counts too: clients move cache markers along the last
                # messages, so the newest items of an earlier request may differ.
                if n > best_n:
                    best_seq, best_n = prev_seq, n
            if best_n:
                request[name] = items[best_n:]
                out["prefix"] = {"seq": best_seq, "n": best_n, "field": name}
                # A conversation continued whole is superseded by its continuation.
                convs[:] = [c for c in convs if not (c[0] == best_seq and len(c[1]) == best_n)]
            convs.append((seq, digests))
            del convs[:-MAX_CONVERSATIONS]
            break
        same: dict[str, int] = {}
        for name, value in list(request.items()):
            if name in CONVERSATION_FIELDS or not isinstance(value, dict | list | str):
                continue
            text = json.dumps(value, sort_keys=True, default=str)
            if len(text) < SAME_MIN_BYTES:
                continue
            digest = hashlib.blake2b(text.encode(), digest_size=16).hexdigest()
            seen = self._same.get((api, name))
            if seen is not None and seen[0] == digest:
                same[name] = seen[1]
                del request[name]
            else:
                self._same[(api, name)] = (digest, seq)
        if same:
            out["same"] = same
        out["request"] = request
        return out

    def write(
        self,
        usage: dict[str, Any],
        request: dict[str, Any] | None,
        response: Any,
    ) -> int:
        """Append one exchange: ``usage`` is its usage-file line (time, api, endpoint, model,
        status, tokens, latency, error...), ``request`` the client's JSON body (None: not
        JSON or not read), ``response`` the answer (JSON, reassembled stream, or text).
        Returns the line's ``seq``. Raises OSError when the file cannot be written."""
        seq = self.seq
        row: dict[str, Any] = {"v": TRANSCRIPT_VERSION, "seq": seq}
        row.update({key: usage.get(key) for key in USAGE_KEYS})
        if request is not None:
            row.update(self._compact(str(usage.get("api")), request, seq))
        else:
            row["request"] = None
        row["response"] = response
        text = json.dumps(row, separators=(",", ":"), default=str)
        for secret in self.secrets:
            text = text.replace(secret, REDACTED)
            escaped = json.dumps(secret)[1:-1]
            if escaped != secret:
                text = text.replace(escaped, REDACTED)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (text + "\n").encode())
        finally:
            os.close(fd)
        self.seq += 1
        return seq


#: All lines of a transcript, oldest first (missing file: ``[]``; torn or malformed lines
#: skipped).
read_transcript = read_jsonl_tolerant


def full_requests(lines: Sequence[dict[str, Any]]) -> list[dict[str, Any] | None]:
    """The whole request body of every line of a transcript (as read, oldest first), with
    the conversation prefixes and the fields left out put back from earlier lines. Lines
    are found by ``seq`` (a torn line may leave a gap); a reference to a line that is missing
    leaves that part out rather than failing. Linear in the transcript's size: conversations
    are rebuilt in order, each from the one it continues."""
    convs: dict[Any, list[Any]] = {}
    bodies: dict[Any, dict[str, Any]] = {}
    out: list[dict[str, Any] | None] = []
    for line in lines:
        request = line.get("request")
        if not isinstance(request, dict):
            out.append(None)
            continue
        body = dict(request)
        prefix = line.get("prefix")
        if isinstance(prefix, dict):
            name = prefix.get("field") or "messages"
            before = convs.get(prefix.get("seq"))
            if before is not None:
                body[name] = before[: prefix.get("n", 0)] + list(body.get(name) or [])
        for name, seq in (line.get("same") or {}).items():
            earlier = bodies.get(seq)
            if earlier is not None and name in earlier:
                body[name] = earlier[name]
        for name in CONVERSATION_FIELDS:
            if isinstance(body.get(name), list):
                convs[line.get("seq")] = body[name]
                break
        bodies[line.get("seq")] = body
        out.append(body)
    return out


# --------------------------------------------------------------------------------------------
# Streams -> whole responses


def reassemble(api: str, events: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The whole response a stream of ``api``'s JSON events adds up to, in the API's
    non-streamed shape, with ``"reassembled": true``. Events of an unknown shape are kept
    raw (``{"events": [...]}``) rather than dropped."""
    try:
        if api == "anthropic":
            out = _anthropic(events)
        elif api == "gemini":
            out = _gemini(events)
        elif any(str(e.get("type", "")).startswith("response.") for e in events):
            out = _responses(events)
        else:
            out = _chat(events)
    except (TypeError, KeyError, AttributeError, ValueError):
        out = {"events": list(events)}
    out["reassembled"] = True
    return out


def _chat(events: Sequence[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {"object": "chat.completion", "choices": []}
    choices: dict[int, dict[str, Any]] = {}
    for ev in events:
        keys = ("id", "model", "created", "system_fingerprint")
        out.update({key: ev[key] for key in keys if ev.get(key) is not None})
        if isinstance(ev.get("usage"), dict):
            out["usage"] = ev["usage"]
        for ch in ev.get("choices") or []:
            idx = ch.get("index", 0)
            slot = choices.setdefault(
                idx, {"index": idx, "message": {"role": "assistant", "content": None}}
            )
            msg = slot["message"]
            delta = ch.get("delta") or {}
            if delta.get("role"):
                msg["role"] = delta["role"]
            for key in ("content", "reasoning_content", "refusal"):
                if isinstance(delta.get(key), str) and delta[key]:
                    msg[key] = (msg.get(key) or "") + delta[key]
            for call in delta.get("tool_calls") or []:
                calls = msg.setdefault("tool_calls", [])
                i = call.get("index", len(calls))
                while len(calls) <= i:
                    calls.append({"id": None, "type": "function", "function": {"name": ""}})
                target, fn = calls[i], call.get("function") or {}
                if call.get("id"):
                    target["id"] = call["id"]
                if fn.get("name"):
                    target["function"]["name"] = fn["name"]
                if isinstance(fn.get("arguments"), str):
                    args = target["function"].get("arguments", "") + fn["arguments"]
                    target["function"]["arguments"] = args
            if ch.get("finish_reason"):
                slot["finish_reason"] = ch["finish_reason"]
    out["choices"] = [choices[i] for i in sorted(choices)]
    return out


def _responses(events: Sequence[dict[str, Any]]) -> dict[str, Any]:
    final: dict[str, Any] | None = None
    items: dict[int, dict[str, Any]] = {}
    for ev in events:
        kind = ev.get("type")
        if kind in ("response.completed", "response.incomplete", "response.failed"):
            final = ev.get("response")
        elif kind == "response.created" and final is None:
            final = dict(ev.get("response") or {})
        elif kind == "response.output_item.done":
            items[ev.get("output_index", len(items))] = ev.get("item")
        elif kind == "response.output_text.delta":
            # Kept in case the stream is cut before its items are done.
            item = items.setdefault(
                ev.get("output_index", 0),
                {"type": "message", "role": "assistant", "content": [{"text": ""}]},
            )
            content = item.get("content")
            if content and "text" in content[0] and item.get("status") != "completed":
                content[0]["text"] += ev.get("delta", "")
    out = dict(final or {"object": "response"})
    if not out.get("output") and items:
        out["output"] = [items[i] for i in sorted(items)]
    return out


# Anthropic's text-like deltas, by type -> the block field they extend.
_ANTHROPIC_DELTAS = {f"{name}_delta": name for name in ("text", "thinking", "signature")}


def _anthropic(events: Sequence[dict[str, Any]]) -> dict[str, Any]:
    msg: dict[str, Any] = {"type": "message", "role": "assistant", "content": []}
    partial: dict[int, str] = {}
    for ev in events:
        kind = ev.get("type")
        if kind == "message_start":
            msg.update(ev.get("message") or {})
            msg["content"] = list(msg.get("content") or [])
        elif kind in ("content_block_start", "content_block_delta"):
            blocks = msg["content"]
            i = ev.get("index", len(blocks) if kind == "content_block_start" else 0)
            blocks.extend({} for _ in range(i + 1 - len(blocks)))
            if kind == "content_block_start":
                blocks[i] = dict(ev.get("content_block") or {})
                continue
            block, delta = blocks[i], ev.get("delta") or {}
            dtype = delta.get("type")
            name = _ANTHROPIC_DELTAS.get(dtype)
            if name is not None:
                block[name] = block.get(name, "") + delta.get(name, "")
            elif dtype == "input_json_delta":
                partial[i] = partial.get(i, "") + delta.get("partial_json", "")
        elif kind == "message_delta":
            delta = ev.get("delta") or {}
            msg.update({k: delta[k] for k in ("stop_reason", "stop_sequence") if k in delta})
            if isinstance(ev.get("usage"), dict):
                msg["usage"] = {**(msg.get("usage") or {}), **ev["usage"]}
        elif kind == "error":
            msg["error"] = ev.get("error")
    for i, text in partial.items():
        try:
            msg["content"][i]["input"] = json.loads(text) if text else {}
        except json.JSONDecodeError:
            msg["content"][i]["input"] = text
    return msg


def _gemini(events: Sequence[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    cands: dict[int, dict[str, Any]] = {}
    for ev in events:
        keys = ("usageMetadata", "modelVersion", "responseId", "promptFeedback")
        out.update({key: ev[key] for key in keys if ev.get(key) is not None})
        for cand in ev.get("candidates") or []:
            idx = cand.get("index", 0)
            slot = cands.setdefault(idx, {"index": idx, "content": {"role": "model", "parts": []}})
            parts = slot["content"]["parts"]
            for part in (cand.get("content") or {}).get("parts") or []:
                # Consecutive text pieces join into one part, as the unstreamed answer has.
                text = set(part) == {"text"} and isinstance(part["text"], str)
                if text and parts and set(parts[-1]) == {"text"}:
                    parts[-1] = {"text": parts[-1]["text"] + part["text"]}
                else:
                    parts.append(dict(part))
            slot.update({k: v for k, v in cand.items() if k not in ("content", "index")})
    out["candidates"] = [cands[i] for i in sorted(cands)]
    return out
