"""The LLM metering proxy end to end: the real OpenAI / Anthropic SDKs (and raw httpx where
the exact bytes matter) -> the proxy process -> the scripted fake provider, all on loopback.

The fake provider stands in for the paid APIs; it requires the *real* key, so every success
here also shows that the proxy swapped the agent's key for it.
"""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest
from support.fake_provider import FakeProvider, Served, ToolCall, Turn, start_fake_provider

from agent2rl.metering import (
    PROVIDERS,
    PROXY_KEY_ENV,
    MeteringProxy,
    TokenCounts,
    Upstream,
    UsageRecord,
    append_record,
    estimate_cost,
    read_usage,
    start_metering_proxy,
    summarize_usage,
)
from agent2rl.metering.budget import estimate_request
from agent2rl.metering.process import main as proxy_main

pytestmark = pytest.mark.timeout(120)

REAL_KEY = "sk-real-upstream-key"
PROXY_KEY = "sk-agent2rl-run-key"
GPT = "gpt-4o-mini"
CLAUDE = "claude-haiku-4-5"
GEMINI = "gemini-2.5-flash"
GEMINI_BODY = {
    "systemInstruction": {"parts": [{"text": "You are a coding agent."}]},
    "contents": [{"role": "user", "parts": [{"text": "Please list the files."}]}],
    "tools": [{"functionDeclarations": [{"name": "bash", "description": "Run a command."}]}],
}
HI = [{"role": "user", "content": "Please list the files."}]
TOOL_ARGS = {"command": "ls -la /tmp", "timeout": 30, "nested": {"flags": ["-a", "-l"]}}


@pytest.fixture(scope="module")
def fake() -> FakeProvider:
    provider = start_fake_provider([], api_key=REAL_KEY, models=[GPT, CLAUDE])
    yield provider
    provider.stop()


def _start(
    tmp: Path, fake: FakeProvider, base_urls: dict[str, str] | None = None, **kw: Any
) -> MeteringProxy:
    """A proxy in front of ``fake`` for every provider (``base_urls`` replaces some)."""
    urls = {
        "openai": fake.openai_base_url,
        "anthropic": fake.anthropic_base_url,
        "gemini": fake.gemini_base_url,
        **(base_urls or {}),
    }
    return start_metering_proxy(
        tmp / "record" / "llm_usage.jsonl",
        upstreams={name: Upstream(url, REAL_KEY) for name, url in urls.items()},
        proxy_key=PROXY_KEY,
        **kw,
    )


@pytest.fixture(scope="module")
def proxy(fake: FakeProvider, tmp_path_factory: pytest.TempPathFactory) -> MeteringProxy:
    handle = _start(tmp_path_factory.mktemp("metering"), fake)
    yield handle
    handle.stop()
    assert handle.proc.poll() is not None


_clients: list[openai.OpenAI | anthropic.Anthropic] = []


@pytest.fixture(autouse=True)
def _close_clients() -> None:
    yield
    while _clients:
        _clients.pop().close()


def _oai(proxy: MeteringProxy, key: str = PROXY_KEY) -> openai.OpenAI:
    _clients.append(openai.OpenAI(base_url=proxy.base_url("openai"), api_key=key, max_retries=0))
    return _clients[-1]


def _ant(proxy: MeteringProxy, key: str = PROXY_KEY) -> anthropic.Anthropic:
    client = anthropic.Anthropic(base_url=proxy.base_url("anthropic"), api_key=key, max_retries=0)
    _clients.append(client)
    return client


def _records_after(proxy: MeteringProxy, before: int, n: int) -> list[dict[str, Any]]:
    # A streamed request is recorded as its stream ends, which an SDK that stops reading at
    # the last event may not wait for: poll briefly.
    deadline = time.time() + 5
    while len(recs := read_usage(proxy.usage_file)) < before + n and time.time() < deadline:
        time.sleep(0.02)
    assert len(recs) == before + n, recs[before:]
    return recs[before:]


def _assert_metered(rec: dict[str, Any], served: Served) -> None:
    """The proxy's record of one request matches what the provider served."""
    assert rec["status"] == 200 and rec["error"] is None and not rec["refused"]
    assert rec["model"] == served.model and rec["stream"] == served.stream
    assert rec["input_tokens"] == served.input_tokens
    assert rec["output_tokens"] == served.output_tokens
    assert rec["cached_tokens"] == served.cached_tokens
    assert rec["usage"] == served.usage
    assert served.api_key == REAL_KEY  # the agent's key never reached the provider
    counts = TokenCounts(served.input_tokens, served.output_tokens, served.cached_tokens)
    assert rec["cost_usd"] == pytest.approx(estimate_cost(served.model, counts))
    assert rec["latency_s"] >= 0


