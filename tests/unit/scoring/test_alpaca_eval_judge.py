"""The AlpacaEval judge over real HTTP, against the scripted OpenAI-compatible provider on
loopback: the exact requests (prompt, order swap, settings, key), the preference read back
in AlpacaEval's order, the cache, metering, retries and outages."""

from __future__ import annotations

import json
import math

import pytest
import sklearn
from support.fake_provider import Turn, start_fake_provider

from agent2rl.dataset import Sample
from agent2rl.metering.usage import read_usage
from agent2rl.scoring import Judge
from agent2rl.scoring.judges import JudgeUnavailable, Pair, openai_judge, protocol
from agent2rl.scoring.judges.win_rates import LC_MINIMAL
from agent2rl.solvers.base import Output

KEY = "judge-key-123"
PAIRS = [
    Pair(f"Instruction number {i}: explain topic {i}.", f"Reference answer {i}.", f"Model {i}.")
    for i in range(12)
]


def prefers_model(body: dict) -> Turn:
    """A judge that always prefers the model's output, wherever it is displayed: it reads
    the user message to see which slot holds "Model"."""
    user = body["messages"][1]["content"]
    model_first = user.index('"""Model') < user.index('"""Reference')
    label = "m" if model_first else "M"
    other = "M" if label == "m" else "m"
    return Turn(top_logprobs=[(label, math.log(0.9)), (other, math.log(0.1)), ("The", -9.0)])


@pytest.fixture
def provider():
    with start_fake_provider(api_key=KEY) as p:
        p.respond_with(prefers_model)
        yield p


def judge_for(provider, tmp_path, **kw):
    kw.setdefault("backoff_s", 0.01)
    return openai_judge(
        "gpt-4-1106-preview",
        provider.openai_base_url,
        cache_path=tmp_path / "cache.sqlite3",
        usage_path=tmp_path / "judge_usage.jsonl",
        api_key=KEY,
        **kw,
    )


def test_requests_are_alpacaeval_s_and_preferences_come_back_in_its_order(
    provider, tmp_path
) -> None:
    judge = judge_for(provider, tmp_path)
    prefs = judge.preferences(PAIRS)
    # The judge put 0.9 on the model's output in either position: 2 - 0.1 = 1.9 always.
    assert prefs == pytest.approx([1.9] * len(PAIRS))
    served = sorted(provider.served, key=lambda s: s.request["messages"][1]["content"])
    assert len(served) == len(PAIRS)
    by_instruction = {}
    for s in served:
        assert s.api_key == KEY
        body = s.request
        assert {k: v for k, v in body.items() if k != "messages"} == {
            "model": "gpt-4-1106-preview",
            "max_tokens": 1,
            "temperature": 1,
            "top_p": 1.0,
            "logprobs": True,
            "top_logprobs": 5,
        }
        instruction = next(p for p in PAIRS if f'"""{p.instruction}"""' in str(body))
        by_instruction[instruction.instruction] = body["messages"]
    swaps = 0
    for pair in PAIRS:
        swapped = protocol.is_swapped(pair.instruction)
        swaps += swapped
        first, second = (
            (pair.output_2, pair.output_1) if swapped else (pair.output_1, pair.output_2)
        )
        # the exact prompt: the package's template with the outputs in the displayed order
        want = protocol.template()
        for name, value in (("instruction", pair.instruction), ("output_1", first)):
            want = want.replace("{" + name + "}", value, 1)
        want = want.replace("{output_2}", second, 1).strip()
        system, user = want.split("<|im_start|>")[1:]
        assert by_instruction[pair.instruction] == [
            {"role": "system", "content": system.split("\n", 1)[1].split("<|im_end|>")[0].strip()},
            {"role": "user", "content": user.split("\n", 1)[1].split("<|im_end|>")[0].strip()},
        ]
    assert 0 < swaps < len(PAIRS)  # both orders occur among these instructions
    totals = judge.totals()
    assert totals["requests"] == len(PAIRS) and totals["cache_hits"] == 0
    lines = read_usage(tmp_path / "judge_usage.jsonl")
    assert len(lines) == len(PAIRS) and all(line["status"] == 200 for line in lines)
    assert totals["input_tokens"] == sum(s.input_tokens for s in provider.served) > 0
    assert totals["output_tokens"] == len(PAIRS)  # one token each
    # gpt-4-1106-preview's list price: $10 / $30 per million tokens
    want_cost = (totals["input_tokens"] * 10 + totals["output_tokens"] * 30) / 1e6
    assert totals["cost_usd"] == pytest.approx(want_cost, rel=1e-6)


