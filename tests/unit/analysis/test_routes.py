"""Route classification on constructed runs with known routes."""

from __future__ import annotations

from support.studyruns import make_run, point

from agent2rl.analysis.dashboard.routes import ROUTES, classify, run_route
from agent2rl.analysis.dashboard.runset import Evidence


def ev(source: str, t: float | None, *methods: str, ref: str = "agent.log:1") -> Evidence:
    return Evidence(source, t, frozenset(methods), f"{source} says {methods}", ref)


def label(run) -> str:
    return run_route(run).route.label


def test_failed_without_a_valid_submission() -> None:
    run = make_run(scores=[None, None], evidence=[ev("code", 5, "sft")])
    r = run_route(run).route
    assert r.label == "failed" and "none valid" in r.reason
    assert label(make_run(scores=[], status="agent_error")) == "failed"


def test_no_training_when_only_copies_or_no_method_evidence() -> None:
    copies = make_run(scores=[10.0], evidence=[ev("code", 1, "sft")])
    m = copies.metrics.model_copy(update={"trajectory": [point(1, 10, 10.0, is_copy=True)]})
    assert classify(m, copies.evidence).label == "no training"
    quiet = make_run(scores=[11.0], evidence=[ev("code", 10, ref="snapshot 1 (submission #1)")])
    r = run_route(quiet).route
    assert r.label == "no training" and "snapshot 1" not in r.reason  # shows the detail
    assert "code says" in r.reason


def test_sft_only_rl_only() -> None:
    assert label(make_run(scores=[12.0], evidence=[ev("code", 10, "sft")])) == "SFT only"
    rl = make_run(scores=[12.0], evidence=[ev("rollout", 3, "rl", ref="record/env.db")])
    assert label(rl) == "RL only"


def test_sft_then_rl_needs_timed_order() -> None:
    ordered = make_run(
        scores=[12.0, 15.0],
        evidence=[ev("log", 5, "sft"), ev("log", 60, "rl"), ev("code", 100, "sft", "rl")],
    )
    r = run_route(ordered).route
    assert r.label == "SFT then RL" and "5s" in r.reason and "60s" in r.reason
    # Both in one snapshot, nothing to order them: said so, not guessed.
    same = make_run(scores=[12.0], evidence=[ev("code", 10, "sft", "rl")])
    assert run_route(same).route.label == "SFT and RL"
    assert "nothing recorded orders them" in run_route(same).route.reason
    backwards = make_run(scores=[12.0], evidence=[ev("log", 5, "rl"), ev("log", 9, "sft")])
    assert label(backwards) == "SFT and RL" and "before SFT" in run_route(backwards).route.reason
    untimed = make_run(scores=[12.0], evidence=[ev("log", None, "sft"), ev("log", None, "rl")])
    assert label(untimed) == "SFT and RL"


def test_best_route_uses_evidence_up_to_the_best_submission() -> None:
    # The SFT submission at t=20 is the best; RL came later and did not beat it.
    run = make_run(
        scores=[15.0, 12.0],
        times=[20.0, 90.0],
        evidence=[ev("log", 5, "sft"), ev("log", 40, "rl")],
    )
    rr = run_route(run)
    assert rr.route.label == "SFT then RL"
    assert rr.best_route.label == "SFT only"
    assert set(ROUTES) >= {rr.route.label, rr.best_route.label}


def test_evidence_is_kept_with_the_label() -> None:
    e = ev("code", 10, "sft", ref="snapshot abc (submission #1)")
    r = run_route(make_run(scores=[12.0], evidence=[e])).route
    assert r.evidence == (e,)


def test_what_ran_outranks_what_the_code_holds() -> None:
    # Shared helpers put RL code in every snapshot, but the agent only ever ran SFT.
    run = make_run(
        scores=[12.0],
        evidence=[
            ev("code", 10, "sft", "rl", ref="snapshot 1 (submission #1)"),
            ev("log", 5, "sft"),
        ],
    )
    r = run_route(run).route
    assert r.label == "SFT only" and [e.source for e in r.evidence] == ["log"]
    # Without runtime evidence, the code decides.
    assert label(make_run(scores=[12.0], evidence=[ev("code", 10, "rl")])) == "RL only"