def _sse_events(body: bytes) -> list[bytes]:
    return [e + b"\n\n" for e in body.split(b"\n\n") if e]


# --------------------------------------------------------------------------------------------
# OpenAI Chat Completions


def test_openai_chat_non_streaming(fake: FakeProvider, proxy: MeteringProxy) -> None:
    fake.load(
        [
            Turn(text="Let me look.", tool_calls=[ToolCall("bash", TOOL_ARGS)]),
            Turn(text="There are three files.", cached_input_tokens=4),
        ]
    )
    before = len(read_usage(proxy.usage_file))
    client = _oai(proxy)
    first = client.chat.completions.create(model=GPT, messages=HI)
    msg = first.choices[0].message
    assert msg.content == "Let me look." and first.choices[0].finish_reason == "tool_calls"
    assert msg.tool_calls[0].function.name == "bash"
    assert json.loads(msg.tool_calls[0].function.arguments) == TOOL_ARGS

    raw = client.chat.completions.with_raw_response.create(model=GPT, messages=HI)
    served = fake.served
    assert raw.http_response.content == served[1].response  # byte for byte
    assert raw.parse().usage.prompt_tokens_details.cached_tokens == 4

    recs = _records_after(proxy, before, 2)
    for rec, srv in zip(recs, served, strict=True):
        _assert_metered(rec, srv)
    assert recs[1]["cached_tokens"] == 4 and recs[0]["api"] == "openai"


def test_openai_chat_streaming(fake: FakeProvider, proxy: MeteringProxy) -> None:
    fake.load(
        [
            Turn(text="Streaming a longer answer, word by word."),
            Turn(tool_calls=[ToolCall("bash", TOOL_ARGS), ToolCall("read", {"path": "a.py"})]),
            Turn(text="With usage, as asked."),
        ]
    )
    before = len(read_usage(proxy.usage_file))
    client = _oai(proxy)

    # The client did not ask for usage: the proxy asks upstream and hides the usage chunk.
    chunks = list(client.chat.completions.create(model=GPT, messages=HI, stream=True))
    assert all(c.choices for c in chunks)
    text = "".join(c.choices[0].delta.content or "" for c in chunks)
    assert text == "Streaming a longer answer, word by word."
    assert fake.served[0].request["stream_options"] == {"include_usage": True}

    calls: dict[int, dict[str, str]] = {}
    for c in client.chat.completions.create(model=GPT, messages=HI, stream=True):
        for d in c.choices[0].delta.tool_calls or []:
            call = calls.setdefault(d.index, {"name": "", "arguments": ""})
            call["name"] += d.function.name or ""
            call["arguments"] += d.function.arguments or ""
    assert [c["name"] for c in calls.values()] == ["bash", "read"]
    assert json.loads(calls[0]["arguments"]) == TOOL_ARGS

    # The client asked for usage itself: the stream passes through untouched.
    body = {"model": GPT, "messages": HI, "stream": True, "stream_options": {"include_usage": True}}
    with httpx.stream(
        "POST",
        f"{proxy.base_url('openai')}/chat/completions",
        json=body,
        headers={"Authorization": f"Bearer {PROXY_KEY}"},
    ) as resp:
        got = resp.read()
    served = fake.served
    assert got == served[2].response
    assert b'"choices":[],"usage":{' in got

    # ...and without it, the only event missing is the usage-only one.
    hidden = [e for e in _sse_events(served[0].response) if b'"choices":[]' in e]
    assert len(hidden) == 1

    recs = _records_after(proxy, before, 3)
    for rec, srv in zip(recs, served, strict=True):
        _assert_metered(rec, srv)


def test_openai_chat_stream_bytes_without_client_usage(
    fake: FakeProvider, proxy: MeteringProxy
) -> None:
    fake.load(["Exactly these bytes."])
    before = len(read_usage(proxy.usage_file))
    with httpx.stream(
        "POST",
        f"{proxy.base_url('openai')}/chat/completions",
        json={"model": GPT, "messages": HI, "stream": True},
        headers={"Authorization": f"Bearer {PROXY_KEY}"},
    ) as resp:
        assert resp.headers["content-type"].startswith("text/event-stream")
        got = resp.read()
    sent = fake.served[0].response
    assert got == b"".join(e for e in _sse_events(sent) if b'"choices":[]' not in e)
    _assert_metered(_records_after(proxy, before, 1)[0], fake.served[0])


