"""End to end on an interactive task: ``agent2rl run`` with the reference GRPO agent on a
small alfworld-lite. The agent trains on walkthroughs, plays episodes through the rollout
service (recorded), submits, and the report shows the rollouts and the per-type scores."""

from __future__ import annotations

import json

import pytest
from support.cli import LITE_OPTS, only_run, run_cli

from agent2rl.rollout import EnvLedger
from agent2rl.tasks.alfworld.generate_lite import TASK_TYPES


@pytest.mark.slow
def test_reference_grpo_run_on_alfworld_lite(tmp_path, alfworld_lite, tiny) -> None:
    runs = tmp_path / "runs"
    opts = [x for k, v in LITE_OPTS.items() for x in ("--task-opt", f"{k}={v}")]
    r = run_cli(
        ["run", "--task", "alfworld-lite", *opts, "--agent", "reference-grpo"]
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
    assert env["episodes"] >= 8 and env["steps"] >= env["episodes"]
    with EnvLedger(paths.env_db) as led:
        assert sum(s.steps for s in led.sessions()) == env["steps"]
    assert set(m["group_scores"]["baseline"]) == set(TASK_TYPES)
    assert set(m["group_scores"]["best"]) == set(TASK_TYPES)
    html = (paths.report / "report.html").read_text()
    assert "Environment rollouts" in html and "Scores by task type" in html
    md = (paths.report / "report.md").read_text()
    assert f"{env['steps']:,} environment steps" in md
    # The rollout service was stopped with the run.
    service = json.loads((paths.env_service / "service.json").read_text())
    import psutil

    assert not psutil.pid_exists(service["pid"])
