"""Post-hoc summaries: rule-based, and an LLM's over a real OpenAI-compatible server on
loopback (the fake provider), metered and cached, keeping only claims that cite artifacts."""

from __future__ import annotations

import json

from support.fake_provider import start_fake_provider
from support.studyruns import make_run

from agent2rl.analysis.dashboard.runset import Evidence
from agent2rl.analysis.dashboard.summary import (
    SummaryEndpoint,
    artifacts,
    llm_summary,
    rule_summary,
    summarize,
)
from agent2rl.metering import read_usage


def a_run():
    return make_run(
        baseline=10,
        scores=[12.0, None, 15.0],
        evidence=[
            Evidence("log", 5.0, frozenset({"sft"}), "SFT warm-up", "agent.log:3"),
            Evidence("log", 40.0, frozenset({"rl"}), "GRPO round 1", "agent.log:9"),
        ],
    )


def test_rule_summary_every_claim_cites_a_known_artifact() -> None:
    run = a_run()
    s = rule_summary(run)
    assert s.source == "rules" and s.route == "SFT then RL"
    known = artifacts(run)
    for claim in s.claims():
        assert claim.refs and all(r in known for r in claim.refs), claim
    texts = " ".join(c.text for c in s.decisions)
    assert "Best submission #3" in texts and "+5.00" in texts
    assert any("submission #2" in c.refs for c in s.failures)  # the failed submission
    assert s.timeline[0].text.startswith("Run started")
    assert s.timeline[-1].text.endswith("ended as deadline.")


def test_no_endpoint_means_rules() -> None:
    assert SummaryEndpoint.from_env({}) is None
    ep = SummaryEndpoint.from_env(
        {"AGENT2RL_SUMMARY_BASE_URL": "http://x/v1/", "AGENT2RL_SUMMARY_MODEL": "m"}
    )
    assert ep == SummaryEndpoint("http://x/v1", "m", "")
    assert summarize([a_run()])[0].source == "rules"


def test_llm_summary_is_checked_metered_and_cached(tmp_path) -> None:
    run = a_run()
    answer = {
        "decisions": [
            {"text": "Warmed up with SFT.", "refs": ["agent.log:3"]},
            {"text": "Switched to GRPO, which made the best model.", "refs": ["submission #3"]},
            {"text": "Used a secret trick.", "refs": ["notes.txt"]},  # no such artifact
            {"text": "No ref at all.", "refs": []},
        ]
    }
    with start_fake_provider({"turns": [json.dumps(answer)], "final_text": "{}"}) as fake:
        ep = SummaryEndpoint(fake.openai_base_url, "fake-model", "k")
        cache, usage = tmp_path / "cache", tmp_path / "usage.jsonl"
        s = llm_summary(run, ep, cache_dir=cache, usage_path=usage)
        assert s.source == "llm:fake-model"
        assert [c.text for c in s.decisions] == [
            "Warmed up with SFT.",
            "Switched to GRPO, which made the best model.",
        ]
        assert s.notes == ["2 LLM claim(s) dropped: no ref to a recorded artifact"]
        (line,) = read_usage(usage)
        assert line["model"] == "fake-model" and line["input_tokens"] > 0
        assert line["status"] == 200
        again = llm_summary(run, ep, cache_dir=cache, usage_path=usage)
        assert again.decisions == s.decisions
        assert len(read_usage(usage)) == 1  # served from the cache
        assert len(fake.served) == 1


def test_llm_failures_fall_back_to_rules(tmp_path) -> None:
    run = a_run()
    with start_fake_provider({"turns": ["not json at all"]}) as fake:
        ep = SummaryEndpoint(fake.openai_base_url, "fake-model")
        s = llm_summary(run, ep, cache_dir=tmp_path / "c", usage_path=tmp_path / "u.jsonl")
        assert s.source == "rules" and "not the JSON asked for" in s.notes[-1]
    dead = SummaryEndpoint("http://127.0.0.1:9/v1", "m")
    s = llm_summary(run, dead, cache_dir=tmp_path / "c2", usage_path=tmp_path / "u2.jsonl")
    assert s.source == "rules" and "LLM summary failed" in s.notes[-1]
    assert read_usage(tmp_path / "u2.jsonl")[0]["error"]