# --------------------------------------------------------------------------------------------
# OpenAI Responses


def test_openai_responses(fake: FakeProvider, proxy: MeteringProxy) -> None:
    fake.load(
        [
            Turn(text="Reading the repo.", tool_calls=[ToolCall("shell", TOOL_ARGS, id="c1")]),
            Turn(text="All done here.", cached_input_tokens=2),
        ]
    )
    before = len(read_usage(proxy.usage_file))
    client = _oai(proxy)
    resp = client.responses.create(model="gpt-5", input="List the files.", instructions="Be brief")
    assert resp.output_text == "Reading the repo."
    call = next(o for o in resp.output if o.type == "function_call")
    assert call.name == "shell" and call.call_id == "c1"
    assert json.loads(call.arguments) == TOOL_ARGS

    events = list(client.responses.create(model="gpt-5", input="And now?", stream=True))
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == "All done here."
    assert events[-1].type == "response.completed"
    assert events[-1].response.usage.input_tokens_details.cached_tokens == 2

    recs = _records_after(proxy, before, 2)
    for rec, srv in zip(recs, fake.served, strict=True):
        _assert_metered(rec, srv)
        assert rec["endpoint"] == "responses"


# --------------------------------------------------------------------------------------------
# Anthropic Messages


def test_anthropic_messages(fake: FakeProvider, proxy: MeteringProxy) -> None:
    fake.load(
        [
            Turn(text="I will run it.", tool_calls=[ToolCall("bash", TOOL_ARGS)]),
            Turn(text="Cached prompt, streamed reply.", cached_input_tokens=5),
            Turn(tool_calls=[ToolCall("edit", {"path": "x.py", "text": "print(1)\n"})]),
        ]
    )
    before = len(read_usage(proxy.usage_file))
    client = _ant(proxy)
    msg = client.messages.create(model=CLAUDE, max_tokens=256, messages=HI)
    assert msg.content[0].text == "I will run it."
    assert msg.content[1].type == "tool_use" and msg.content[1].name == "bash"
    assert msg.content[1].input == TOOL_ARGS and msg.stop_reason == "tool_use"

    with client.messages.stream(model=CLAUDE, max_tokens=256, messages=HI) as stream:
        final = stream.get_final_message()
    assert final.content[0].text == "Cached prompt, streamed reply."
    assert final.usage.cache_read_input_tokens == 5
    assert final.usage.output_tokens == fake.served[1].output_tokens

    # Bearer auth works too (Claude Code's ANTHROPIC_AUTH_TOKEN), and the bytes are unchanged.
    with httpx.stream(
        "POST",
        f"{proxy.base_url('anthropic')}/v1/messages",
        json={"model": CLAUDE, "max_tokens": 64, "messages": HI, "stream": True},
        headers={"Authorization": f"Bearer {PROXY_KEY}", "anthropic-version": "2023-06-01"},
    ) as resp:
        got = resp.read()
    served = fake.served
    assert got == served[2].response and b"input_json_delta" in got

    recs = _records_after(proxy, before, 3)
    for rec, srv in zip(recs, served, strict=True):
        _assert_metered(rec, srv)
    # Anthropic's input_tokens excludes cache reads; the record's input is the whole prompt.
    assert recs[1]["usage"]["input_tokens"] == recs[1]["input_tokens"] - 5
    assert recs[1]["cached_tokens"] == 5


def test_free_endpoints_and_unknown_routes(fake: FakeProvider, proxy: MeteringProxy) -> None:
    fake.load([])
    before = len(read_usage(proxy.usage_file))
    assert [m.id for m in _oai(proxy).models.list()] == [GPT, CLAUDE]
    count = _ant(proxy).messages.count_tokens(model=CLAUDE, messages=HI)
    assert count.input_tokens > 0
    # The real key must not reach endpoints the proxy does not meter (files, fine-tuning...).
    resp = httpx.post(
        f"{proxy.base_url('openai')}/fine_tuning/jobs",
        json={"model": GPT},
        headers={"Authorization": f"Bearer {PROXY_KEY}"},
    )
    assert resp.status_code == 404 and "error" in resp.json()
    assert fake.served == [] and fake.received == [
        "GET /v1/models",
        "POST /v1/messages/count_tokens",
    ]
    recs = _records_after(proxy, before, 2)
    assert [r["input_tokens"] for r in recs] == [None, None]  # count_tokens is not usage


# --------------------------------------------------------------------------------------------
# Gemini (raw httpx: the google-genai SDK is not a dependency)