def test_cache_identical_outputs_and_unusable_answers(provider, tmp_path) -> None:
    judge_for(provider, tmp_path).preferences(PAIRS[:6])
    again = judge_for(provider, tmp_path)
    n = len(provider.served)
    same = Pair("Same?", "identical", "identical")
    prefs = again.preferences([*PAIRS[:6], same])
    assert len(provider.served) == n, "cached and identical pairs send no request"
    assert prefs[-1] == 1.5 and prefs[:6] == pytest.approx([1.9] * 6)
    assert again.totals()["cache_hits"] == 6 and again.totals()["requests"] == 0
    # another judge model is another cache key
    other = openai_judge(
        "other-judge", provider.openai_base_url, api_key=KEY, cache_path=tmp_path / "cache.sqlite3"
    )
    other.preferences(PAIRS[:2])
    assert len(provider.served) == n + 2
    # an answer naming neither output is NaN (dropped from the win rate), and cached as such
    provider.respond_with(lambda body: Turn(top_logprobs=[("The", -0.1), ("A", -2.0)]))
    weird = judge_for(provider, tmp_path).preferences([PAIRS[7]])
    assert math.isnan(weird[0])
    assert math.isnan(judge_for(provider, tmp_path).preferences([PAIRS[7]])[0])


def test_transient_errors_are_retried_and_metered(provider, tmp_path) -> None:
    failures = {"left": 3}

    def flaky(body):
        if failures["left"] > 0:
            failures["left"] -= 1
            return [Turn(error_status=503), Turn(drop_connection=True), Turn(error_status=429)][
                failures["left"]
            ]
        return prefers_model(body)

    provider.respond_with(flaky)
    judge = judge_for(provider, tmp_path, concurrency=1, max_attempts=5)
    assert judge.preferences([PAIRS[0]]) == pytest.approx([1.9])
    lines = read_usage(tmp_path / "judge_usage.jsonl")
    assert [line["status"] for line in lines] == [429, 0, 503, 200]
    assert "RemoteProtocolError" in lines[1]["error"]
    assert judge.totals()["errors"] == 3 and judge.totals()["requests"] == 4


@pytest.mark.parametrize("kind", ["503", "refused", "401", "no-logprobs"])
def test_an_unavailable_judge_raises_one_clear_line(provider, tmp_path, kind) -> None:
    base = provider.openai_base_url
    if kind == "503":
        provider.respond_with(lambda body: Turn(error_status=503, error_message="overloaded"))
    elif kind == "refused":
        provider.stop()
    elif kind == "no-logprobs":
        provider.respond_with(None)  # the script's plain text reply, no logprobs asked for...
        provider.load({"turns": [], "final_text": "M"})
    judge = openai_judge(
        "gpt-4-1106-preview",
        base,
        api_key="wrong" if kind == "401" else KEY,
        cache_path=tmp_path / "c.sqlite3",
        usage_path=tmp_path / "u.jsonl",
        max_attempts=3,
        backoff_s=0.01,
        concurrency=4,
    )
    if kind == "no-logprobs":
        # ...a server that ignores logprobs answers without them
        judge.backend.request_body = lambda m, n: {"model": "x", "messages": m}  # type: ignore
    with pytest.raises(JudgeUnavailable) as err:
        judge.preferences(PAIRS)
    message = str(err.value)
    assert "\n" not in message and base in message
    expect = {
        "503": "unreachable after 3 attempts (HTTP 503: overloaded)",
        "refused": "unreachable after 3 attempts (ConnectError",
        "401": "refused the request (HTTP 401",
        "no-logprobs": "answered without top logprobs",
    }[kind]
    assert expect in message
    lines = read_usage(tmp_path / "u.jsonl")
    # an outage stops the batch: far fewer requests than 12 pairs x 3 attempts
    assert 1 <= len(lines) < 3 * len(PAIRS)


