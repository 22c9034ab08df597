"""The metering proxy's transcript (record/transcript.jsonl): every provider's requests and
responses, streamed ones reassembled, with no key anywhere on disk.

Real parts: the proxy process, the scripted fake provider on loopback (requiring the real
key, so every success shows the key was swapped), raw httpx clients.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from support.fake_provider import FakeProvider, ToolCall, Turn, start_fake_provider

from agent2rl.metering import MeteringProxy, Upstream, start_metering_proxy
from agent2rl.metering.transcript import (
    TranscriptWriter,
    full_requests,
    read_transcript,
    reassemble,
    transcript_path,
)

pytestmark = pytest.mark.timeout(120)

REAL_KEY = "sk-real-upstream-key-0123456789"
PROXY_KEY = "sk-agent2rl-run-key-abcdefghij"
GRADING_TOKEN = "grading-token-0123456789abcdef"
TOOL_ARGS = {"command": "ls -la /tmp", "nested": {"flags": ["-a", "-l"]}}
TURN = Turn(text="Let me look at the files.", tool_calls=[ToolCall("bash", TOOL_ARGS)])


@pytest.fixture(scope="module")
def fake() -> FakeProvider:
    provider = start_fake_provider([], api_key=REAL_KEY, models=["gpt-4o-mini"])
    yield provider
    provider.stop()


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("transcript-run")


@pytest.fixture(scope="module")
def proxy(fake: FakeProvider, run_dir: Path) -> MeteringProxy:
    urls = {
        "openai": fake.openai_base_url,
        "anthropic": fake.anthropic_base_url,
        "gemini": fake.gemini_base_url,
    }
    handle = start_metering_proxy(
        run_dir / "record" / "llm_usage.jsonl",
        upstreams={name: Upstream(url, REAL_KEY) for name, url in urls.items()},
        proxy_key=PROXY_KEY,
        redact=(GRADING_TOKEN,),  # the run's grading token, as a run hands it over
    )
    yield handle
    handle.stop()


def _lines_after(proxy: MeteringProxy, before: int, n: int) -> list[dict[str, Any]]:
    path = transcript_path(proxy.usage_file)
    deadline = time.time() + 5
    while len(lines := read_transcript(path)) < before + n and time.time() < deadline:
        time.sleep(0.02)
    assert len(lines) == before + n, lines[before:]
    return lines[before:]


def _request(proxy: MeteringProxy, api: str, stream: bool, prompt: str) -> tuple[str, dict, dict]:
    """(url, headers, body) of one generation request of ``api`` through the proxy."""
    if api == "openai-chat":
        body = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": prompt}]}
        url = f"{proxy.base_url('openai')}/chat/completions"
        headers = {"authorization": f"Bearer {PROXY_KEY}"}
    elif api == "openai-responses":
        body = {"model": "gpt-4o-mini", "input": [{"role": "user", "content": prompt}]}
        url = f"{proxy.base_url('openai')}/responses"
        headers = {"authorization": f"Bearer {PROXY_KEY}"}
    elif api == "anthropic":
        body = {
            "model": "claude-haiku-4-5",
            "max_tokens": 100,
            "messages": [{"role": "user", "content": prompt}],
        }
        url = f"{proxy.base_url('anthropic')}/v1/messages"
        headers = {"x-api-key": PROXY_KEY, "anthropic-version": "2023-06-01"}
    else:
        body = {"contents": [{"role": "user", "parts": [{"text": prompt}]}]}
        action = "streamGenerateContent?alt=sse&" if stream else "generateContent?"
        # The key in the query string, as the Gemini SDKs may send it: never stored.
        url = f"{proxy.base_url('gemini')}/v1beta/models/gemini-2.5-flash:{action}key={PROXY_KEY}"
        return url, {}, body
    if stream:
        body["stream"] = True
    return url, headers, body


def _content(api: str, response: dict[str, Any]) -> tuple[str, list[tuple[str, Any]]]:
    """The text and tool calls (name, arguments as a dict) of a non-streamed-shape answer."""
    text, calls = "", []
    if api == "openai-chat":
        msg = response["choices"][0]["message"]
        text = msg.get("content") or ""
        calls = [
            (c["function"]["name"], json.loads(c["function"]["arguments"]))
            for c in msg.get("tool_calls") or []
        ]
    elif api == "openai-responses":
        for item in response["output"]:
            if item["type"] == "message":
                text += "".join(p["text"] for p in item["content"])
            else:
                calls.append((item["name"], json.loads(item["arguments"])))
    elif api == "anthropic":
        for block in response["content"]:
            if block["type"] == "text":
                text += block["text"]
            else:
                calls.append((block["name"], block["input"]))
    else:
        for part in response["candidates"][0]["content"]["parts"]:
            if "text" in part:
                text += part["text"]
            else:
                calls.append((part["functionCall"]["name"], part["functionCall"]["args"]))
    return text, calls


APIS = ["openai-chat", "openai-responses", "anthropic", "gemini"]


@pytest.mark.parametrize("api", APIS)
def test_transcript_records_streamed_and_whole_answers(
    api: str, fake: FakeProvider, proxy: MeteringProxy
) -> None:
    """Each provider, unstreamed then streamed: the transcript holds the request's messages
    and the answer in the unstreamed shape, the streamed one reassembled to the same content
    (text and tool calls) the provider generated."""
    fake.load([TURN, TURN])
    before = len(read_transcript(transcript_path(proxy.usage_file)))
    whole: dict[str, Any] = {}
    for stream in (False, True):
        url, headers, body = _request(proxy, api, stream, f"List the files ({api}, {stream}).")
        with httpx.stream("POST", url, headers=headers, json=body, timeout=30) as resp:
            assert resp.status_code == 200, resp.read()
            raw = resp.read()
        if not stream:
            whole = json.loads(raw)
    first, second = _lines_after(proxy, before, 2)
    for line, stream in ((first, False), (second, True)):
        assert line["v"] == 1 and line["status"] == 200 and line["error"] is None
        assert line["stream"] is stream
        assert line["input_tokens"] > 0 and line["output_tokens"] > 0
        assert line["latency_s"] >= 0 and line["model"]
        assert f"({api}, {stream})" in json.dumps(line["request"])
    # The unstreamed answer is stored as the client got it.
    assert first["response"] == whole
    assert second["response"]["reassembled"] is True
    expected = (TURN.text, [("bash", TOOL_ARGS)])
    assert _content(api, first["response"]) == expected
    assert _content(api, second["response"]) == expected


def test_no_key_anywhere_in_the_run_directory(
    fake: FakeProvider, proxy: MeteringProxy, run_dir: Path
) -> None:
    """Neither the proxy key nor the real upstream key is written anywhere under the run
    directory — not even when a client pastes the key into its prompt (redacted). Nor is the
    run's grading token, which the agent holds and may paste (a curl command it ran)."""
    fake.load([TURN])
    before = len(read_transcript(transcript_path(proxy.usage_file)))
    prompt = f"my key is {PROXY_KEY} ok; curl -H 'Authorization: Bearer {GRADING_TOKEN}'"
    url, headers, body = _request(proxy, "openai-chat", False, prompt)
    assert httpx.post(url, headers=headers, json=body, timeout=30).status_code == 200
    # A refused request (wrong key) is recorded too, without the key it carried.
    bad = {"authorization": "Bearer sk-wrong-key-zzzzzzzzzz"}
    assert httpx.post(url, headers=bad, json=body, timeout=30).status_code == 401
    lines = _lines_after(proxy, before, 2)
    assert json.dumps(lines[0]["request"]).count("[redacted]") == 2
    assert lines[1]["status"] == 401 and lines[1]["refused"]
    found = []
    for path in run_dir.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            for key in (PROXY_KEY, REAL_KEY, GRADING_TOKEN):
                if key.encode() in data:
                    found.append((str(path), key))
    assert found == []
    assert transcript_path(proxy.usage_file).stat().st_size > 0