def _gemini_url(proxy: MeteringProxy, action: str, model: str = GEMINI) -> str:
    return f"{proxy.base_url('gemini')}/v1beta/models/{model}:{action}"


def _goog(key: str = PROXY_KEY) -> dict[str, str]:
    return {"x-goog-api-key": key}


def test_gemini_generate_content(fake: FakeProvider, proxy: MeteringProxy) -> None:
    fake.load(
        [
            Turn(text="Let me look.", tool_calls=[ToolCall("bash", TOOL_ARGS)]),
            Turn(text="There are three files.", cached_input_tokens=4),
        ]
    )
    before = len(read_usage(proxy.usage_file))
    first = httpx.post(_gemini_url(proxy, "generateContent"), json=GEMINI_BODY, headers=_goog())
    assert first.status_code == 200, first.text
    parts = first.json()["candidates"][0]["content"]["parts"]
    assert parts == [
        {"text": "Let me look."},
        {"functionCall": {"name": "bash", "args": TOOL_ARGS}},
    ]
    second = httpx.post(_gemini_url(proxy, "generateContent"), json=GEMINI_BODY, headers=_goog())
    served = fake.served
    assert [s.api for s in served] == ["gemini", "gemini"]
    assert first.content == served[0].response and second.content == served[1].response
    assert second.json()["usageMetadata"]["cachedContentTokenCount"] == 4
    recs = _records_after(proxy, before, 2)
    for rec, srv in zip(recs, served, strict=True):
        assert rec["api"] == "gemini" and rec["endpoint"] == f"models/{GEMINI}:generateContent"
        _assert_metered(rec, srv)
        assert rec["cost_usd"] > 0  # gemini-2.5-flash is priced
    assert served[0].query == "" and served[1].cached_tokens == 4


def test_gemini_stream_generate_content(fake: FakeProvider, proxy: MeteringProxy) -> None:
    fake.load(
        [
            Turn(text="Checking the directory now.", tool_calls=[ToolCall("bash", TOOL_ARGS)]),
            Turn(text="All done here.", chunk_delay_s=0.01),
        ]
    )
    before = len(read_usage(proxy.usage_file))
    bodies = []
    for _ in range(2):
        with httpx.stream(
            "POST",
            _gemini_url(proxy, "streamGenerateContent") + "?alt=sse",
            json=GEMINI_BODY,
            headers=_goog(),
        ) as resp:
            assert resp.status_code == 200
            assert resp.headers["content-type"].startswith("text/event-stream")
            bodies.append(resp.read())
    served = fake.served
    assert [b == s.response for b, s in zip(bodies, served, strict=True)] == [True, True]
    events = [json.loads(e.removeprefix(b"data: ")) for e in _sse_events(bodies[0])]
    text = "".join(
        p.get("text", "") for e in events for p in e["candidates"][0]["content"]["parts"]
    )
    assert text == "Checking the directory now."
    last = events[-1]["candidates"][0]
    assert last["finishReason"] == "STOP"
    assert last["content"]["parts"] == [{"functionCall": {"name": "bash", "args": TOOL_ARGS}}]
    # Early events carry partial usage (no candidates yet); the last one counts.
    assert "candidatesTokenCount" not in events[0]["usageMetadata"]
    recs = _records_after(proxy, before, 2)
    for rec, srv in zip(recs, served, strict=True):
        assert srv.stream and srv.query == "alt=sse"
        assert rec["endpoint"] == f"models/{GEMINI}:streamGenerateContent"
        _assert_metered(rec, srv)


def test_gemini_query_key_and_refusals(fake: FakeProvider, proxy: MeteringProxy) -> None:
    fake.load(["by query key", "by query key, streamed"])
    before = len(read_usage(proxy.usage_file))
    # A wrong key (header or query), the real key, or none: 401 in Google's shape.
    for url, headers in [
        (_gemini_url(proxy, "generateContent"), _goog("wrong")),
        (_gemini_url(proxy, "generateContent") + "?key=wrong", {}),
        (_gemini_url(proxy, "generateContent") + f"?key={REAL_KEY}", {}),
        (_gemini_url(proxy, "generateContent"), {}),
    ]:
        resp = httpx.post(url, json=GEMINI_BODY, headers=headers)
        assert resp.status_code == 401
        assert resp.json()["error"]["status"] == "UNAUTHENTICATED"
        assert resp.json()["error"]["code"] == 401
    assert fake.received == [] and fake.served == []

    # ?key= works; the fake refuses any key but the real one, in the header or the query, so
    # these succeeding shows the proxy key was stripped from the query.
    ok = httpx.post(_gemini_url(proxy, "generateContent") + f"?key={PROXY_KEY}", json=GEMINI_BODY)
    assert ok.status_code == 200, ok.text
    url = _gemini_url(proxy, "streamGenerateContent") + f"?key={PROXY_KEY}&alt=sse"
    streamed = httpx.post(url, json=GEMINI_BODY)
    assert streamed.status_code == 200 and streamed.content == fake.served[1].response
    assert [(s.api_key, s.query) for s in fake.served] == [(REAL_KEY, ""), (REAL_KEY, "alt=sse")]
    recs = _records_after(proxy, before, 6)
    assert [(r["status"], r["refused"]) for r in recs] == [(401, True)] * 4 + [(200, False)] * 2
    _assert_metered(recs[4], fake.served[0])
    _assert_metered(recs[5], fake.served[1])


