"""An attempt finds its own run directory: slots that differ only by driver (same task,
model, agent, mode and seed, running side by side) never take each other's run."""

from __future__ import annotations

import time
from pathlib import Path

from support.rundirs import write_run

from agent2rl.study.attempt import find_run_dir
from agent2rl.study.spec import RunSlot


def _run(study: Path, name: str, created_at: float, **fields) -> Path:
    info = {"agent": "claude-code", "mode": "free", "created_at": created_at, **fields}
    return write_run(study / name, **info).root


def _request(study: Path, slot: RunSlot, queued_at: float) -> dict:
    return {
        "study_dir": str(study),
        "queued_at": queued_at,
        "request": {
            "task": slot.task,
            "agent": slot.agent,
            "model": slot.model,
            "seed": slot.seed,
            "driver": slot.driver,
            "mode": slot.mode,
        },
    }


def test_slots_differing_only_by_driver_find_their_own_runs(tmp_path: Path) -> None:
    now = time.time()
    opus = RunSlot("arith-lite", "tiny", "claude-code", "claude-opus-4-1", "free", 0, 0)
    default = RunSlot("arith-lite", "tiny", "claude-code", None, "free", 0, 0)
    # The opus run was created first: matched without the driver, both slots would take it.
    opus_dir = _run(tmp_path, "r-opus", now + 1, driver="claude-opus-4-1")
    default_dir = _run(tmp_path, "r-default", now + 2, driver="claude-sonnet-4-5")
    assert find_run_dir(_request(tmp_path, default, now)) == default_dir
    assert find_run_dir(_request(tmp_path, opus, now)) == opus_dir
    sonnet = RunSlot("arith-lite", "tiny", "claude-code", "claude-haiku-4-5", "free", 0, 0)
    assert find_run_dir(_request(tmp_path, sonnet, now)) is None


def test_an_agent_without_an_llm_matches_without_a_driver(tmp_path: Path) -> None:
    now = time.time()
    run = _run(tmp_path, "r", now + 1, agent="reference-sft", driver=None, mode=None)
    slot = RunSlot("arith-lite", "tiny", "reference-sft", None, None, 0, 0)
    assert find_run_dir(_request(tmp_path, slot, now)) == run
