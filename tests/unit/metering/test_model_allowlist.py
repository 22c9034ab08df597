"""The metering proxy's model allowlist: a run's proxy relays only the run's driver model(s),
so the agent cannot call its task's judge model (AlpacaEval's ``gpt-4-1106-preview``) or any
other model with the run's key. Real SDKs -> the proxy process -> the fake provider."""

from __future__ import annotations

import anthropic
import httpx
import openai
import pytest
from support.fake_provider import FakeProvider, Turn, start_fake_provider

from agent2rl.metering import MeteringProxy, Upstream, read_usage, start_metering_proxy

pytestmark = pytest.mark.timeout(120)

REAL_KEY = "sk-real-upstream-key"
PROXY_KEY = "sk-agent2rl-run-key"
DRIVER = "gpt-4o-mini"
JUDGE = "gpt-4-1106-preview"
HI = [{"role": "user", "content": "Please list the files."}]


@pytest.fixture(scope="module")
def fake() -> FakeProvider:
    provider = start_fake_provider([], api_key=REAL_KEY, models=[DRIVER, JUDGE])
    yield provider
    provider.stop()


def _start(tmp, fake: FakeProvider, **kw) -> MeteringProxy:
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


def test_only_the_drivers_model_is_relayed(fake: FakeProvider, tmp_path) -> None:
    proxy = _start(tmp_path, fake, allowed_models=[DRIVER])
    try:
        fake.load([Turn(text="fine"), Turn(text="also fine")])
        oai = openai.OpenAI(base_url=proxy.base_url("openai"), api_key=PROXY_KEY, max_retries=0)
        assert oai.chat.completions.create(model=DRIVER, messages=HI).choices[0].message.content
        served = len(fake.served)
        with pytest.raises(openai.PermissionDeniedError) as err:
            oai.chat.completions.create(model=JUDGE, messages=HI)
        assert f"'{JUDGE}' is not allowed" in str(err.value) and DRIVER in str(err.value)
        with pytest.raises(openai.PermissionDeniedError):
            oai.responses.create(model=JUDGE, input="hi")
        # A request naming no model is not a way around it.
        raw = httpx.post(
            proxy.base_url("openai") + "/chat/completions",
            json={"messages": HI},
            headers={"Authorization": f"Bearer {PROXY_KEY}"},
        )
        assert raw.status_code == 403 and "names no model" in raw.json()["error"]["message"]
        ant = anthropic.Anthropic(
            base_url=proxy.base_url("anthropic"), api_key=PROXY_KEY, max_retries=0
        )
        with pytest.raises(anthropic.PermissionDeniedError):
            ant.messages.create(model="claude-haiku-4-5", max_tokens=8, messages=HI)
        gem = httpx.post(
            f"{proxy.base_url('gemini')}/v1beta/models/gemini-2.5-flash:generateContent",
            json={"contents": [{"role": "user", "parts": [{"text": "hi"}]}]},
            headers={"x-goog-api-key": PROXY_KEY},
        )
        assert gem.status_code == 403 and DRIVER in gem.text
        assert len(fake.served) == served  # nothing refused reached the provider
        # Listing models is not a model call: still relayed.
        assert httpx.get(
            proxy.base_url("openai") + "/models", headers={"Authorization": f"Bearer {PROXY_KEY}"}
        ).is_success
        recs = read_usage(proxy.usage_file)
        refused = [r for r in recs if r["refused"]]
        assert len(refused) == 5 and all(r["status"] == 403 for r in refused)
        assert {r["model"] for r in refused} >= {JUDGE, "claude-haiku-4-5", "gemini-2.5-flash"}
    finally:
        proxy.stop()


def test_without_an_allowlist_every_model_is_relayed(fake: FakeProvider, tmp_path) -> None:
    proxy = _start(tmp_path, fake)
    try:
        fake.load([Turn(text="judged")])
        oai = openai.OpenAI(base_url=proxy.base_url("openai"), api_key=PROXY_KEY, max_retries=0)
        assert oai.chat.completions.create(model=JUDGE, messages=HI).choices[0].message.content
    finally:
        proxy.stop()


def test_the_judge_model_is_not_sent_the_judges_prompt(fake: FakeProvider, tmp_path) -> None:
    """A run whose driver is alpacaeval's judge model: the driver may be called, but not with
    the judge's template (the grader's own judge, as an oracle for the agent's outputs)."""
    from agent2rl.scoring.judges import protocol
    from agent2rl.tasks import get_task

    rules = get_task("alpacaeval", {"judge": protocol.NAME}).denied_llm_prompts()
    assert set(rules) == {JUDGE} and len(rules[JUDGE]) >= 3
    proxy = _start(tmp_path, fake, allowed_models=[JUDGE], denied_prompts=rules)
    try:
        fake.load([Turn(text="ordinary"), Turn(text="m")])
        oai = openai.OpenAI(base_url=proxy.base_url("openai"), api_key=PROXY_KEY, max_retries=0)
        assert oai.chat.completions.create(model=JUDGE, messages=HI).choices[0].message.content
        served = len(fake.served)
        judged = protocol.messages("Name a colour.", "Blue.", "I like  TRAINS.")
        with pytest.raises(openai.PermissionDeniedError) as err:
            oai.chat.completions.create(model=JUDGE, messages=judged, max_tokens=1)
        assert "judge prompt" in str(err.value)
        # Reflowed into one message, other case and spacing: still the template.
        text = " ".join(m["content"] for m in judged).upper().replace(" ", "  ")
        with pytest.raises(openai.PermissionDeniedError):
            oai.responses.create(model=JUDGE, input=text)
        assert len(fake.served) == served
    finally:
        proxy.stop()