def test_judge_scorer_items_and_details(provider, tmp_path) -> None:
    samples = [
        Sample(f"id{i}", {"instruction": p.instruction}, p.output_1, {"index": i, "group": "g"})
        for i, p in enumerate(PAIRS[:4])
    ]
    outputs = [Output(p.output_2) for p in PAIRS[:3]] + [Output(PAIRS[3].output_1)]
    scorer = Judge(judge_for(provider, tmp_path))
    assert scorer.metric == "win_rate"
    assert scorer.settings()["judge"]["backend"]["base_url"] == provider.openai_base_url
    items = scorer.score(samples, outputs)
    assert [round(i.score, 6) for i in items] == [0.9, 0.9, 0.9, 0.5]
    assert [i.correct for i in items] == [True, True, True, False]
    assert items[0].meta["preference"] == pytest.approx(1.9) and items[0].meta["group"] == "g"
    details = scorer.details(items, outputs)
    assert details["win_rate"] == pytest.approx(80.0) and details["n_draws"] == 1
    assert details["metric"] == "win_rate" and details["unjudged"] == 0
    assert details["avg_length"] == pytest.approx(sum(len(o.text) for o in outputs) / 4)
    assert details["judge"]["requests"] == 3  # the identical pair needs no request
    json.dumps(details)  # result.json must be able to hold it


def test_minimal_lc_glm_is_reported_beside_the_raw_score(provider, tmp_path) -> None:
    """A judge that only likes length: the raw win rate rewards the model's longer outputs,
    the minimal GLM's LC win rate (alpaca-lite's) takes the length out; the score stays raw."""
    outputs = [Output(f"Model {i}." + " and more" * (i % 6)) for i in range(12)]

    def prefers_longer(body: dict) -> Turn:
        user = body["messages"][1]["content"]
        i = next(i for i in range(12) if f"Instruction number {i}:" in user)
        model, ref = outputs[i].text, PAIRS[i].output_1
        model_first = user.index(model) < user.index(ref)
        p_model = 1 / (1 + math.exp(-(len(model) - len(ref)) / 8))
        p_first = p_model if model_first else 1 - p_model
        return Turn(top_logprobs=[("m", math.log(p_first)), ("M", math.log(1 - p_first))])

    provider.respond_with(prefers_longer)
    samples = [
        Sample(f"id{i}", {"instruction": p.instruction}, p.output_1, {"index": i})
        for i, p in enumerate(PAIRS)
    ]
    scorer = Judge(judge_for(provider, tmp_path), lc_glm=LC_MINIMAL)
    assert scorer.metric == "win_rate" and scorer.settings()["lc_glm"] == LC_MINIMAL
    items = scorer.score(samples, outputs)
    assert all(i.score == pytest.approx(i.meta["preference"] - 1) for i in items)
    # as in a grading process, where nothing turned scikit-learn's metadata routing on (the
    # alpaca-eval package does so for the whole process, and other tests import it)
    with sklearn.config_context(enable_metadata_routing=False):
        details = scorer.details(items, outputs)
    assert "lc_error" not in details, details.get("lc_error")
    assert details["metric"] == "win_rate" and details["lc_glm"] == LC_MINIMAL
    raw, lc = details["win_rate"], details["length_controlled_winrate"]
    assert raw > 60 and raw - lc > 10, (raw, lc)
    assert details["lc_standard_error"] == pytest.approx(0.0)  # one prediction for all
    with pytest.raises(ValueError, match="lc_glm"):
        Judge(judge_for(provider, tmp_path), lc_glm="length_controlled_v1")
