"""Per-run metrics, reports and the results ledger, on real run directories (SQLite + git)."""

from __future__ import annotations

import html
import json
import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from support.charts import chart_specs
from support.rundirs import write_run

from agent2rl.analysis import (
    RunMetrics,
    compute_metrics,
    list_runs,
    record_run,
    write_report,
)
from agent2rl.analysis.report.charts import MARKERS
from agent2rl.grading.ledger import Ledger
from agent2rl.recording.snapshot import EMPTY_TREE
from agent2rl.rollout.env_record import EnvLedger
from agent2rl.rundir import RunPaths
from agent2rl.statistics import load_item_scores

START = 1_000_000.0
BUDGET = 600.0
EVIL_PATH = "output/<script>alert(1)</script>"


# -- helpers -----------------------------------------------------------------------------------
def _git_env(home: Path) -> dict[str, str]:
    return {
        **os.environ,
        "GIT_AUTHOR_NAME": "test",
        "GIT_AUTHOR_EMAIL": "test@example.com",
        "GIT_COMMITTER_NAME": "test",
        "GIT_COMMITTER_EMAIL": "test@example.com",
        "GIT_CONFIG_NOSYSTEM": "1",
        "HOME": str(home),
    }


class CodeRepo:
    """A bare repo like ``record/code.git``, committed into from a scratch work tree."""

    def __init__(self, git_dir: Path, work: Path) -> None:
        self.git_dir, self.work = git_dir, work
        work.mkdir(parents=True)
        self.env = _git_env(work.parent)
        subprocess.run(["git", "init", "-q", "--bare", str(git_dir)], check=True, env=self.env)

    def _git(self, *args: str) -> str:
        cmd = ["git", f"--git-dir={self.git_dir}", f"--work-tree={self.work}", *args]
        return subprocess.run(cmd, check=True, env=self.env, capture_output=True, text=True).stdout

    def commit(self, files: dict[str, str | bytes | None]) -> str:
        """Write (str/bytes) or delete (None) files, commit everything, return the commit id."""
        for name, content in files.items():
            path = self.work / name
            if content is None:
                path.unlink()
            elif isinstance(content, bytes):
                path.write_bytes(content)
            else:
                path.write_text(content)
        self._git("add", "-A")
        self._git("commit", "-q", "--allow-empty", "-m", "snapshot")
        return self._git("rev-parse", "HEAD").strip()


