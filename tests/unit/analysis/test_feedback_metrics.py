"""A run of the validation feedback protocol in the report, metrics.json, the results ledger and
``compare``: its score is the one end-of-run grade on the private split (not a maximum over the
validation scores), the protocol is said, and runs of the two protocols are never one mean."""

from __future__ import annotations

import json
from pathlib import Path

from agent2rl.analysis import compute_metrics, list_runs, record_run, write_report
from agent2rl.analysis.dashboard.compare import aggregate
from agent2rl.analysis.dashboard.runset import StudyRun, group_runs
from agent2rl.grading.final import FinalGrade
from agent2rl.grading.ledger import Ledger
from agent2rl.rundir import RunPaths
from tests.support.rundirs import write_run

START = 1_700_000_000.0


def _items(path: Path, scores: list[float]) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        "".join(json.dumps({"id": f"q{i}", "score": s}) + "\n" for i, s in enumerate(scores))
    )
    return path


def _run(root: Path, feedback: str, grade: FinalGrade | None) -> RunPaths:
    """A finished run: private baseline 50, validation baseline 40, submissions scoring 60 and
    70 (on validation under ``validation``), and the end-of-run ``grade``."""
    paths = write_run(
        root, task_version="2", agent="reference-sft", budget_s=600.0, created_at=START - 10,
        start=START, deadline=START + 600, ended_at=START + 600, status="deadline",
        feedback=feedback,
    )  # fmt: skip
    split = "validation" if feedback == "validation" else "private"
    with Ledger(paths.ledger) as ledger:
        _items(root / "grading/baseline/items.jsonl", [1.0, 0.0] * 10)
        ledger.set_meta("baseline", {"score": 50.0, "n_items": 20, "eval_hash": "P",
                                     "items_path": "grading/baseline/items.jsonl"})  # fmt: skip
        if feedback == "validation":
            _items(root / "grading/baseline-validation/items.jsonl", [1.0, 0.0, 0.0, 0.0, 1.0] * 4)
            ledger.set_meta("feedback", "validation")
            ledger.set_meta("validation_baseline", {"score": 40.0, "n_items": 20, "eval_hash": "P",
                            "items_path": "grading/baseline-validation/items.jsonl"})  # fmt: skip
        for i, score in enumerate((60.0, 70.0), 1):
            sid = ledger.add_submission(f"output/v{i}", "h", None, at=START + 100 * i, split=split)
            rel = f"grading/submissions/{sid:04d}/items.jsonl"
            _items(root / rel, [1.0] * int(score / 5) + [0.0] * (20 - int(score / 5)))
            ledger.update_submission(
                sid, status="graded", score=score, n_items=20, items_path=rel, eval_hash="P"
            )
        if grade is not None:
            if grade.items_path:
                _items(root / grade.items_path, [1.0] * 11 + [0.0] * 9)
            ledger.set_meta("final_grade", grade.to_dict())
    return paths


GRADED = FinalGrade(
    status="graded", submission_id=2, selected_by="best_validation", validation_score=70.0,
    score=55.0, n_items=20, items_path="grading/final/items.jsonl", eval_hash="P",
)  # fmt: skip


def test_the_score_is_the_end_of_run_private_grade(tmp_path: Path) -> None:
    paths = _run(tmp_path / "val", "validation", GRADED)
    m = compute_metrics(paths)
    assert m.feedback == "validation"
    assert m.best_score == 55.0 and m.best_submission_id == 2, "the private grade, not 70"
    assert m.improvement == 5.0 and m.baseline == 50.0
    assert m.final_score == 55.0 and m.final_submission_id == 2
    assert m.validation_baseline == 40.0 and m.selected_validation_score == 70.0
    assert m.selected_by == "best_validation" and m.final_grade_status == "graded"
    assert [p.score for p in m.trajectory] == [60.0, 70.0]  # what the agent saw
    write_report(paths)
    md = (paths.report / "report.md").read_text()
    assert "| Feedback protocol | validation (MLE-bench's, not the paper's)" in md
    assert "validation 70.00, private 55.00" in md
    assert "selected on validation (best on validation)" in md
    assert "feedback protocol" in (paths.report / "report.html").read_text()


def test_a_missing_end_of_run_grade_is_said_not_scored(tmp_path: Path) -> None:
    pending = FinalGrade(status="pending", note="the run was interrupted")
    m = compute_metrics(_run(tmp_path / "val", "validation", pending))
    assert m.best_score is None and m.improvement is None and m.final_score is None
    assert m.final_grade_status == "pending" and m.final_grade_note == "the run was interrupted"
    m = compute_metrics(_run(tmp_path / "none", "validation", None))
    assert m.best_score is None and m.final_grade_status is None


def test_the_protocols_are_recorded_and_never_pooled(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    for name, feedback, grade in (("a", "private", None), ("b", "validation", GRADED)):
        paths = _run(runs / name, feedback, grade)
        record_run(runs, paths.root, write_report(paths))
    rows = {r["run_id"]: r for r in list_runs(runs)}
    assert rows["a"]["feedback"] == "private" and rows["a"]["best"] == 70.0
    assert rows["b"]["feedback"] == "validation" and rows["b"]["best"] == 55.0
    assert rows["b"]["validation_score"] == 70.0 and rows["a"]["validation_score"] is None
    groups = aggregate(list(rows.values()))
    assert sorted((g["feedback"], g["runs"], g["mean_best"]) for g in groups) == [
        ("private", 1, 70.0),
        ("validation", 1, 55.0),
    ]
    assert (
        "| Feedback protocol | private (the paper's)"
        in (runs / "a" / "report" / "report.md").read_text()
    )
    # the dashboard's groups (leaderboard, pass@k, heatmap) too (both ran unsandboxed)
    grouped = group_runs([StudyRun(compute_metrics(RunPaths(runs / n))) for n in ("a", "b")])
    assert sorted(k.stack.label for k in grouped) == [
        "reference-sft · feedback: validation · sandbox: none",
        "reference-sft · sandbox: none",
    ]
