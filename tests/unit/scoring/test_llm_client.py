"""The harness's one LLM client (:mod:`agent2rl.scoring.llm_client`) against the scripted
OpenAI-compatible provider on loopback: retries after 500 and 429 (and not after 401),
metering (tokens, cost, failed requests), the response cache (a hit sends no request), the
fail-fast batch, and two callers moved onto it: the run summaries (which now retry) and
DeepSearchQA's judge (whose verdicts are now cached as they arrive)."""

from __future__ import annotations

import json
import threading
import time

import pytest
from support.fake_provider import Turn, start_fake_provider
from support.studyruns import make_run

from agent2rl.analysis.dashboard.summary import SummaryEndpoint, llm_summary
from agent2rl.metering.usage import read_usage
from agent2rl.scoring.judges import JudgeUnavailable
from agent2rl.scoring.llm_client import (
    Completion,
    LLMClient,
    LLMMeter,
    LLMUnavailable,
    ResponseCache,
    UnusableResponse,
    request_key,
)
from agent2rl.tasks.deepsearch.judge import answer_judge

KEY = "llm-client-test-key"
MODEL = "gpt-4-1106-preview"  # priced: $10 / $30 per million tokens


def ask(text: str) -> dict:
    return {"model": MODEL, "messages": [{"role": "user", "content": text}], "temperature": 0}


@pytest.fixture
def provider():
    with start_fake_provider({"turns": [], "final_text": "fine"}, api_key=KEY) as p:
        yield p


def client_for(provider, tmp_path, **kw) -> LLMClient:
    kw.setdefault("backoff_s", 0.01)
    kw.setdefault("meter", LLMMeter(tmp_path / "usage.jsonl"))
    return LLMClient(MODEL, provider.openai_base_url, KEY, **kw)


def failing_first(*turns: Turn):
    """A responder that answers with ``turns`` first, then the script's reply."""
    left = list(turns)
    lock = threading.Lock()

    def responder(body: dict) -> Turn | None:
        with lock:
            return left.pop(0) if left else None

    return responder


def test_retries_after_500_and_429_and_meters_every_request(provider, tmp_path) -> None:
    provider.respond_with(failing_first(Turn(error_status=500), Turn(error_status=429)))
    client = client_for(provider, tmp_path, max_attempts=3)
    assert client.chat(ask("How are you?"), Completion.text) == "fine"
    lines = read_usage(tmp_path / "usage.jsonl")
    assert [line["status"] for line in lines] == [500, 429, 200]
    assert "HTTP 500" in lines[0]["error"] and "HTTP 429" in lines[1]["error"]
    served = provider.served[-1]
    assert lines[2]["input_tokens"] == served.input_tokens > 0
    assert lines[2]["output_tokens"] == served.output_tokens > 0
    totals = client.meter.totals()
    assert totals["requests"] == 3 and totals["errors"] == 2 and totals["cache_hits"] == 0
    want = (served.input_tokens * 10 + served.output_tokens * 30) / 1e6
    assert totals["cost_usd"] == pytest.approx(want, rel=1e-6)
    assert lines[2]["cost_usd"] == pytest.approx(want, rel=1e-6)
    assert all(s.api_key == KEY for s in provider.served)


def test_gives_up_after_max_attempts_and_never_retries_a_refusal(provider, tmp_path) -> None:
    provider.respond_with(lambda body: Turn(error_status=503, error_message="overloaded"))
    client = client_for(provider, tmp_path, max_attempts=3, label="judge")
    with pytest.raises(LLMUnavailable) as err:
        client.chat(ask("x"))
    assert str(err.value) == (
        f"judge {MODEL} at {provider.openai_base_url} unreachable after 3 attempts "
        "(HTTP 503: overloaded)"
    )
    assert len(provider.served) == 3
    provider.respond_with(lambda body: Turn(error_status=401, error_message="bad key"))
    judge = client_for(provider, tmp_path, max_attempts=5, unavailable=JudgeUnavailable)
    with pytest.raises(JudgeUnavailable, match=r"refused the request \(HTTP 401: bad key\)"):
        judge.chat(ask("x"))
    assert len(provider.served) == 4  # one try: a wrong key does not get better


def test_a_cache_hit_sends_no_request(provider, tmp_path) -> None:
    cache_path = tmp_path / "cache" / "responses.sqlite3"
    first = client_for(provider, tmp_path, cache=ResponseCache(cache_path))
    assert first.chat(ask("Hello"), Completion.text) == "fine"
    first.close()
    assert len(provider.served) == 1
    # another client, another process's worth of state: the same file answers
    again = client_for(
        provider, tmp_path, cache=ResponseCache(cache_path), meter=LLMMeter(tmp_path / "u2")
    )
    body = ask("Hello")
    reordered = dict(reversed(list(body.items())))  # key order is not part of the request
    assert again.chat(reordered, Completion.text) == "fine"
    assert len(provider.served) == 1, "a cached request is not sent"
    assert again.meter.totals()["cache_hits"] == 1 and again.meter.totals()["requests"] == 0
    assert not (tmp_path / "u2").exists()  # no request, no usage line
    # anything else in the body is another request
    assert again.chat({**body, "temperature": 1}, Completion.text) == "fine"
    assert len(provider.served) == 2
    assert request_key("http://a/v1/", body) == request_key("http://a/v1", reordered)


