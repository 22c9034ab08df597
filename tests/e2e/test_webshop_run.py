"""End to end on webshop-lite: ``agent2rl run`` with the reference GRPO agent on a small
catalog. The agent trains on the expert walkthroughs, shops through the rollout service
(recorded with its step kinds), submits, and the report shows the rollouts and the scores by
category."""

from __future__ import annotations

import json

import pytest
from support.cli import only_run, run_cli

from agent2rl.rollout import EnvLedger

SMALL = {"n_products": "60", "n_train": "40", "n_eval": "6", "n_validation": "6"}


@pytest.mark.slow
def test_reference_grpo_run_on_webshop_lite(tmp_path, tiny) -> None:
    runs = tmp_path / "runs"
    opts = [x for k, v in SMALL.items() for x in ("--task-opt", f"{k}={v}")]
    r = run_cli(
        ["run", "--task", "webshop-lite", *opts, "--agent", "reference-grpo"]
        + ["--model", "tiny", "--budget", "180s", "--runs-dir", str(runs)],
        timeout=900,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    paths = only_run(runs)
    log = paths.agent_log.read_text()
    assert "SFT warm-up on" in log and "GRPO:" in log, log[-3000:]
    m = json.loads((paths.report / "metrics.json").read_text())
    assert m["valid_submissions"] >= 2, m["trajectory"]
    env = m["env_usage"]
    # a round cut off by the deadline leaves opened episodes without steps
    assert env["episodes"] >= 8 and env["steps"] > 0
    # the shop's step kinds reach the run's metrics
    assert set(env["by_kind"]) <= {"search", "click", "purchase"} and env["by_kind"]
    assert sum(env["by_kind"].values()) == env["steps"]
    with EnvLedger(paths.env_db) as led:
        assert sum(s.steps for s in led.sessions()) == env["steps"]
    assert m["group_scores"]["baseline"], m["group_scores"]
    md = (paths.report / "report.md").read_text()
    assert f"{env['steps']:,} environment steps" in md and "Steps by kind:" in md