def write_items(path: Path, scores: list[float]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        for i, s in enumerate(scores):
            row = {"id": f"q{i}", "prediction": "p", "target": "t", "correct": s >= 1.0, "score": s}
            fh.write(json.dumps(row) + "\n")


@dataclass
class Sub:
    t: float
    items: list[float] | None = None  # per-item scores; None: no items file
    status: str = "graded"
    snapshot: str | None = None
    is_copy: bool = False
    duplicate_of: int | None = None
    error: str | None = None
    path: str = "output/model"
    score: float | None = field(default=None)
    eval_hash: str | None = "E1"


def make_run(
    root: Path,
    baseline: list[float] | None,
    subs: list[Sub],
    *,
    ended_after: float = 300.0,
    rejections: list[tuple[str, int, str]] = (),
    with_ledger: bool = True,
    baseline_hash: str | None = "E1",
) -> RunPaths:
    """A finished run directory: run.json, ledger.db, per-item files under grading/. A
    ``baseline_hash`` of None records the baseline without one (an older ledger)."""
    paths = write_run(
        root,
        agent="scripted",
        budget_s=BUDGET,
        created_at=START - 50,
        driver="reference",
        start=START,
        deadline=START + BUDGET,
        ended_at=START + ended_after,
        status="completed",
    )
    if not with_ledger:
        return paths
    with Ledger(paths.ledger) as ledger:
        if baseline is not None:
            write_items(paths.baseline_dir / "items.jsonl", baseline)
            record = {
                "score": 100 * sum(baseline) / len(baseline),
                "n_items": len(baseline),
                "items_path": "grading/baseline/items.jsonl",
                "eval_seconds": 1.0,
            }
            if baseline_hash is not None:
                record["eval_hash"] = baseline_hash
            ledger.set_meta("baseline", record)
        for sub in subs:
            sid = ledger.add_submission(sub.path, "h", "e", snapshot=sub.snapshot, at=START + sub.t)
            values: dict = {
                "status": sub.status,
                "is_copy": sub.is_copy,
                "duplicate_of": sub.duplicate_of,
                "error": sub.error,
                "eval_hash": sub.eval_hash,
            }
            if sub.items is not None:
                rel = f"grading/submissions/{sid:04d}/items.jsonl"
                write_items(root / rel, sub.items)
                values.update(items_path=rel, n_items=len(sub.items))
            if sub.status == "graded":
                score = (
                    sub.score if sub.score is not None else 100 * sum(sub.items) / len(sub.items)
                )
                values["score"] = score
            ledger.update_submission(sid, **values)
        for path, code, reason in rejections:
            ledger.add_rejection(path, code, reason)
    return paths


HALF = [1.0, 0.0] * 20  # 40 items, baseline score 50


@pytest.fixture(scope="module")
def rich(tmp_path_factory: pytest.TempPathFactory) -> tuple[RunPaths, list[str]]:
    """Five submissions (failed first, a copy, a duplicate), three snapshots, resources."""
    root = tmp_path_factory.mktemp("runs") / "run-rich"
    repo = CodeRepo(root / "record" / "code.git", root.parent / "scratch")
    c1 = repo.commit({"a.py": "x = 1\ny = 2\nz = 3\n", "b.txt": "one\ntwo\n"})
    # one line of a.py changed, two appended, and a binary file that numstat must ignore
    c2 = repo.commit(
        {"a.py": "x = 1\ny = 20\nz = 3\nu = 4\nv = 5\n", "w.bin": b"\x00\x01\x02" * 100}
    )
    c3 = repo.commit({"b.txt": None})
    seventy = [1.0] * 28 + [0.0] * 12
    paths = make_run(
        root,
        HALF,
        [
            Sub(t=30, status="failed", snapshot=c1, error="CUDA <b>OOM</b>", items=None),
            Sub(t=60, items=HALF, snapshot=c2, path=EVIL_PATH),
            Sub(t=120, items=seventy, snapshot=None),
            Sub(t=180, items=[1.0] * 24 + [0.0] * 16, snapshot=c3, is_copy=True),
            Sub(t=240, items=seventy, duplicate_of=3, snapshot=c3),
        ],
        rejections=[(EVIL_PATH, 400, "path escapes output/"), (None, 401, "bad token")],
    )
    paths.record.mkdir(exist_ok=True)
    samples = [
        {"t": START + i, "cpu_percent": 10.0 * i, "rss_bytes": 1000 * i, "n_procs": i}
        for i in range(1, 5)
    ]
    paths.resources.write_text("".join(json.dumps(s) + "\n" for s in samples) + '{"t": 1')
    return paths, [c1, c2, c3]


# -- metrics -----------------------------------------------------------------------------------
def test_identical_to_baseline_is_within_noise(tmp_path: Path) -> None:
    m = compute_metrics(make_run(tmp_path / "r", HALF, [Sub(t=60, items=HALF)]))
    assert m.improvement == 0.0
    assert m.improvement_ci95 == (0.0, 0.0)
    assert m.within_noise is True
    assert m.time_to_first_improvement is None
    assert m.n_items_paired == 40


def test_clearly_better_excludes_zero(tmp_path: Path) -> None:
    better = [1.0, 1.0] * 18 + [1.0, 0.0] * 2  # 38 of 40 right; never worse on an item
    m = compute_metrics(make_run(tmp_path / "r", HALF, [Sub(t=90, items=better)]))
    assert m.improvement == pytest.approx(45.0)
    lo, hi = m.improvement_ci95
    assert 0 < lo < 45 < hi
    assert m.within_noise is False
    assert m.best_score_ci95[0] < 95 < m.best_score_ci95[1] <= 100
    assert m.time_to_first_improvement == pytest.approx(90.0)


def test_each_submission_gets_intervals_and_a_noise_label(tmp_path: Path) -> None:
    better = [1.0] * 40  # 100 against a baseline of 50: beyond noise
    paths = make_run(tmp_path / "run", HALF, [Sub(t=10, items=HALF), Sub(t=20, items=better)])
    m = compute_metrics(paths)
    same, up = m.trajectory
    assert same.improvement_ci95 == (0.0, 0.0) and same.within_noise is True
    assert up.within_noise is False and up.improvement_ci95[0] > 0
    assert up.score_ci95 == (100.0, 100.0) and up.comparable is True
    write_report(paths)
    md = (paths.report / "report.md").read_text()
    assert "| +0.00 [+0.00, +0.00] |" in md and "within noise" in md and "beyond noise" in md


def test_a_score_under_other_eval_settings_is_not_compared(tmp_path: Path) -> None:
    better = [1.0] * 40
    paths = make_run(tmp_path / "run", HALF, [Sub(t=10, items=better, eval_hash="E2")])
    m = compute_metrics(paths)
    (tr,) = m.trajectory
    assert tr.comparable is False and tr.improvement_ci95 is None
    assert tr.score_ci95 == (100.0, 100.0)  # its own interval still holds
    assert m.best_score == 100.0 and m.improvement is None
    assert m.within_noise is None and m.eval_hash == "E1"
    assert m.time_to_first_improvement is None  # above the baseline, but not comparable
    write_report(paths)
    saved = json.loads((paths.report / "metrics.json").read_text())
    assert saved["improvement"] is None and saved["trajectory"][0]["comparable"] is False
    md = (paths.report / "report.md").read_text()
    assert "| Improvement | not comparable: the best was graded under other evaluation" in md
    assert "not comparable: this submission was graded under other evaluation settings" in md
    assert "+50.00" not in md
    page = (paths.report / "report.html").read_text()
    assert "not comparable: the best was graded under other evaluation settings" in page


@pytest.mark.parametrize(
    "baseline_hash,sub_hash,whose",
    [(None, "E1", "the baseline's"), ("E1", None, "the best's")],
    ids=["baseline-without-hash", "submission-without-hash"],
)
def test_a_score_with_unrecorded_eval_settings_is_not_compared(
    tmp_path: Path, baseline_hash: str | None, sub_hash: str | None, whose: str
) -> None:
    """Unknown settings are never assumed to match, on either side (the grading service
    answers the same: see test_grading_service)."""
    paths = make_run(
        tmp_path / "run",
        HALF,
        [Sub(t=10, items=[1.0] * 40, eval_hash=sub_hash)],
        baseline_hash=baseline_hash,
    )
    m = write_report(paths)
    (tr,) = m.trajectory
    assert tr.comparable is False and tr.improvement_ci95 is None
    assert m.improvement is None and m.within_noise is None and m.n_items_paired is None
    assert m.time_to_first_improvement is None and m.eval_hash == baseline_hash
    saved = json.loads((paths.report / "metrics.json").read_text())
    assert saved["improvement"] is None and saved["trajectory"][0]["comparable"] is False
    reason = f"not comparable: {whose} evaluation settings were not recorded"
    assert f"| Improvement | {reason} |" in (paths.report / "report.md").read_text()
    assert html.escape(reason) in (paths.report / "report.html").read_text()


def test_missing_item_files_give_no_interval(tmp_path: Path) -> None:
    paths = make_run(tmp_path / "r", HALF, [Sub(t=60, items=None, score=80.0)])
    m = compute_metrics(paths)
    assert m.improvement == pytest.approx(30.0)
    assert m.improvement_ci95 is None and m.within_noise is None
    assert load_item_scores(paths.root / "nope.jsonl") is None


def test_submission_sequence_metrics(rich: tuple[RunPaths, list[str]]) -> None:
    m = compute_metrics(rich[0])
    assert m.submissions == 5 and m.valid_submissions == 4
    assert m.valid_submission_rate == pytest.approx(0.8)
    assert m.first_valid_idx == 2  # the first submission failed
    assert m.baseline == pytest.approx(50.0)
    assert m.best_score == pytest.approx(70.0)
    assert m.best_submission_id == 3  # the later duplicate ties and loses
    assert m.time_to_first_improvement == pytest.approx(120.0)  # #2 only equals baseline
    assert m.time_to_best == pytest.approx(120.0)
    # The reference's: strict increases over every score, the failed one as 0: 0 50 70 60 70.
    assert m.monotonic_ratio == pytest.approx(3 / 4)
    assert m.non_decreasing_ratio == pytest.approx(2 / 3)  # 50 -> 70 -> 60 -> 70
    assert m.graded_submission_rate == pytest.approx(0.8) and m.first_graded_idx == 2
    assert m.copy_model_count == 1 and m.duplicate_count == 1
    assert m.rejected_attempts == 2
    assert m.time_used_ratio == pytest.approx(0.5)
    assert m.last_submit_to_deadline == pytest.approx(BUDGET - 240)
    assert m.last_submit_gap == pytest.approx(300 - 240)  # the reference's: to the run's end
    assert m.duration_s == pytest.approx(300.0)
    assert [t.best_so_far for t in m.trajectory] == [None, 50.0, 70.0, 70.0, 70.0]
    assert [t.t for t in m.trajectory] == [30, 60, 120, 180, 240]
    assert m.trajectory[0].error == "CUDA <b>OOM</b>"
    assert m.resources.peak_rss_bytes == 4000  # the truncated last line is skipped
    assert m.resources.mean_cpu_percent == pytest.approx(25.0)
    json.dumps(m.to_json())  # JSON-serialisable as is
    assert RunMetrics.model_validate_json(json.dumps(m.to_json())) == m  # and back


#: Every key of metrics.json (the shape the report has always written; extend, never rename).
METRICS_KEYS = {
    "run_id", "task", "task_version", "task_options", "decoding", "level", "agent", "driver",
    "mode",
    "model", "status", "schema_version",
    "error", "budget_s", "start", "deadline", "ended_at", "duration_s", "sandbox",
    "agent_uid", "network", "egress", "caps", "cap_mechanism", "baseline",
    "baseline_n_items", "best_score", "best_submission_id", "eval_hash", "improvement",
    "improvement_ci95", "best_score_ci95", "within_noise", "n_items_paired",
    "final_submission_id", "final_score", "final_improvement", "final_improvement_ci95",
    "submissions",
    "valid_submissions", "valid_submission_rate", "first_valid_idx",
    "time_to_first_improvement", "time_to_best", "monotonic_ratio", "copy_model_count",
    "duplicate_count", "rejected_attempts", "time_used_ratio", "last_submit_gap",
    "graded_submission_rate", "first_graded_idx", "non_decreasing_ratio",
    "last_submit_to_deadline", "first_valid_delay", "budget_used_ratio",
    "code_changes", "total_lines_changed", "trajectory", "rejections", "resources",
    "llm_usage", "token_budget", "env_usage", "group_scores", "judge", "search", "agent_log",
    "methods",
    "mode_flags", "not_derived_submissions", "chat_template_submissions", "contamination",
    "integrity_flags", "feedback", "validation_baseline", "selected_validation_score",
    "selected_by", "final_grade_status", "final_grade_note", "provider_tools",
}  # fmt: skip
TRAJECTORY_KEYS = {
    "id", "t", "score", "best_so_far", "status", "is_copy", "duplicate_of", "error", "path",
    "eval_seconds", "eval_hash", "score_ci95", "improvement_ci95", "within_noise", "comparable",
    "failure_kind", "retry_of", "identity", "timings",
}  # fmt: skip


def test_metrics_json_keeps_its_shape(rich: tuple[RunPaths, list[str]]) -> None:
    paths = rich[0]
    write_report(paths)
    saved = json.loads((paths.report / "metrics.json").read_text())
    assert set(saved) == METRICS_KEYS
    assert all(set(tr) == TRAJECTORY_KEYS for tr in saved["trajectory"])
    assert set(saved["code_changes"][0]) == {"id", "snapshot", "base", "added", "removed"}
    assert set(saved["rejections"][0]) == {"id", "t", "path", "http_status", "reason"}
    assert saved["improvement_ci95"] == list(compute_metrics(paths).improvement_ci95)
    assert RunMetrics.read(paths.report / "metrics.json") == compute_metrics(paths)


def test_agent_view_and_llm_usage_reach_metrics_and_report(tmp_path: Path) -> None:
    paths = make_run(tmp_path / "r", HALF, [Sub(t=60, items=HALF)])
    paths.record.mkdir(exist_ok=True)
    (paths.record / "agent.json").write_text(
        json.dumps({"log": {"events": 3}, "methods": ["sft"], "mode_flags": ["uses <b>grpo</b>"]})
    )
    usage = [
        {"model": "m1", "input_tokens": 1000, "output_tokens": 50, "cost_usd": 0.01},
        {"model": "m2", "input_tokens": 5, "output_tokens": 1, "status": 429, "refused": True},
    ]
    paths.llm_usage.write_text("".join(json.dumps(u) + "\n" for u in usage))
    m = write_report(paths)
    assert m.agent_log == {"events": 3} and m.methods == ["sft"]
    assert m.llm_usage.requests == 2 and m.llm_usage.refused == 1
    assert m.llm_usage.total_tokens == 1056 and set(m.llm_usage.by_model) == {"m1", "m2"}
    md = (paths.report / "report.md").read_text()
    assert "2 requests (1 refused, 1 errors), 1,005 input tokens" in md
    assert "**Mode check:** uses &lt;b&gt;grpo&lt;/b&gt;" in md
    saved = json.loads((paths.report / "metrics.json").read_text())
    assert saved["llm_usage"]["by_model"]["m1"]["input_tokens"] == 1000


def test_code_changes_match_numstat(rich: tuple[RunPaths, list[str]]) -> None:
    c1, c2, c3 = rich[1]
    changes = compute_metrics(rich[0]).code_changes
    got = [(c.id, c.base, c.added, c.removed) for c in changes]
    assert got == [
        (1, EMPTY_TREE, 5, 0),  # a.py (3) + b.txt (2)
        (2, c1, 3, 1),  # one line changed, two added; w.bin is binary and ignored
        (3, None, None, None),  # no snapshot
        (4, c2, 0, 2),  # b.txt deleted
        (5, c3, 0, 0),  # same snapshot again
    ]
    assert compute_metrics(rich[0]).total_lines_changed == 11


def test_time_used_ratio_is_not_capped_budget_used_ratio_is(tmp_path: Path) -> None:
    # The reference's (core/metrics.py) divides without clipping; agent2rl's is clipped.
    m = compute_metrics(make_run(tmp_path / "r", HALF, [], ended_after=BUDGET + 100))
    assert m.time_used_ratio == pytest.approx((BUDGET + 100) / BUDGET)
    assert m.budget_used_ratio == 1.0


# -- report ------------------------------------------------------------------------------------
def test_html_report_plot_anchors_and_escaping(rich: tuple[RunPaths, list[str]]) -> None:
    write_report(rich[0])
    out = rich[0].report
    page = (out / "report.html").read_text()
    score = chart_specs(page)["score"]
    labels = [s["label"] for s in score["series"]]
    assert "best so far" in labels and score["hline_label"] == "baseline"
    points = {s["label"]: s["y"] for s in score["series"] if s["kind"] == "points"}
    assert sum(y is not None for ys in points.values() for y in ys) == 5
    assert sum(y is not None for y in points[MARKERS["failed"][0]]) == 1
    assert sum(y is not None for y in points[MARKERS["copy"][0]]) == 1
    for sid in range(1, 6):
        assert f'href="#diff-{sid}"' in page and f"#diff-{sid}" in score["links"]
        assert page.count(f'<details id="diff-{sid}">') == 1
    # the diff of #2 is embedded, escaped, with its +/- lines
    assert '<span class="a">+y = 20</span>' in page and '<span class="d">-y = 2</span>' in page
    # agent-controlled strings never reach the page as markup
    assert "<script>alert" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<b>OOM</b>" not in page
    # self-contained: nothing loaded from elsewhere
    assert not re.search(r"<link|<img|\bsrc=|@import|https?://(?!www\.w3\.org/2000/svg)", page)
    md = (out / "report.md").read_text()
    assert "<script>" not in md and "&lt;script&gt;" in md
    assert "within noise" in md or "beyond noise" in md
    assert "Peak RSS" in md
    # durations in the one format of agent2rl.formatting
    assert "| Budget | 10m00s, used 50% |" in md and "| Time to best | 2m00s |" in md


def test_report_writes_diffs_and_is_idempotent(rich: tuple[RunPaths, list[str]]) -> None:
    write_report(rich[0])
    out = rich[0].report
    (out / "diffs" / "99.diff").write_text("stale")
    assert sorted(p.name for p in (out / "diffs").iterdir()) == [
        "1.diff",
        "2.diff",
        "4.diff",
        "5.diff",
        "99.diff",
    ]
    first = {p.name: p.read_bytes() for p in out.rglob("*") if p.is_file() and p.stem != "99"}
    write_report(rich[0])
    second = {p.name: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert second == first  # same bytes, and the stale diff is gone
    assert "+x = 1" in (out / "diffs" / "1.diff").read_text()
    assert (out / "diffs" / "5.diff").read_text() == ""  # same snapshot as #4
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["best_submission_id"] == 3


def test_report_from_given_metrics_computes_nothing_again(tmp_path: Path) -> None:
    """``write_report(paths, metrics)`` writes exactly the metrics it is given (so a run's
    report and its results row come from one computation)."""
    paths = make_run(tmp_path / "r", HALF, [Sub(t=60, items=[1.0] * 40)])
    given = compute_metrics(paths).model_copy(update={"status": "deadline"})
    assert write_report(paths, given) is given
    assert json.loads((paths.report / "metrics.json").read_text())["status"] == "deadline"
    assert "| Status | deadline |" in (paths.report / "report.md").read_text()


@pytest.mark.parametrize("with_ledger", [True, False])
def test_run_without_submissions_still_reports(tmp_path: Path, with_ledger: bool) -> None:
    paths = make_run(tmp_path / "r", HALF, [], with_ledger=with_ledger)
    write_report(paths)
    out = paths.report
    m = json.loads((out / "metrics.json").read_text())
    assert m["improvement"] is None and m["best_score"] is None and m["submissions"] == 0
    assert m["first_valid_idx"] is None and m["monotonic_ratio"] is None
    assert m["baseline"] == (50.0 if with_ledger else None)
    page = (out / "report.html").read_text()
    specs = chart_specs(page)
    if with_ledger:  # the baseline alone: a chart with no submission in it
        assert not [s for s in specs["score"]["series"] if s["kind"] == "points"]
    else:
        assert "score" not in specs and "no scores to plot" in page
    assert "No submissions." in (out / "report.md").read_text()
    assert not (paths.ledger.exists() and not with_ledger)  # analysis creates no ledger


# -- results ledger ----------------------------------------------------------------------------
def test_results_ledger_replaces_by_run_id(tmp_path: Path) -> None:
    better = [1.0] * 30 + [0.0] * 10
    paths = make_run(tmp_path / "runs" / "run-a", HALF, [Sub(t=60, items=better)])
    assert list_runs(tmp_path / "runs") == []
    for _ in range(2):
        write_report(paths)
        record_run(tmp_path / "runs", paths.root, RunMetrics.read(paths.report / "metrics.json"))
    rows = list_runs(tmp_path / "runs")
    assert len(rows) == 1
    row = rows[0]
    assert row["run_id"] == "run-a" and row["task"] == "arith-lite" and row["driver"] == "reference"
    assert row["baseline"] == pytest.approx(50.0) and row["best"] == pytest.approx(75.0)
    assert row["improvement"] == pytest.approx(25.0) and row["submissions"] == 1
    assert row["ci_lo"] > 0 and row["ci_hi"] > row["ci_lo"]
    assert row["within_noise"] == 0 and row["eval_hash"] == "E1"
    assert row["total_tokens"] is None and row["cost_usd"] is None  # no metering proxy
    assert row["finished_at"] == pytest.approx(START + 300) and row["status"] == "completed"
    assert row["run_dir"] == str(paths.root.resolve())
    other = make_run(tmp_path / "runs" / "run-b", HALF, [])
    record_run(tmp_path / "runs", other.root, compute_metrics(other))
    assert [r["run_id"] for r in list_runs(tmp_path / "runs")] == ["run-a", "run-b"]


# -- interactive runs ---------------------------------------------------------------------------
def test_rollout_record_and_task_type_scores_reach_metrics_and_report(tmp_path: Path) -> None:
    paths = make_run(tmp_path / "r", HALF, [Sub(t=60, items=[1.0] * 40)])
    # Episodes: 3 sessions on 2 games, one won; steps at known times after START.
    with EnvLedger(paths.env_db) as led:
        a = led.open_session("g1", "pick_and_place_simple", at=START + 5)
        b = led.open_session("g2", "pick_two_obj_and_place", at=START + 6)
        c = led.open_session("g1", "pick_and_place_simple", at=START + 7)
        for sid, n, won in ((a, 3, True), (b, 2, False), (c, 1, False)):
            for k in range(n):
                led.record_step(
                    sid,
                    admissible=k != 1,
                    reward=1.0 * (won and k == n - 1),
                    won=won and k == n - 1,
                    done=won and k == n - 1,
                )
        led.close_session(a)
    # Per-item groups for the baseline and the best submission.
    for rel in ("grading/baseline/items.jsonl", "grading/submissions/0001/items.jsonl"):
        rows = [json.loads(x) for x in (paths.root / rel).read_text().splitlines()]
        with open(paths.root / rel, "w") as fh:
            for i, row in enumerate(rows):
                fh.write(json.dumps({**row, "meta": {"group": "ab"[i % 2]}}) + "\n")
    m = compute_metrics(paths)
    env = m.env_usage
    assert (env.episodes, env.games, env.won_episodes, env.finished_episodes) == (3, 2, 1, 1)
    assert env.steps == 6 and env.admissible_steps == 4
    assert sum(c for _, c in env.timeline) == 6 and env.first_step_t > 0
    # The rollout summary's breakdowns pass through to metrics.json as they came.
    saved = m.to_json()["env_usage"]
    assert saved["by_group"]["pick_and_place_simple"] == {"episodes": 2, "won": 1, "steps": 4}
    assert m.to_json()["group_scores"] == {
        "baseline": {"a": {"n": 20, "score": 100.0}, "b": {"n": 20, "score": 0.0}},
        "best": {"a": {"n": 20, "score": 100.0}, "b": {"n": 20, "score": 100.0}},
    }
    write_report(paths)
    out = paths.report
    md, page = (out / "report.md").read_text(), (out / "report.html").read_text()
    assert "3 episodes on 2 games (1 finished, 1 won), 6 environment steps" in md
    assert "| a | 20 | 100.00 | 100.00 |" in md and "| b | 20 | 0.00 | 100.00 |" in md
    assert "Environment rollouts" in page and 'aria-label="environment steps over time"' in page


def test_search_backend_and_query_counts_reach_metrics_and_report(tmp_path: Path) -> None:
    from agent2rl.rollout import SearchRecord

    paths = make_run(tmp_path / "r", HALF, [Sub(t=60, items=[1.0] * 40)])
    sub = paths.grading / "submissions" / "0001"
    for d in (paths.baseline_dir, sub):
        (d / "result.json").write_text(json.dumps({"details": {"search_backend": "wikipedia"}}))
    lines = [{"game_id": "q1", "step": 1, "backend": "wikipedia", "query": "a", "hits": 3,
              "error": ""}] * 3  # fmt: skip
    lines.append({**lines[0], "hits": 0, "error": "Wikipedia at x failed (HTTP 503)"})
    (paths.baseline_dir / "search_queries.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in lines) + '{"torn'
    )
    (sub / "search_queries.jsonl").write_text(json.dumps(lines[0]) + "\n")
    with EnvLedger(paths.env_db) as led:
        sid = led.open_session("p1", None, at=START + 5)
        for step in (1, 2):
            led.record_step(sid, True, 0.0, False, False, "search",
                            search=SearchRecord(f"q{step}", "wikipedia", 2), step=step)  # fmt: skip
        led.record_search(sid, 3, SearchRecord("q3", "wikipedia", 0, 1.0, "down"))
    m = compute_metrics(paths)
    s = m.search
    assert s is not None and s.backends == ["wikipedia"]
    assert (s.grader_evaluations, s.grader_queries, s.grader_failed) == (2, 5, 1)
    assert (s.agent_queries, s.agent_failed, s.agent_sessions) == (3, 1, 1)
    assert RunMetrics.model_validate(m.to_json()).search == s
    write_report(paths)
    md, page = (paths.report / "report.md").read_text(), (paths.report / "report.html").read_text()
    assert "## Search" in md and "Backend: wikipedia." in md
    assert "sent 5 queries over 2 evaluations, 1 failed" in md
    assert "sent 3 queries through the rollout service from 1 session, 1 failed" in md
    assert "<h2>Search</h2>" in page and "Backend: wikipedia." in page
    # a run of a task without search (no backend named, no query): no section
    plain = make_run(tmp_path / "plain", HALF, [Sub(t=60, items=HALF)])
    with EnvLedger(plain.env_db) as led:
        led.record_step(led.open_session("g", None, at=START + 5), True, 0.0, False, False)
    assert compute_metrics(plain).search is None
    write_report(plain)
    assert "## Search" not in (plain.report / "report.md").read_text()


def test_runs_without_rollouts_have_no_env_section(tmp_path: Path) -> None:
    paths = make_run(tmp_path / "r", HALF, [Sub(t=60, items=HALF)])
    m = compute_metrics(paths)
    assert m.env_usage is None and m.group_scores is None
    write_report(paths)
    assert "Environment rollouts" not in (paths.report / "report.md").read_text()
    assert "Environment rollouts" not in (paths.report / "report.html").read_text()


def test_final_submission_beside_the_selected_best_and_identity_figures_in_the_report(
    tmp_path: Path,
) -> None:
    sixty = [1.0] * 24 + [0.0] * 16
    seventy = [1.0] * 28 + [0.0] * 12
    paths = make_run(
        tmp_path / "r",
        HALF,
        [Sub(t=60, items=seventy), Sub(t=120, items=sixty), Sub(t=180, status="failed")],
    )
    report = {
        "derived": False,
        "reasons": ["weights unrelated to the base: 3% of parameters have cosine >= 0.2"],
        "chat_template_changed": False,
        "related_share": 0.03,
        "median_cosine": 0.011,
    }
    with Ledger(paths.ledger) as ledger:
        ledger.update_submission(1, identity=report)
    paths.record.mkdir(exist_ok=True)
    (paths.record / "agent.json").write_text(json.dumps({"mode_flags": ["uses grpo"]}))
    m = write_report(paths)
    # the best is selected over the graded submissions; the final one is the last valid
    assert (m.best_submission_id, m.best_score, m.improvement) == (1, 70.0, 20.0)
    assert (m.final_submission_id, m.final_score, m.final_improvement) == (2, 60.0, 10.0)
    assert m.final_improvement_ci95 is not None
    md = (paths.report / "report.md").read_text()
    assert "(selected over 2 graded submissions: submission #1" in md
    assert "as if it were the only one" in md
    assert "| Final submission | 60.00 (submission \\#2), +10.00 points (95% CI" in md
    page = (paths.report / "report.html").read_text()
    assert "baseline → best (selected over 2 graded submissions)" in page
    assert "final submission (not selected)" in page
    # the figures the agent never saw reach the report from the ledger's full report
    identity = m.trajectory[0].identity
    assert identity.related_share == 0.03 and identity.median_cosine == 0.011
    assert identity.reasons == report["reasons"]
    assert "(related share 0.03)" in md and "3% of parameters" in md
    # a mode contradiction is a flag like the integrity ones
    assert m.integrity_flags == ["model_not_derived", "mode_violation"]
    assert "mode violation" in md and "base model" in md


def test_an_honest_sft_run_with_a_role_marker_template_keeps_its_gain(tmp_path: Path) -> None:
    """A submission that brings its own chat template passed the renderer rule when it was
    graded (a template that computes the answer fails it as the model's fault): the change is
    recorded in the report, not flagged, so the run counts with its gain in every aggregate."""
    from agent2rl.analysis.dashboard.compare import aggregate
    from agent2rl.analysis.dashboard.counting import counted
    from agent2rl.analysis.dashboard.results import results_row

    seventy = [1.0] * 28 + [0.0] * 12
    paths = make_run(tmp_path / "r", HALF, [Sub(t=60, items=seventy)])
    with Ledger(paths.ledger) as ledger:
        ledger.update_submission(
            1, identity={"derived": True, "reasons": [], "chat_template_changed": True}
        )
    m = write_report(paths)
    assert m.chat_template_submissions == [1]  # recorded
    assert m.integrity_flags == []  # not flagged
    assert "own chat template" in (paths.report / "report.md").read_text()
    c = counted(m)
    assert (c.flagged, c.improvement) == (False, 20.0)
    row = results_row(paths.root, m)
    assert row["integrity_flags"] == ""
    (group,) = aggregate([row])
    assert (group["flagged"], group["mean_improvement"]) == (0, 20.0)
