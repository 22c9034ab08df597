"""Evidence read from a run directory: the agent's progress lines and the token timeline."""

from __future__ import annotations

import json
from datetime import datetime

from support.studyruns import make_run

from agent2rl.analysis.dashboard.evidence import log_evidence, token_timeline


def test_progress_lines_become_timed_evidence(tmp_path) -> None:
    start = datetime(2026, 1, 2, 10, 0, 0).timestamp()
    (tmp_path / "agent.log").write_text(
        "\n".join(
            [
                "[10:00:05] round 1/3: training 30s",
                "[10:00:40] SFT: 60 steps, loss 2.1",
                "[10:01:00] SFT: 40 more steps",  # same family: not repeated
                '{"type": "assistant", "text": "I will use GRPO"}',  # JSON events: not read
                "[10:01:10] 50s left: no time for another GRPO round",  # says it did not run
                "[10:01:20] done: best (/runs/x-reference-grpo-1a2b/output/v1)",  # a path
                "[10:02:00] GRPO round 1: 40s at lr=1e-5",
                "x" * 400 + " GRPO",  # too long to be a progress line
            ]
        )
    )
    m = make_run().metrics.model_copy(update={"start": start})
    ev = log_evidence(tmp_path, m)
    assert [(e.t, sorted(e.methods), e.ref) for e in ev] == [
        (40.0, ["sft"], "agent.log:2"),
        (120.0, ["rl"], "agent.log:7"),
    ]


def test_token_timeline_is_cumulative(tmp_path) -> None:
    (tmp_path / "record").mkdir()
    lines = [
        {"time": 1010.0, "input_tokens": 100, "output_tokens": 20},
        {"time": 1005.0, "input_tokens": 50, "output_tokens": None},
        {"time": 1030.0, "input_tokens": 10, "output_tokens": 5},
    ]
    (tmp_path / "record" / "llm_usage.jsonl").write_text(
        "".join(json.dumps(x) + "\n" for x in lines) + "{torn"
    )
    m = make_run().metrics  # start 1000
    assert token_timeline(tmp_path, m) == ((5.0, 50), (10.0, 170), (30.0, 185))
    assert token_timeline(tmp_path / "nope", m) == ()


def test_metrics_of_another_harness_version_still_load(tmp_path) -> None:
    from agent2rl.analysis.dashboard.evidence import read_metrics

    m = make_run(scores=[12.0, None]).metrics
    data = m.to_json()
    data["a_field_from_a_newer_version"] = [1, 2]
    data["trajectory"][0]["another_new_field"] = {"x": 1}
    path = tmp_path / "metrics.json"
    path.write_text(json.dumps(data))
    loaded = read_metrics(path)
    assert loaded is not None and loaded.best_score == 12.0
    assert len(loaded.trajectory) == 2
    path.write_text("{not json")
    assert read_metrics(path) is None
    assert read_metrics(tmp_path / "absent.json") is None
