"""The metering proxy under attack and under faults: path traversal with the real key, a token
budget raced by concurrent requests, streams cut before their usage, oversized bodies, and an
upstream answering 429/5xx. The real proxy process in front of the scripted fake provider, a
real HTTP server on loopback that requires the real key.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from support.fake_provider import FakeProvider, Turn, start_fake_provider

from agent2rl.metering import MeteringProxy, Upstream, read_usage, start_metering_proxy
from agent2rl.metering.budget import estimate_prompt_tokens

pytestmark = pytest.mark.timeout(120)

REAL_KEY = "sk-real-upstream-key"
PROXY_KEY = "sk-agent2rl-run-key"
GPT = "gpt-4o-mini"
CLAUDE = "claude-haiku-4-5"
HI = [{"role": "user", "content": "hi"}]
BEARER = {"Authorization": f"Bearer {PROXY_KEY}"}


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeProvider]:
    provider = start_fake_provider([], api_key=REAL_KEY, models=[GPT, CLAUDE])
    yield provider
    provider.stop()


def _start(tmp: Path, fake: FakeProvider, **kw: Any) -> MeteringProxy:
    urls = {
        "openai": fake.openai_base_url,
        "anthropic": fake.anthropic_base_url,
        "gemini": fake.gemini_base_url,
    }
    return start_metering_proxy(
        tmp / "record" / "llm_usage.jsonl",
        upstreams={name: Upstream(url, REAL_KEY) for name, url in urls.items()},
        proxy_key=PROXY_KEY,
        **kw,
    )


@pytest.fixture(scope="module")
def proxy(fake: FakeProvider, tmp_path_factory: pytest.TempPathFactory) -> Iterator[MeteringProxy]:
    handle = _start(tmp_path_factory.mktemp("faults"), fake)
    yield handle
    handle.stop()


def _records(proxy: MeteringProxy, before: int, n: int) -> list[dict[str, Any]]:
    deadline = time.time() + 5
    while len(recs := read_usage(proxy.usage_file)) < before + n and time.time() < deadline:
        time.sleep(0.02)
    assert len(recs) == before + n, recs[before:]
    return recs[before:]


def _raw(proxy: MeteringProxy, method: str, target: str, headers: dict[str, str]) -> Any:
    """Send ``target`` byte for byte (httpx would remove the dot segments client-side)."""
    conn = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=10)
    try:
        body = json.dumps({"model": GPT, "messages": HI}) if method == "POST" else None
        conn.request(
            method, target, body=body, headers={**headers, "content-type": "application/json"}
        )
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read() or b"null")
    finally:
        conn.close()


# --------------------------------------------------------------------------------------------
# Path traversal


TRAVERSALS = [
    ("GET", "/openai/v1/models/../files", BEARER),
    ("GET", "/openai/v1/models/%2e%2e/files", BEARER),
    ("GET", "/openai/v1/models/%2E%2E%2Ffiles", BEARER),
    ("GET", "/openai/v1/models/..%2ffiles", BEARER),
    ("GET", "/openai/v1/models/x/../../files", BEARER),
    ("GET", "/openai/v1/models//files", BEARER),
    ("GET", "/openai/v1/models/.%2e/files", BEARER),
    ("GET", "/openai/v1/models/..\\files", BEARER),
    ("GET", "/openai/v1/models/gpt%3Fx=1", BEARER),
    ("GET", "/anthropic/v1/models/../messages/batches", {"x-api-key": PROXY_KEY}),
    ("POST", "/anthropic/v1/models/../messages/batches", {"x-api-key": PROXY_KEY}),
    ("GET", "/anthropic/v1/models/%2e%2e/files", {"x-api-key": PROXY_KEY}),
    ("POST", "/gemini/v1beta/models/..%2Fv1beta%2FcachedContents", {"x-goog-api-key": PROXY_KEY}),
    ("POST", "/gemini/v1beta/models/..:generateContent", {"x-goog-api-key": PROXY_KEY}),
    ("GET", "/openai/v1/../v1/files", BEARER),
]


def test_path_traversal_never_reaches_upstream(fake: FakeProvider, proxy: MeteringProxy) -> None:
    fake.load([])
    answers = [
        (target, *_raw(proxy, method, target, headers)) for method, target, headers in TRAVERSALS
    ]
    # Nothing reached the provider: no request, so the real key went nowhere.
    assert fake.received == [] and fake.served == []
    for target, status, body in answers:
        assert 400 <= status < 500, (target, status, body)
        message = json.dumps(body)
        # The refusal names what the proxy does relay, for the path's provider.
        provider = target.split("/")[1]
        assert "error" in body and f"/{provider}/" in message and "relays only" in message, body

    # An allowed endpoint still answers, and a model id is still a path segment.
    status, body = _raw(proxy, "GET", "/openai/v1/models", BEARER)
    assert status == 200 and [m["id"] for m in body["data"]] == [GPT, CLAUDE]
    _raw(proxy, "GET", f"/openai/v1/models/{GPT}", BEARER)
    assert fake.received == ["GET /v1/models", f"GET /v1/models/{GPT}"]


def test_unknown_endpoint_names_the_allowed_ones(fake: FakeProvider, proxy: MeteringProxy) -> None:
    fake.load([])
    resp = httpx.post(f"{proxy.url}/openai/v1/files", json={}, headers=BEARER)
    assert resp.status_code == 404
    msg = resp.json()["error"]["message"]
    assert "POST /openai/v1/chat/completions" in msg and "POST /openai/v1/responses" in msg
    gem = httpx.post(f"{proxy.url}/gemini/v1beta/models/m:embedContent", json={}, headers=BEARER)
    assert gem.status_code == 404 and ":streamGenerateContent" in gem.json()["error"]["message"]
    assert fake.received == []


# --------------------------------------------------------------------------------------------
# Token budget


def test_concurrent_requests_cannot_overrun_the_budget(fake: FakeProvider, tmp_path: Path) -> None:
    """64 requests at once against a budget a handful of them fill: the budget is reserved
    before forwarding, so only what fits goes upstream, and the total stays within it."""
    fake.load([])
    # Every request is answered after a while, so all 64 are in flight together.
    fake.respond_with(lambda body: Turn(text="one two three four five", delay_s=0.5))
    budget = 200
    handle = _start(tmp_path, fake, max_total_tokens=budget)
    body = {"model": GPT, "messages": HI, "max_tokens": 5}

    async def burst() -> list[httpx.Response]:
        limits = httpx.Limits(max_connections=64)
        async with httpx.AsyncClient(limits=limits, timeout=30) as client:
            url = f"{handle.base_url('openai')}/chat/completions"
            return await asyncio.gather(
                *(client.post(url, json=body, headers=BEARER) for _ in range(64))
            )

    try:
        responses = asyncio.run(burst())
        ok = [r for r in responses if r.status_code == 200]
        refused = [r for r in responses if r.status_code == 429]
        assert len(ok) + len(refused) == 64 and ok and refused
        assert all("token budget" in r.json()["error"]["message"] for r in refused)
        # The room was held by requests in flight, not spent: the client may come back.
        assert all(r.headers.get("retry-after") == "1" for r in refused)
        assert all("x-should-retry" not in r.headers for r in refused)
        assert len(fake.served) == len(ok)  # nothing refused went upstream
        real = sum(s.input_tokens + s.output_tokens for s in fake.served)
        assert real <= budget, (len(ok), real)
        recs = _records(handle, 0, 64)
        assert sum(r["refused"] for r in recs) == len(refused)
        assert httpx.get(f"{handle.url}/healthz").json()["used_tokens"] == real
    finally:
        fake.respond_with(None)
        handle.stop()


def test_cut_stream_is_charged(fake: FakeProvider, proxy: MeteringProxy) -> None:
    """A stream the upstream breaks off before its usage event is charged its reservation (the
    provider bills what it generated, which the proxy never saw), not 0."""
    fake.load(
        [
            Turn(text="a long answer " * 20, cut_stream_after=3),
            Turn(text="a long answer " * 20, cut_stream_after=2),
        ]
    )
    before = len(read_usage(proxy.usage_file))
    used_before = httpx.get(f"{proxy.url}/healthz").json()["used_tokens"]
    chat = json.dumps({"model": GPT, "messages": HI, "stream": True, "max_tokens": 50}).encode()
    with httpx.stream(
        "POST",
        f"{proxy.base_url('openai')}/chat/completions",
        content=chat,
        headers={**BEARER, "content-type": "application/json"},
    ) as resp:
        oai_body = resp.read()
    assert resp.status_code == 200
    msg = {"model": CLAUDE, "messages": HI, "stream": True, "max_tokens": 60}
    with httpx.stream(
        "POST",
        f"{proxy.base_url('anthropic')}/v1/messages",
        json=msg,
        headers={"x-api-key": PROXY_KEY},
    ) as resp:
        ant_body = resp.read()
    assert b"message_start" in ant_body

    oai, ant = _records(proxy, before, 2)
    served = fake.served
    # OpenAI: no usage at all went by -> the whole reservation (prompt estimate + max_tokens).
    assert oai["output_tokens"] == 50 and oai["error"] and oai["estimated"] is True
    assert oai["input_tokens"] == estimate_prompt_tokens(chat)
    # Anthropic: message_start reported the prompt, which counts; the output is reserved.
    assert ant["output_tokens"] == 60 and ant["estimated"] is True
    assert ant["input_tokens"] == served[1].input_tokens
    # The clients are told the stream was cut, in their API's error event.
    assert b'"error"' in oai_body and b"event: error" in ant_body
    charged = sum(r["input_tokens"] + r["output_tokens"] for r in (oai, ant))
    assert httpx.get(f"{proxy.url}/healthz").json()["used_tokens"] == used_before + charged


# --------------------------------------------------------------------------------------------
# Request bodies


def test_oversized_body_is_refused(fake: FakeProvider, proxy: MeteringProxy) -> None:
    from agent2rl.metering.proxy import MAX_BODY_BYTES

    fake.load([])
    before = len(read_usage(proxy.usage_file))
    big = b'{"model": "gpt-4o-mini", "messages": [], "pad": "' + b"x" * MAX_BODY_BYTES + b'"}'
    url = f"{proxy.base_url('openai')}/chat/completions"
    declared = httpx.post(url, content=big, headers={**BEARER, "content-type": "application/json"})
    assert declared.status_code == 413
    assert str(MAX_BODY_BYTES) in declared.json()["error"]["message"]

    def chunks() -> Iterator[bytes]:  # no content-length: the proxy must count as it reads
        for i in range(0, len(big), 1 << 20):
            yield big[i : i + (1 << 20)]

    chunked = httpx.post(url, content=chunks(), headers=BEARER)
    assert chunked.status_code == 413
    assert fake.received == []
    recs = _records(proxy, before, 2)
    assert [(r["status"], r["refused"]) for r in recs] == [(413, True)] * 2


# --------------------------------------------------------------------------------------------
# Upstream faults


def test_upstream_429_and_5xx_are_retried_a_bounded_number_of_times(
    fake: FakeProvider, proxy: MeteringProxy
) -> None:
    fake.load(
        [
            Turn(error_status=503, error_message="overloaded"),
            Turn(error_status=429, error_message="slow down", retry_after="0.3"),
            "third time lucky",
            Turn(error_status=529, error_message="overloaded"),
            "streamed after a retry",
            Turn(error_status=429, error_message="come back in a minute", retry_after="60"),
        ]
        + [Turn(error_status=500, error_message="the model is on fire")] * 3
    )
    before = len(read_usage(proxy.usage_file))
    started = time.monotonic()
    ok = httpx.post(
        f"{proxy.base_url('openai')}/chat/completions",
        json={"model": GPT, "messages": HI},
        headers=BEARER,
    )
    assert ok.status_code == 200, ok.text
    assert ok.json()["choices"][0]["message"]["content"] == "third time lucky"
    assert time.monotonic() - started >= 0.3  # Retry-After was respected

    # A stream whose upstream first answered 529 (nothing sent to the client yet) is retried.
    with httpx.stream(
        "POST",
        f"{proxy.base_url('anthropic')}/v1/messages",
        json={"model": CLAUDE, "messages": HI, "max_tokens": 20, "stream": True},
        headers={"x-api-key": PROXY_KEY},
    ) as resp:
        got = resp.read()
    assert resp.status_code == 200 and b"retry" in got and b"message_stop" in got

    # A wait longer than the proxy's cap is the client's to honour: passed through at once.
    later = httpx.post(
        f"{proxy.base_url('openai')}/chat/completions",
        json={"model": GPT, "messages": HI},
        headers=BEARER,
    )
    assert later.status_code == 429 and later.headers["retry-after"] == "60"

    # An upstream that keeps failing: a bounded number of attempts, then its error as JSON.
    served_before = len(fake.served)
    failed = httpx.post(
        f"{proxy.base_url('openai')}/chat/completions",
        json={"model": GPT, "messages": HI},
        headers=BEARER,
    )
    assert failed.status_code == 500
    assert failed.json()["error"]["message"] == "the model is on fire"
    assert len(fake.served) - served_before == 3  # the first try and 2 retries

    recs = _records(proxy, before, 4)
    assert [(r["status"], r["retries"]) for r in recs] == [(200, 2), (200, 1), (429, 0), (500, 2)]
    assert recs[0]["input_tokens"] == fake.served[2].input_tokens and recs[0]["error"] is None
    assert recs[3]["error"] == "the model is on fire"
