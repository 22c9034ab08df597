"""``agent2rl run --feedback validation`` end to end through the real CLI: the agent is answered
validation scores, is killed at the deadline after its last submission, and the run's end still
grades its best on validation on the private split; the report, metrics.json and the results
ledger say which protocol the run used."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from support import AGENTS
from support.cli import only_run, run_cli

from agent2rl.analysis import list_runs
from agent2rl.files import read_jsonl
from agent2rl.grading.final import read_final_grade
from agent2rl.grading.ledger import Ledger
from agent2rl.rundir import RunInfo


@pytest.mark.slow
def test_deadline_killed_agent_is_still_graded_on_private(tmp_path, arith) -> None:
    task, prepared = arith
    runs = tmp_path / "runs"
    r = run_cli(
        [
            "run",
            "--task",
            "arith-lite",
            "--agent",
            str(AGENTS / "validation_submitter.toml"),
            "--budget",
            "90s",
            "--runs-dir",
            str(runs),
            "--sandbox",
            "none",
            "--feedback",
            "validation",
        ]
    )
    assert r.returncode == 0, r.stdout + r.stderr
    paths = only_run(runs)
    info = RunInfo.load(paths)
    assert info.status == "deadline" and info.feedback == "validation"
    log = paths.agent_log.read_text()
    assert "sleeping until the deadline" in log, log[-3000:]
    answers = [
        json.loads(line.split("answer ", 1)[1]) for line in log.splitlines() if "answer {" in line
    ]
    assert len(answers) == 2 and {a["split"] for a in answers} == {"validation"}
    assert "validation feedback" in (paths.workspace / "instructions.md").read_text()

    with Ledger(paths.ledger) as ledger:
        subs = ledger.submissions()
        grade = read_final_grade(ledger)
        baseline = ledger.get_meta("baseline")
    best = max(subs, key=lambda s: (s.score, s.id))  # the latest on a tie
    assert grade is not None and grade.status == "graded", grade
    assert grade.submission_id == best.id and grade.selected_by == "best_validation"
    private_ids = {s.id for s in task.samples(prepared, "private")}
    assert {row["id"] for row in read_jsonl(paths.root / grade.items_path)} == private_ids

    metrics = json.loads((paths.report / "metrics.json").read_text())
    assert metrics["feedback"] == "validation"
    assert metrics["best_score"] == grade.score and metrics["best_submission_id"] == best.id
    assert metrics["baseline"] == baseline["score"]
    assert metrics["selected_validation_score"] == best.score
    assert "| Feedback protocol | validation" in (paths.report / "report.md").read_text()
    (row,) = list_runs(runs)
    assert row["feedback"] == "validation" and row["best"] == grade.score
    assert row["validation_score"] == best.score
    compared = subprocess.run(
        [sys.executable, "-m", "agent2rl.cli", "compare", "--runs-dir", str(runs)],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "300"},  # a table cell is not wrapped
    )
    assert compared.returncode == 0 and "feedback: validation" in compared.stdout


def test_bad_feedback_is_one_line_and_writes_nothing(tmp_path) -> None:
    runs = tmp_path / "runs"
    r = run_cli(
        ["run", "--task", "arith-lite", "--agent", "reference-sft", "--runs-dir", str(runs)]
        + ["--feedback", "test", "--sandbox", "none"]
    )
    assert r.returncode != 0
    assert "bad --feedback 'test': use private or validation" in r.stderr + r.stdout
    assert "Traceback" not in r.stderr
    assert not runs.exists() or not any(d.is_dir() for d in runs.iterdir())