def test_conversation_prefix_is_stored_once_and_rebuilt(tmp_path: Path) -> None:
    """A conversation growing over many requests stores each message once (prefix
    references), a large repeated field (tools) once, and full_requests rebuilds every
    request exactly — also with two conversations interleaved."""
    writer = TranscriptWriter(tmp_path / "transcript.jsonl", secrets=["sk-secret-123456"])
    tools = [{"name": "bash", "description": "x" * 2000}]
    sent: list[dict[str, Any]] = []
    conv_a: list[dict[str, Any]] = [{"role": "user", "content": "task A"}]
    conv_b: list[dict[str, Any]] = [{"role": "user", "content": "task B"}]
    for i in range(30):
        conv = conv_a if i % 3 else conv_b
        body = {"model": "m", "tools": tools, "messages": list(conv)}
        sent.append(json.loads(json.dumps(body)))
        writer.write({"api": "anthropic", "endpoint": "messages", "status": 200}, body, {"i": i})
        conv += [{"role": "assistant", "content": f"step {i}"}, {"role": "user", "content": "ok"}]
    lines = read_transcript(tmp_path / "transcript.jsonl")
    assert [line["seq"] for line in lines] == list(range(30))
    assert full_requests(lines) == sent
    size = (tmp_path / "transcript.jsonl").stat().st_size
    # Whole requests would hold the tools 30 times (60 kB); each line holds only its new
    # messages (the user's reply and the assistant's turn before it).
    assert size < 25_000, size
    assert all(len(line["request"]["messages"]) == 2 for line in lines[2:])
    assert all("tools" not in line["request"] for line in lines[1:])


def test_reassemble_a_stream_cut_short() -> None:
    """A stream cut before its end still gives what came: the text so far."""
    events = [
        {"type": "message_start", "message": {"id": "m", "model": "c", "content": []}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hi"}},
    ]
    out = reassemble("anthropic", events)
    assert out["content"] == [{"type": "text", "text": "Hi"}] and out["reassembled"]
    assert reassemble("openai", [{"weird": 1}])["choices"] == []