def test_an_unusable_answer_is_metered_raised_and_not_cached(provider, tmp_path) -> None:
    cache = ResponseCache(tmp_path / "c.sqlite3")
    client = client_for(provider, tmp_path, cache=cache)
    # the script's reply: text, no logprobs

    def needs_logprobs(c: Completion) -> list:
        if not c.data["choices"][0].get("logprobs"):
            raise UnusableResponse("answered without logprobs", "no logprobs")
        return c.data["choices"][0]["logprobs"]

    with pytest.raises(LLMUnavailable, match="answered without logprobs"):
        client.chat(ask("x"), needs_logprobs)
    (line,) = read_usage(tmp_path / "usage.jsonl")
    assert line["status"] == 200 and line["error"] == "no logprobs"
    assert cache.get(request_key(client.base_url, ask("x"))) is None


def test_a_batch_stops_at_the_first_outage(provider, tmp_path) -> None:
    provider.respond_with(lambda body: Turn(error_status=503))
    client = client_for(provider, tmp_path, max_attempts=3, concurrency=4)
    started = time.monotonic()
    with pytest.raises(LLMUnavailable, match="unreachable after 3 attempts"):
        client.chat_many([ask(f"q{i}") for i in range(40)])
    assert time.monotonic() - started < 10
    # 40 bodies x 3 attempts would be 120: the queued ones were cancelled
    assert 3 <= len(provider.served) < 40


def test_close_cuts_a_wait_between_attempts(provider, tmp_path) -> None:
    provider.respond_with(lambda body: Turn(error_status=503))
    client = client_for(provider, tmp_path, max_attempts=3, backoff_s=20.0)
    failed: list[BaseException] = []

    def call() -> None:
        try:
            client.chat(ask("x"))
        except LLMUnavailable as err:
            failed.append(err)

    worker = threading.Thread(target=call)
    worker.start()
    deadline = time.monotonic() + 5
    while not provider.served and time.monotonic() < deadline:
        time.sleep(0.01)
    started = time.monotonic()
    client.close()
    worker.join(5)
    assert not worker.is_alive() and failed
    assert time.monotonic() - started < 5  # not the 20 s backoff


def test_run_summary_retries_a_transient_failure(tmp_path) -> None:
    """The summaries sent one request: a 503 made the dashboard fall back to rules."""
    answer = {"decisions": [{"text": "Warmed up with SFT.", "refs": ["run.json"]}]}
    with start_fake_provider({"turns": [json.dumps(answer)]}) as fake:
        fake.respond_with(failing_first(Turn(error_status=503)))
        ep = SummaryEndpoint(fake.openai_base_url, "fake-model")
        usage = tmp_path / "usage.jsonl"
        s = llm_summary(
            make_run(baseline=10, scores=[12.0]),
            ep,
            cache_dir=tmp_path / "cache",
            usage_path=usage,
            backoff_s=0.01,
        )
    assert s.source == "llm:fake-model", s.notes
    assert [c.text for c in s.decisions] == ["Warmed up with SFT."]
    assert [line["status"] for line in read_usage(usage)] == [503, 200]


def test_deepsearch_verdicts_received_before_an_outage_stay_cached(tmp_path) -> None:
    """DeepSearchQA's judge stored its verdicts only once every request of an evaluation had
    been answered: an outage midway lost the verdicts already paid for."""
    outage = {"on": False}

    def reply(body: dict) -> Turn:
        if outage["on"] and "third" in json.dumps(body):
            return Turn(error_status=401, error_message="key revoked")
        rid = body["messages"][-1]["content"].split("<response ", 1)[1].split(">", 1)[0]
        return Turn(text=json.dumps({"response_id": rid, "correct": True}))

    items = [(f"Question {w}?", "Paris", "single", f"Paris, the {w} answer") for w in
             ("first", "second", "third")]  # fmt: skip
    cache = tmp_path / "judgments.sqlite3"
    with start_fake_provider(api_key=KEY) as fake:
        fake.respond_with(reply)
        outage["on"] = True
        judge = answer_judge("fake-judge", fake.openai_base_url, api_key=KEY, cache_path=cache,
                             kind="binary", concurrency=1, backoff_s=0.01)  # fmt: skip
        with pytest.raises(JudgeUnavailable, match="HTTP 401"):
            judge.grade(items)
        judge.close()
        assert len(fake.served) == 3
        outage["on"] = False
        again = answer_judge("fake-judge", fake.openai_base_url, api_key=KEY, cache_path=cache,
                             kind="binary", concurrency=1, backoff_s=0.01)  # fmt: skip
        graded = again.grade(items)
        again.close()
    assert [g.score.f1 for g in graded] == [1.0, 1.0, 1.0]
    assert len(fake.served) == 4, "only the verdict lost to the outage is asked again"
    assert again.totals()["cache_hits"] == 2 and again.totals()["requests"] == 1