def test_gemini_free_endpoints_and_unknown_actions(
    fake: FakeProvider, proxy: MeteringProxy
) -> None:
    fake.load([])
    before = len(read_usage(proxy.usage_file))
    listed = httpx.get(f"{proxy.base_url('gemini')}/v1beta/models", headers=_goog())
    assert [m["name"] for m in listed.json()["models"]] == [f"models/{GPT}", f"models/{CLAUDE}"]
    count = httpx.post(_gemini_url(proxy, "countTokens"), json=GEMINI_BODY, headers=_goog())
    assert count.status_code == 200 and count.json()["totalTokens"] > 0
    for url in [
        _gemini_url(proxy, "embedContent"),
        f"{proxy.base_url('gemini')}/v1beta/cachedContents",
        f"{proxy.base_url('gemini')}/v1/models/{GEMINI}:generateContent",
    ]:
        resp = httpx.post(url, json=GEMINI_BODY, headers=_goog())
        assert resp.status_code == 404 and resp.json()["error"]["status"] == "NOT_FOUND"
    assert fake.served == [] and fake.received == [
        "GET /v1beta/models",
        f"POST /v1beta/models/{GEMINI}:countTokens",
    ]
    recs = _records_after(proxy, before, 2)
    assert [r["input_tokens"] for r in recs] == [None, None]  # countTokens is not usage
    assert recs[1]["model"] == GEMINI


def test_gemini_budget_and_upstream_down(fake: FakeProvider, tmp_path: Path) -> None:
    fake.load(["one two three"] * 3)
    # A budget the first request's reservation fits (its prompt estimate plus the 10 output
    # tokens it asks for) and the tokens it really used then no longer leave room for.
    body = json.dumps({**GEMINI_BODY, "generationConfig": {"maxOutputTokens": 10}}).encode()
    budget = estimate_request(body, 10).total + 5
    handle = _start(tmp_path / "a", fake, max_total_tokens=budget)
    down = _start(tmp_path / "b", fake, base_urls={"gemini": f"http://127.0.0.1:{_dead_port()}"})
    try:
        url = _gemini_url(handle, "generateContent")
        assert httpx.post(url, content=body, headers=_goog()).status_code == 200
        refused = httpx.post(url, content=body, headers=_goog())
        assert refused.status_code == 429 and refused.headers["x-should-retry"] == "false"
        assert refused.json()["error"]["status"] == "RESOURCE_EXHAUSTED"
        assert f"token budget of {budget} exhausted" in refused.json()["error"]["message"]
        # countTokens is not metered, so the budget does not stop it.
        count = httpx.post(_gemini_url(handle, "countTokens"), json=GEMINI_BODY, headers=_goog())
        assert count.status_code == 200
        assert len(fake.served) == 1

        gone = httpx.post(_gemini_url(down, "generateContent"), json=GEMINI_BODY, headers=_goog())
        assert gone.status_code == 502 and gone.json()["error"]["status"] == "UNAVAILABLE"
        recs = _records_after(handle, 0, 3)
        assert [(r["status"], r["refused"]) for r in recs] == [
            (200, False),
            (429, True),
            (200, False),
        ]
        assert [r["status"] for r in _records_after(down, 0, 1)] == [502]
    finally:
        handle.stop()
        down.stop()


def test_gemini_usage_normalisation() -> None:
    usage = {
        "promptTokenCount": 100,
        "cachedContentTokenCount": 40,
        "toolUsePromptTokenCount": 5,
        "candidatesTokenCount": 20,
        "thoughtsTokenCount": 30,
        "totalTokenCount": 155,
    }
    counts = PROVIDERS["gemini"].normalize(usage)
    assert counts == TokenCounts(input=105, output=50, cached=40)
    assert counts.total == usage["totalTokenCount"]
    # 65 uncached input at 1.25, 40 cached at 0.125, 50 output (thoughts included) at 10.
    assert estimate_cost("gemini-2.5-pro", counts) == pytest.approx((65 * 1.25 + 5 + 500) / 1e6)
    assert estimate_cost("models/gemini-2.5-flash", TokenCounts(1_000_000, 0)) == 0.30
    assert estimate_cost("gemini-2.5-pro-exp", counts) is None  # unknown, not guessed


