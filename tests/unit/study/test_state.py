"""The study's state database: slots, attempts, outcomes, binding to settings."""

from __future__ import annotations

import pytest

from agent2rl.errors import UserError
from agent2rl.study.spec import StudySpec, expand
from agent2rl.study.state import StudyState, attempt_outcome, read_state


def spec(**kw) -> StudySpec:
    base = {"name": "s", "tasks": ["arith-lite"], "agents": ["reference-sft"], "budget": "1m"}
    return StudySpec.model_validate(base | kw)


def test_outcomes() -> None:
    for status in ("completed", "deadline", "agent_error", "oom", "disk_quota"):
        assert attempt_outcome(status) == "finished"
    assert attempt_outcome("interrupted") == "interrupted"
    for status in ("harness_error", None, "running"):
        assert attempt_outcome(status) == "failed"


def test_slots_and_attempts_round_trip(tmp_path) -> None:
    s = spec(repeats=2)
    with StudyState(tmp_path, create=True) as state:
        state.bind(s, "text")
        state.sync_slots(expand(s))
        state.sync_slots(expand(s))  # idempotent
        a, b = state.slots()
        assert (a.status, b.status) == ("pending", "pending")
        n = state.queue_attempt(a.id)
        assert n == 1 and state.slot(a.id).status == "running"
        assert [x.status for x in state.open_attempts()] == ["queued"]
        state.mark_started(a.id, n, 123.0, "node1")
        assert state.open_attempts()[0].status == "running"
        assert (
            state.end_attempt(
                a.id, n, run_id="r1", run_dir="/d/r1", run_status="harness_error", error="boom"
            )
            == "failed"
        )
        assert state.slot(a.id).status == "failed"
        n2 = state.queue_attempt(a.id)
        assert n2 == 2
        assert (
            state.end_attempt(
                a.id, n2, run_id="r2", run_dir="/d/r2", run_status="deadline", error=None
            )
            == "finished"
        )
        n3 = state.queue_attempt(b.id)
        assert (
            state.end_attempt(
                b.id, n3, run_id="r3", run_dir="/d/r3", run_status="interrupted", error=None
            )
            == "interrupted"
        )
        assert state.slot(b.id).status == "pending"  # runs again next time
        assert [r.run_id for r in state.finished_runs()] == ["r2"]
        assert state.counts() == {"pending": 1, "running": 0, "finished": 1, "failed": 0}
        assert state.failures_since(a.id, 0.0) == 1
    meta, slots, attempts = read_state(tmp_path)
    assert meta["name"] == "s" and len(slots) == 2 and len(attempts) == 3


def test_a_finished_slot_keeps_its_run(tmp_path) -> None:
    s = spec()
    with StudyState(tmp_path, create=True) as state:
        state.bind(s, "")
        state.sync_slots(expand(s))
        (row,) = state.slots()
        n = state.queue_attempt(row.id)
        state.end_attempt(row.id, n, run_id="r1", run_dir="/r1", run_status="completed", error=None)
        # A late record of another attempt must not replace the counted run.
        state.end_attempt(
            row.id, 99, run_id="rX", run_dir="/rX", run_status="harness_error", error="x"
        )
        assert state.slot(row.id).run_id == "r1"


def test_bound_settings_refuse_another_budget(tmp_path) -> None:
    with StudyState(tmp_path, create=True) as state:
        state.bind(spec(), "")
        state.bind(spec(repeats=4, agents=["reference-sft", "reference-grpo"]), "")  # grows: ok
        with pytest.raises(UserError, match="changed: budget, budget_s"):
            state.bind(spec(budget="2m"), "")


def test_not_a_study_dir(tmp_path) -> None:
    with pytest.raises(UserError, match="not a study directory"):
        read_state(tmp_path)
