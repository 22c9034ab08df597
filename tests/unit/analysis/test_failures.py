"""The failure taxonomy on constructed runs."""

from __future__ import annotations

from support.studyruns import make_run, point

from agent2rl.analysis.dashboard.failures import failure_counts, run_failures
from agent2rl.analysis.report.run_metrics import RejectedAttempt


def kinds(run) -> list[str]:
    return [f.kind for f in run_failures(run.metrics)]


def test_statuses() -> None:
    assert kinds(make_run(scores=[12.0])) == []
    assert kinds(make_run(scores=[12.0], status="agent_error", error="exit 1")) == ["crash"]
    assert kinds(make_run(scores=[12.0], status="oom")) == ["oom"]
    assert kinds(make_run(scores=[12.0], status="disk_quota")) == ["disk quota"]
    assert kinds(make_run(scores=[12.0], status="harness_error")) == ["harness"]
    assert kinds(make_run(scores=[], status="deadline")) == ["deadline, no valid submission"]
    assert kinds(make_run(scores=[None], status="completed"))[0] == "no valid submission"


def test_submission_failures_and_rejections() -> None:
    run = make_run(scores=[12.0])
    m = run.metrics.model_copy(
        update={
            "trajectory": [
                point(1, 5, None, error="could not load the weights"),
                point(2, 8, None, error="evaluation timed out after 300s"),
                point(3, 9, 12.0),
            ],
            "rejections": [
                RejectedAttempt(id=1, t=2.0, path="../x", http_status=400, reason="outside output/")
            ],
        }
    )
    found = {(f.kind, f.ref) for f in run_failures(m)}
    assert ("format error", "submission #1") in found
    assert ("grader failure", "submission #2") in found
    assert ("format error", "rejection #1") in found


def test_integrity_flags() -> None:
    run = make_run(scores=[10.0], mode="sft-only", mode_flags=["sft-only run used GRPO"])
    m = run.metrics.model_copy(update={"trajectory": [point(1, 5, 10.0, is_copy=True)]})
    fs = run_failures(m)
    assert [f.kind for f in fs] == ["integrity", "integrity"]
    assert {f.ref for f in fs} == {"submission #1", "record/agent.json"}


def test_counts_per_stack_count_a_run_once_per_kind() -> None:
    runs = [
        make_run(agent="a", scores=[], status="deadline"),
        make_run(agent="a", scores=[12.0], status="agent_error"),
        make_run(agent="b", scores=[12.0]),
    ]
    counts = failure_counts(runs)
    assert counts["a"] == {"deadline, no valid submission": 1, "crash": 1}
    assert sum(counts["b"].values()) == 0