# --------------------------------------------------------------------------------------------
# Refusals and failures


def test_wrong_or_missing_key_is_refused(fake: FakeProvider, proxy: MeteringProxy) -> None:
    fake.load(["never served"])
    before = len(read_usage(proxy.usage_file))
    with pytest.raises(openai.AuthenticationError) as oerr:
        _oai(proxy, key="sk-wrong").chat.completions.create(model=GPT, messages=HI)
    assert oerr.value.status_code == 401 and oerr.value.code == "invalid_api_key"
    with pytest.raises(anthropic.AuthenticationError) as aerr:
        _ant(proxy, key=REAL_KEY).messages.create(model=CLAUDE, max_tokens=8, messages=HI)
    assert aerr.value.body["error"]["type"] == "authentication_error"
    bare = httpx.post(f"{proxy.base_url('anthropic')}/v1/messages", json={"model": CLAUDE})
    assert bare.status_code == 401 and bare.json()["type"] == "error"

    assert fake.received == [] and fake.served == []
    recs = _records_after(proxy, before, 3)
    assert [(r["status"], r["refused"]) for r in recs] == [(401, True)] * 3


def test_upstream_error_passes_through(fake: FakeProvider, proxy: MeteringProxy) -> None:
    # A client error is not retried (429/5xx are: test_proxy_faults): it passes through as is.
    fake.load([Turn(error_status=400, error_message="the request is malformed"), "recovered"])
    before = len(read_usage(proxy.usage_file))
    client = _oai(proxy)
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model=GPT, messages=HI)
    assert err.value.response.content == fake.served[0].response
    assert client.chat.completions.create(model=GPT, messages=HI).choices[0].message.content == (
        "recovered"
    )
    failed, ok = _records_after(proxy, before, 2)
    assert failed["status"] == 400 and failed["error"] == "the request is malformed"
    assert failed["input_tokens"] is None and failed["retries"] == 0
    _assert_metered(ok, fake.served[1])


def test_client_hangs_up_mid_stream(fake: FakeProvider, proxy: MeteringProxy) -> None:
    fake.load([Turn(text=" ".join(["word"] * 40), chunk_delay_s=0.05)])
    before = len(read_usage(proxy.usage_file))
    with httpx.stream(
        "POST",
        f"{proxy.base_url('anthropic')}/v1/messages",
        json={"model": CLAUDE, "max_tokens": 64, "messages": HI, "stream": True},
        headers={"x-api-key": PROXY_KEY},
    ) as resp:
        first = next(resp.iter_bytes())
        assert b"message_start" in first
    (rec,) = _records_after(proxy, before, 1)
    assert rec["status"] == 200 and "client disconnected" in rec["error"]
    # The prompt was already billed in message_start.
    assert rec["input_tokens"] == fake.served[0].input_tokens
    assert httpx.get(f"{proxy.url}/healthz").json()["ok"] is True


def _dead_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_upstream_down_or_slow(fake: FakeProvider, tmp_path: Path) -> None:
    fake.load([Turn(text="too late", delay_s=3.0), "on time"])
    handle = _start(
        tmp_path,
        fake,
        base_urls={"openai": f"http://127.0.0.1:{_dead_port()}/v1"},
        upstream_timeout_s=1.0,
    )
    try:
        down = httpx.post(
            f"{handle.base_url('openai')}/chat/completions",
            json={"model": GPT, "messages": HI},
            headers={"Authorization": f"Bearer {PROXY_KEY}"},
        )
        assert down.status_code == 502
        assert down.json()["error"]["code"] == "upstream_unavailable"
        with pytest.raises(openai.APIStatusError) as err:
            _oai(handle).chat.completions.create(model=GPT, messages=HI, stream=True)
        assert err.value.status_code == 502

        with pytest.raises(anthropic.APIStatusError) as slow:
            _ant(handle).messages.create(model=CLAUDE, max_tokens=8, messages=HI)
        assert slow.value.status_code == 504
        assert slow.value.body["error"]["type"] == "api_error"

        # Still serving.
        ok = _ant(handle).messages.create(model=CLAUDE, max_tokens=8, messages=HI)
        assert ok.content[0].text == "on time" and handle.proc.poll() is None
        recs = _records_after(handle, 0, 4)
        assert [r["status"] for r in recs] == [502, 502, 504, 200]
        assert "could not be reached" in recs[0]["error"] and "timed out" in recs[2]["error"]
        _assert_metered(recs[3], next(s for s in fake.served if s.turn == 1))
    finally:
        handle.stop()


