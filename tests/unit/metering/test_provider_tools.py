"""The LLM channel as egress: provider-side tools (web search, URL fetches, MCP servers) are
refused unless the run allows them, and every allowed use is recorded with its query or URL
and read by the contamination check; request headers pass from an allowlist; a request that
does work upstream always costs the token budget something (background responses refused, a
2xx answer without usage charged its reservation). The real proxy process in front of the
scripted fake provider, a real HTTP server on loopback."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from support.fake_provider import FakeProvider, Turn, start_fake_provider

from agent2rl.agents.spec import AGENTS
from agent2rl.integrity.contamination import (
    DATASET_SOURCES,
    EgressSummary,
    read_provider_tool_log,
)
from agent2rl.metering import MeteringProxy, Upstream, read_usage, start_metering_proxy
from agent2rl.metering.budget import estimate_request

pytestmark = pytest.mark.timeout(120)

REAL_KEY = "sk-real-upstream-key"
PROXY_KEY = "sk-agent2rl-run-key"
GPT = "gpt-4o-mini"
CLAUDE = "claude-haiku-4-5"
GEMINI = "gemini-2.5-flash"
HI = [{"role": "user", "content": "hi"}]
OAI = {"authorization": f"Bearer {PROXY_KEY}"}
ANT = {"x-api-key": PROXY_KEY, "anthropic-version": "2023-06-01"}
GOO = {"x-goog-api-key": PROXY_KEY}
TEST_SET = "https://huggingface.co/datasets/openai/gsm8k/resolve/main/main/test.jsonl"

CHAT = ("openai/v1/chat/completions", OAI)
RESPONSES = ("openai/v1/responses", OAI)
MESSAGES = ("anthropic/v1/messages", ANT)
GENERATE = (f"gemini/v1beta/models/{GEMINI}:generateContent", GOO)


def _anthropic(**extra: Any) -> dict[str, Any]:
    return {"model": CLAUDE, "max_tokens": 64, "messages": HI, **extra}


def _gemini(**extra: Any) -> dict[str, Any]:
    return {"contents": [{"role": "user", "parts": [{"text": "hi"}]}], **extra}


#: every spelling of a provider-side tool the issue names, as each API carries it
SERVER_TOOLS = {
    "anthropic web_search": (
        MESSAGES,
        _anthropic(tools=[{"type": "web_search_20250305", "name": "web_search"}]),
    ),
    "anthropic web_fetch": (
        MESSAGES,
        _anthropic(tools=[{"type": "web_fetch_20250910", "name": "web_fetch"}]),
    ),
    "anthropic url document": (
        MESSAGES,
        _anthropic(
            messages=[
                {
                    "role": "user",
                    "content": [
                        {"type": "document", "source": {"type": "url", "url": TEST_SET}},
                        {"type": "text", "text": "Summarise it."},
                    ],
                }
            ]
        ),
    ),
    "anthropic mcp connector": (
        MESSAGES,
        _anthropic(mcp_servers=[{"type": "url", "url": "https://mcp.example/sse", "name": "x"}]),
    ),
    "openai web_search": (
        RESPONSES,
        {"model": GPT, "input": "hi", "tools": [{"type": "web_search"}]},
    ),
    "openai web_search_preview": (
        RESPONSES,
        {"model": GPT, "input": "hi", "tools": [{"type": "web_search_preview"}]},
    ),
    "openai mcp": (
        RESPONSES,
        {
            "model": GPT,
            "input": "hi",
            "tools": [{"type": "mcp", "server_label": "x", "server_url": "https://mcp.example"}],
        },
    ),
    "openai file_url": (
        RESPONSES,
        {
            "model": GPT,
            "input": [
                {
                    "role": "user",
                    "content": [
                        {"type": "input_file", "file_url": TEST_SET},
                        {"type": "input_text", "text": "Summarise it."},
                    ],
                }
            ],
        },
    ),
    "openai chat web_search_options": (
        CHAT,
        {"model": GPT, "messages": HI, "web_search_options": {}},
    ),
    "gemini google_search": (GENERATE, _gemini(tools=[{"google_search": {}}])),
    "gemini googleSearch": (GENERATE, _gemini(tools=[{"googleSearch": {}}])),
    "gemini google_search_retrieval": (GENERATE, _gemini(tools=[{"google_search_retrieval": {}}])),
    "gemini url_context": (GENERATE, _gemini(tools=[{"url_context": {}}])),
    "gemini urlContext": (GENERATE, _gemini(tools=[{"urlContext": {}}])),
}


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeProvider]:
    provider = start_fake_provider([], api_key=REAL_KEY, models=[GPT, CLAUDE, GEMINI])
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
    handle = _start(tmp_path_factory.mktemp("tools"), fake)
    yield handle
    handle.stop()


def _post(proxy: MeteringProxy, route: tuple[str, dict[str, str]], body: Any, **kw: Any):
    path, headers = route
    return httpx.post(f"{proxy.url}/{path}", json=body, headers={**headers, **kw}, timeout=30)


def _healthz(proxy: MeteringProxy) -> dict[str, Any]:
    return httpx.get(f"{proxy.url}/healthz", timeout=10).json()


def _tool_log(proxy: MeteringProxy) -> list[dict[str, Any]]:
    path = proxy.usage_file.with_name("provider_tools.jsonl")
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _settled(proxy: MeteringProxy, n: int) -> list[dict[str, Any]]:
    """The usage lines, once there are ``n`` (a stream's line comes after its last byte)."""
    deadline = time.time() + 5
    while len(recs := read_usage(proxy.usage_file)) < n and time.time() < deadline:
        time.sleep(0.02)
    return recs


# --------------------------------------------------------------------------------------------
# Provider-side tools


@pytest.mark.parametrize("case", list(SERVER_TOOLS), ids=lambda c: c.replace(" ", "-"))
def test_provider_tools_are_refused_by_default(
    case: str, fake: FakeProvider, proxy: MeteringProxy
) -> None:
    route, body = SERVER_TOOLS[case]
    fake.load(["searched the web"])
    before = len(read_usage(proxy.usage_file))
    resp = _post(proxy, route, body)
    # One clear provider-shaped 4xx naming the flag that allows them; nothing went upstream.
    assert resp.status_code == 403, (case, resp.status_code, resp.text)
    error = resp.json()["error"]
    assert "--allow-provider-tools" in error["message"], error
    if route is MESSAGES:
        assert resp.json()["type"] == "error" and error["type"] == "permission_error"
    elif route is GENERATE:
        assert error["status"] == "PERMISSION_DENIED"
    else:
        assert error["type"] == "invalid_request_error"
    assert resp.headers.get("x-should-retry") == "false"
    assert not any(r.startswith("POST") for r in fake.received), fake.received
    (rec,) = read_usage(proxy.usage_file)[before:]
    assert rec["refused"] is True and rec["status"] == 403
    # The refused attempt is recorded too, with what it named.
    refused = [r for r in _tool_log(proxy) if r["allowed"] is False]
    assert refused and refused[-1]["source"] == "request"
    if case in ("anthropic url document", "openai file_url"):
        assert refused[-1]["url"] == TEST_SET


def test_plain_requests_still_pass(fake: FakeProvider, proxy: MeteringProxy) -> None:
    """Function tools, data-URL images and a plain Gemini request are not provider tools."""
    fake.load(["a", "b", "c"])
    tool = {"type": "function", "name": "bash", "parameters": {"type": "object"}}
    image = {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo="}
    content = [image, {"type": "input_text", "text": "hi"}]
    body = {"model": GPT, "input": [{"role": "user", "content": content}], "tools": [tool]}
    assert _post(proxy, RESPONSES, body).status_code == 200
    bash = {"name": "bash", "input_schema": {"type": "object"}}
    assert _post(proxy, MESSAGES, _anthropic(tools=[bash])).status_code == 200
    fn = {"functionDeclarations": [{"name": "bash"}]}
    assert _post(proxy, GENERATE, _gemini(tools=[fn])).status_code == 200


def test_allowed_provider_tools_are_recorded_and_read_by_the_contamination_check(
    fake: FakeProvider, tmp_path: Path
) -> None:
    proxy = _start(tmp_path, fake, allow_provider_tools=True)
    query = "gsm8k test set with answers"
    try:
        fake.load([Turn(text="found it", web_searches=[query])] * 4)
        n = 0
        for case in ("openai web_search", "anthropic web_search", "gemini google_search"):
            route, body = SERVER_TOOLS[case]
            resp = _post(proxy, route, body)
            assert resp.status_code == 200, (case, resp.text)
            n += 1
        # A stream: the tool use is read from the reassembled answer.
        route, body = SERVER_TOOLS["anthropic web_search"]
        with httpx.stream(
            "POST", f"{proxy.url}/{route[0]}", json={**body, "stream": True}, headers=route[1]
        ) as stream:
            assert stream.status_code == 200 and stream.read()
        n += 1
        # The document URL handed to the provider is recorded as it is declared.
        route, body = SERVER_TOOLS["anthropic url document"]
        assert _post(proxy, route, body).status_code == 200
        n += 1
        _settled(proxy, n)
    finally:
        proxy.stop()
    log = _tool_log(proxy)
    assert all(r["allowed"] is True and r["status"] == 200 for r in log), log
    declared = [(r["api"], r["tool"]) for r in log if r["source"] == "request"]
    assert declared == [
        ("openai", "web_search"),
        ("anthropic", "web_search"),
        ("gemini", "google_search"),
        ("anthropic", "web_search"),
        ("anthropic", "url_source"),
    ]
    searched = [(r["api"], r["query"]) for r in log if r["source"] == "response"]
    assert searched == [
        ("openai", query),
        ("anthropic", query),
        ("gemini", query),
        ("anthropic", query),
    ]
    assert [r["url"] for r in log if r["tool"] == "url_source"] == [TEST_SET]

    # The contamination check reads the record: a query or URL naming the test set is flagged.
    log_path = proxy.usage_file.with_name("provider_tools.jsonl")
    summary = read_provider_tool_log(log_path, DATASET_SOURCES["gsm8k"], EgressSummary(None))
    assert f"llm:web_search:{query}" in summary.flagged_urls
    assert f"llm:url_source:{TEST_SET}" in summary.flagged_urls
    assert f"llm:google_search:{query}" in summary.provider_tools
    other = read_provider_tool_log(log_path, DATASET_SOURCES["humaneval"], EgressSummary(None))
    assert other.flagged_urls == [] and len(other.provider_tools) == 3


def test_codex_paper_is_labelled_and_no_other_builtin_is() -> None:
    """codex-paper turns Codex's web search on, as the paper's reference does: its spec says
    so, and its runs allow provider tools (tests/e2e/test_provider_tools_run.py runs a spec
    labelled the same way)."""
    labelled = [name for name, spec in AGENTS.items() if spec.provider_tools]
    assert labelled == ["codex-paper"]
    assert 'web_search="live"' in AGENTS["codex-paper"].command


# --------------------------------------------------------------------------------------------
# Request headers


def test_request_headers_pass_from_an_allowlist(fake: FakeProvider, proxy: MeteringProxy) -> None:
    fake.load(["a", "b", "c"])
    sent = {
        "openai-organization": "org-someone-else",
        "openai-project": "proj_other",
        "x-goog-user-project": "billed-project",
        "cookie": "session=1",
        "x-custom-routing": "elsewhere",
        "user-agent": "claude-cli/2.1.0 (external, cli)",
        "x-stainless-lang": "js",
        "x-app": "cli",
    }
    beta = "claude-code-20250219,web-fetch-2025-09-10,interleaved-thinking-2025-05-14," + (
        "mcp-client-2025-04-04,oauth-2025-04-20,code-execution-2025-05-22"
    )
    assert _post(proxy, CHAT, {"model": GPT, "messages": HI}, **sent).status_code == 200
    assert (
        _post(proxy, MESSAGES, _anthropic(), **sent, **{"anthropic-beta": beta}).status_code == 200
    )
    assert _post(proxy, GENERATE, _gemini(), **sent).status_code == 200
    chat, messages, gemini = fake.headers
    for got in (chat, messages, gemini):
        for name in ("openai-organization", "openai-project", "x-goog-user-project", "cookie"):
            assert name not in got, (name, got)
        assert "x-custom-routing" not in got
        assert got["user-agent"] == sent["user-agent"] and got["x-stainless-lang"] == "js"
        assert got["content-type"] == "application/json"
    assert chat["authorization"] == f"Bearer {REAL_KEY}" and "x-api-key" not in chat
    assert messages["x-api-key"] == REAL_KEY and messages["anthropic-version"] == "2023-06-01"
    assert messages["x-app"] == "cli"
    # Claude Code's betas pass; those of server tools, MCP, code execution and OAuth do not.
    assert messages["anthropic-beta"] == "claude-code-20250219,interleaved-thinking-2025-05-14"
    assert gemini["x-goog-api-key"] == REAL_KEY


# --------------------------------------------------------------------------------------------
# The token budget


def test_background_responses_are_refused(fake: FakeProvider, tmp_path: Path) -> None:
    """Three background responses used to settle at 0 tokens: answered at once without usage,
    generated later, read by GET /responses/{id} or previous_response_id."""
    proxy = _start(tmp_path, fake, max_total_tokens=100_000)
    try:
        fake.load([])
        answers = [
            _post(proxy, RESPONSES, {"model": GPT, "input": f"task {i}", "background": True})
            for i in range(3)
        ]
        for resp in answers:
            assert resp.status_code == 400, resp.text
            assert "background" in resp.json()["error"]["message"]
        assert fake.received == []
        recs = read_usage(proxy.usage_file)
        assert [(r["status"], r["refused"]) for r in recs] == [(400, True)] * 3
        # A stored response cannot be read back through the proxy either.
        got = httpx.get(f"{proxy.url}/openai/v1/responses/resp_fake_1", headers=OAI, timeout=10)
        assert got.status_code == 404 and fake.received == []
    finally:
        proxy.stop()


def test_a_success_without_usage_is_charged_its_reservation(
    fake: FakeProvider, tmp_path: Path
) -> None:
    proxy = _start(tmp_path, fake, max_total_tokens=1_000_000)
    try:
        fake.load([Turn(text="done", no_usage=True)] * 4)
        bodies = [
            (CHAT, {"model": GPT, "messages": HI, "max_tokens": 300}),
            (MESSAGES, _anthropic()),
            (GENERATE, _gemini(generationConfig={"maxOutputTokens": 50})),
        ]
        expected = 0
        for (path, headers), body in bodies:
            raw = json.dumps(body).encode()
            resp = httpx.post(
                f"{proxy.url}/{path}",
                content=raw,
                headers={**headers, "content-type": "application/json"},
                timeout=30,
            )
            assert resp.status_code == 200 and "usage" not in resp.json()
            out = body.get("max_tokens") or body.get("generationConfig", {}).get("maxOutputTokens")
            expected += estimate_request(raw, out).total
        # A stream that ends cleanly but reports no usage costs its reservation too.
        raw = json.dumps({"model": GPT, "input": "hi", "stream": True}).encode()
        with httpx.stream(
            "POST",
            f"{proxy.url}/{RESPONSES[0]}",
            content=raw,
            headers={**OAI, "content-type": "application/json"},
            timeout=30,
        ) as stream:
            assert stream.status_code == 200 and b"response.completed" in stream.read()
        expected += estimate_request(raw, None).total
        assert [s.usage for s in fake.served[:3]] == [None] * 3
        recs = _settled(proxy, 4)
        assert all(r["estimated"] is True for r in recs), recs
        assert sum(r["input_tokens"] + r["output_tokens"] for r in recs) == expected
        assert _healthz(proxy)["used_tokens"] == expected > 0
    finally:
        proxy.stop()
