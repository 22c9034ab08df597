"""A study's runs share their node: each agent is capped at 1/k of what a plain run gets,
k the runs of the study the node holds at once, so that together they take no more than one
run alone (a plain run takes 75% of the memory and half the free disk)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from support import AGENTS

from agent2rl.files import read_json, write_json_atomic
from agent2rl.sandbox.limits import machine_caps
from agent2rl.study.attempt import REQUEST, RESULT, STARTED, run_attempt, runs_per_node
from agent2rl.study.executor import _request
from agent2rl.study.spec import RunSlot, StudySpec


def test_runs_per_node_outside_ray_follows_this_machine() -> None:
    cpus = os.cpu_count() or 1
    assert runs_per_node({"cpus": 1}) == cpus
    assert runs_per_node({"cpus": 1, "max_concurrent": 1}) == 1
    assert runs_per_node({"cpus": cpus * 4}) == 1  # a run bigger than the node: alone
    assert runs_per_node({"cpus": 0.5, "max_concurrent": 3}) == min(3, cpus * 2)
    # GPUs asked for on a node without any: one at a time, never zero.
    assert runs_per_node({"cpus": 1, "gpus": 1}) == 1
    assert runs_per_node({}) == cpus


@pytest.mark.slow
def test_a_study_attempt_caps_its_agent_at_its_share(tmp_path: Path) -> None:
    """A real attempt (the worker's run process, a real run of a quick agent): its run.json
    records caps of 1/k of a plain run's."""
    study = tmp_path / "study"
    spec = StudySpec.model_validate(
        {"name": "s", "tasks": ["arith-lite"], "agents": [str(AGENTS / "quick.toml")],
         "budget": "60s", "sandbox": "none", "cpus_per_run": 1}
    )  # fmt: skip
    slot = RunSlot("arith-lite", "tiny", str(AGENTS / "quick.toml"), None, None, 0, 0)
    adir = study / "attempts" / "001-a1"
    adir.mkdir(parents=True)
    write_json_atomic(adir / REQUEST, _request(spec, slot, study, time.time(), 0.0, 4))
    result = run_attempt(str(adir))
    console = (adir / "console.log").read_text(errors="replace")[-3000:]
    # The machine may be loaded: a run stopped at its deadline has its caps all the same.
    assert result["run_status"] in ("completed", "deadline"), (result, console)
    k = read_json(adir / STARTED)["share"]
    assert k == min(4, os.cpu_count() or 1)
    caps = read_json(Path(result["run_dir"]) / "run.json")["caps"]
    alone = machine_caps(study)
    assert caps["memory_bytes"] * k <= alone.memory_bytes
    assert caps["disk_bytes"] * k <= alone.disk_bytes * 1.05  # the disk moves meanwhile
    if alone.max_files is not None:
        assert caps["max_files"] * k <= alone.max_files * 1.05
    assert (adir / RESULT).is_file()