def test_token_budget(fake: FakeProvider, tmp_path: Path) -> None:
    fake.load(["one two three four five"] * 10)
    # Each request reserves its prompt estimate plus the 5 output tokens it asks for, and
    # really uses 10 tokens; the budget fits three such requests and not a fourth.
    body = json.dumps(
        {"model": GPT, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}
    )
    reserve = estimate_request(body.encode(), 5).total
    budget = 20 + reserve
    handle = _start(tmp_path, fake, max_total_tokens=budget)
    exhausted = f"token budget of {budget} exhausted"
    try:
        url = f"{handle.base_url('openai')}/chat/completions"
        for _ in range(3):
            resp = httpx.post(url, content=body, headers={"Authorization": f"Bearer {PROXY_KEY}"})
            assert resp.status_code == 200, resp.text
        per_request = fake.served[0].input_tokens + fake.served[0].output_tokens
        assert per_request == 10  # so 30 used, and 30 + reserve is over the budget
        assert reserve > per_request  # the estimate is an upper bound of the real use

        client = _oai(handle)
        with pytest.raises(openai.APIStatusError) as err:
            client.chat.completions.create(model=GPT, messages=HI, max_tokens=5)
        assert err.value.status_code == 429
        assert exhausted in err.value.message and "30 tokens used" in err.value.message
        assert err.value.response.headers["x-should-retry"] == "false"
        with pytest.raises(anthropic.RateLimitError) as aerr:
            _ant(handle).messages.create(model=CLAUDE, max_tokens=8, messages=HI)
        assert exhausted in aerr.value.body["error"]["message"]
        assert len(fake.served) == 3  # nothing forwarded after the budget
        assert len(_oai(handle).models.list().data) == 2  # free endpoints still answer
        health = httpx.get(f"{handle.url}/healthz").json()
        assert health["used_tokens"] == 30 and health["reserved_tokens"] == 0

        recs = _records_after(handle, 0, 6)
        assert [(r["status"], r["refused"]) for r in recs[3:5]] == [(429, True)] * 2
        summary = summarize_usage(handle.usage_file)
        assert summary["requests"] == 6 and summary["refused"] == 2 and summary["errors"] == 2
        assert summary["input_tokens"] == sum(s.input_tokens for s in fake.served)
        assert summary["output_tokens"] == sum(s.output_tokens for s in fake.served)
        assert summary["total_tokens"] == 30
        assert summary["by_model"][GPT]["requests"] == 4
        assert summary["cost_usd"] == pytest.approx(
            3 * estimate_cost(GPT, TokenCounts(5, 5)), abs=1e-6
        )
    finally:
        handle.stop()

    # A restarted proxy on the same usage file keeps counting.
    again = _start(tmp_path, fake, max_total_tokens=budget)
    try:
        with pytest.raises(openai.RateLimitError):
            _oai(again).chat.completions.create(model=GPT, messages=HI, max_tokens=5)
    finally:
        again.stop()


# --------------------------------------------------------------------------------------------
# Pure functions


def test_summarize_usage_and_costs(tmp_path: Path) -> None:
    path = tmp_path / "llm_usage.jsonl"
    assert summarize_usage(path)["requests"] == 0

    known = UsageRecord(api="anthropic", endpoint="messages", model="claude-haiku-4-5")
    PROVIDERS["anthropic"].meter(
        known,
        {
            "input_tokens": 300,
            "cache_read_input_tokens": 600,
            "cache_creation_input_tokens": 100,
            "output_tokens": 100,
        },
    )
    assert (known.input_tokens, known.cached_tokens, known.cache_write_tokens) == (1000, 600, 100)
    # 300 fresh at $1, 600 cache reads at $0.10, 100 cache writes at $1.25, 100 out at $5 (per M)
    assert known.cost_usd == pytest.approx((300 + 60 + 125 + 500) / 1e6)
    unknown = UsageRecord(api="openai", endpoint="chat/completions", model="my-local-llm")
    PROVIDERS["openai"].meter(unknown, {"prompt_tokens": 50, "completion_tokens": 7})
    assert unknown.cost_usd is None
    snapshot = UsageRecord(api="openai", endpoint="responses", model="gpt-4o-2024-08-06")
    PROVIDERS["openai"].meter(
        snapshot,
        {"input_tokens": 1000, "input_tokens_details": {"cached_tokens": 200}, "output_tokens": 10},
    )
    assert snapshot.cost_usd == pytest.approx((800 * 2.5 + 200 * 1.25 + 10 * 10) / 1e6)
    refused = UsageRecord(api="openai", endpoint="chat/completions", status=429, refused=True)
    for rec in (known, unknown, snapshot, refused):
        append_record(path, rec)
    with open(path, "a") as fh:
        fh.write('{"api": "openai", "inp')  # a writer killed mid-line

    s = summarize_usage(path)
    assert s["requests"] == 4 and s["refused"] == 1 and s["errors"] == 1
    assert s["input_tokens"] == 2050 and s["output_tokens"] == 117 and s["total_tokens"] == 2167
    assert s["cached_tokens"] == 800 and s["cache_write_tokens"] == 100
    assert s["unpriced_requests"] == 1
    assert s["cost_usd"] == pytest.approx(known.cost_usd + snapshot.cost_usd, abs=1e-6)
    assert s["by_model"]["my-local-llm"]["input_tokens"] == 50
    assert s["by_model"]["(none)"]["requests"] == 1


def test_usage_line_format_is_stable(tmp_path: Path) -> None:
    # Reports and older runs read these keys, in this order: the file format must not drift.
    path = tmp_path / "llm_usage.jsonl"
    rec = UsageRecord(api="gemini", endpoint="models/m:generateContent", model=GEMINI)
    PROVIDERS["gemini"].meter(rec, {"promptTokenCount": 7, "candidatesTokenCount": 2})
    append_record(path, rec)
    [line] = path.read_text().splitlines()
    assert list(json.loads(line)) == [
        "api",
        "endpoint",
        "time",
        "model",
        "stream",
        "status",
        "input_tokens",
        "output_tokens",
        "cached_tokens",
        "cache_write_tokens",
        "latency_s",
        "cost_usd",
        "refused",
        "error",
        "usage",
        # appended by later versions: older lines simply lack them
        "estimated",
        "retries",
    ]
    assert read_usage(path)[0]["input_tokens"] == 7 and rec.tokens == TokenCounts(7, 2)


def test_token_counts_from_malformed_usage() -> None:
    # Whatever a provider or a log puts in a count, it never raises and never goes negative.
    for provider in PROVIDERS.values():
        assert provider.normalize({"unrelated": 1, "usage": [2]}) == TokenCounts()
    odd = {"prompt_tokens": -5, "completion_tokens": "7", "prompt_tokens_details": None}
    assert PROVIDERS["openai"].normalize(odd) == TokenCounts()
    assert PROVIDERS["anthropic"].normalize({"input_tokens": 3.9, "output_tokens": True}) == (
        TokenCounts(input=3)
    )
    assert TokenCounts(1, 2, 3, 4) + TokenCounts(10, 20) == TokenCounts(11, 22, 3, 4)


def test_proxy_process_needs_its_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(PROXY_KEY_ENV, raising=False)
    usage, ready = tmp_path / "u.jsonl", tmp_path / "ready.json"
    assert proxy_main(["--usage-file", str(usage), "--ready-file", str(ready)]) == 2
    assert not ready.exists()


def test_fake_provider_script_files(tmp_path: Path) -> None:
    toml = tmp_path / "script.toml"
    toml.write_text(
        'final_text = "All finished."\n'
        "[[turns]]\n"
        'text = "Checking."\n'
        "[[turns.tool_calls]]\n"
        'name = "bash"\n'
        'arguments = { command = "ls", timeout = 5 }\n'
    )
    as_json = tmp_path / "script.json"
    as_json.write_text(json.dumps(["Checking.", {"text": "x", "bogus": 1}]))
    with pytest.raises(ValueError, match="bogus"):
        start_fake_provider(as_json)

    with start_fake_provider(toml) as provider:
        body = {"model": "m", "messages": HI}
        first = httpx.post(f"{provider.openai_base_url}/chat/completions", json=body).json()
        call = first["choices"][0]["message"]["tool_calls"][0]["function"]
        assert call["name"] == "bash"
        assert json.loads(call["arguments"]) == {"command": "ls", "timeout": 5}
        after = httpx.post(f"{provider.anthropic_base_url}/v1/messages", json=body).json()
        assert after["content"] == [{"type": "text", "text": "All finished."}]
        assert [s.turn for s in provider.served] == [0, None]
