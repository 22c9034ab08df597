"""Cross-run comparison refuses runs graded under different evaluation settings."""

from __future__ import annotations

import sqlite3
import subprocess

import pytest
from support.cli import run_cli

from agent2rl.analysis import RunMetrics, list_runs, record_run
from agent2rl.analysis.dashboard.compare import IncomparableRuns, aggregate, integrity_note
from agent2rl.analysis.dashboard.results import ADDED_COLUMNS, SCHEMA
from agent2rl.analysis.report.run_metrics import ContaminationSummary, LLMUsage


def _metrics(
    run_id: str, eval_hash: str, improvement: float, within: bool, **extra: object
) -> RunMetrics:
    return RunMetrics(
        run_id=run_id,
        ended_at=1.0 + len(run_id),
        task="arith-lite",
        task_version="1",
        agent="reference-sft",
        driver=None,
        model="tiny",
        baseline=1.0,
        best_score=1.0 + improvement,
        improvement=improvement,
        improvement_ci95=(improvement - 1.0, improvement + 1.0),
        within_noise=within,
        submissions=2,
        duration_s=60.0,
        status="completed",
        eval_hash=eval_hash,
        mode="sft-only",
        llm_usage=LLMUsage(total_tokens=1234, cost_usd=0.01),
        **extra,
    )


def _compare(runs, *args: str) -> subprocess.CompletedProcess:
    env = {"COLUMNS": "200", "PATH": "/usr/bin:/bin"}
    return run_cli(["compare", "--runs-dir", str(runs), *args], env=env, timeout=120)


def test_same_settings_aggregate(tmp_path) -> None:
    runs = tmp_path / "runs"
    record_run(runs, runs / "a", _metrics("a", "h1", 2.0, within=True))
    record_run(runs, runs / "bb", _metrics("bb", "h1", 4.0, within=False))
    (group,) = aggregate(list_runs(runs))
    assert group["runs"] == 2 and group["mean_improvement"] == pytest.approx(3.0)
    assert group["beyond_noise"] == 1 and group["eval_hash"] == "h1"
    r = _compare(runs)
    assert r.returncode == 0, r.stderr
    assert "+3.00" in r.stdout and "beyond" in r.stdout and "within" in r.stdout


def test_different_settings_are_refused_with_one_clear_line(tmp_path) -> None:
    runs = tmp_path / "runs"
    record_run(runs, runs / "a", _metrics("a", "h1", 2.0, within=True))
    record_run(runs, runs / "bb", _metrics("bb", "h2", 4.0, within=False))
    with pytest.raises(IncomparableRuns, match="h1 .*h2"):
        aggregate(list_runs(runs))
    r = _compare(runs)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "different evaluation settings" in r.stderr and "--eval-hash" in r.stderr
    only = _compare(runs, "--eval-hash", "h2")
    assert only.returncode == 0 and "+4.00" in only.stdout and "+2.00" not in only.stdout


def test_an_older_results_db_gains_the_new_columns(tmp_path) -> None:
    runs = tmp_path / "runs"
    runs.mkdir()
    old_schema = SCHEMA
    for name, kind in ADDED_COLUMNS.items():  # back to the schema of the first release
        old_schema = old_schema.replace(f",\n    {name} {kind}", "")
    assert "eval_hash" not in old_schema and "cost_usd" not in old_schema
    with sqlite3.connect(runs / "results.db") as conn:
        conn.executescript(old_schema)
        conn.execute("INSERT INTO runs (run_id, finished_at, task) VALUES ('old', 0.5, 'x')")
    record_run(runs, runs / "a", _metrics("a", "h1", 2.0, within=True))
    rows = {r["run_id"]: r for r in list_runs(runs)}
    assert rows["old"]["eval_hash"] is None and rows["a"]["eval_hash"] == "h1"
    assert rows["old"]["sandbox"] is None and rows["old"]["network"] is None
    assert rows["a"]["total_tokens"] == 1234 and rows["a"]["mode"] == "sft-only"
    assert rows["a"]["cost_usd"] == 0.01 and rows["a"]["within_noise"] == 1
    assert (rows["a"]["ci_lo"], rows["a"]["ci_hi"]) == (1.0, 3.0)


def test_integrity_flags_are_shown_and_flagged_runs_count_as_base(tmp_path) -> None:
    runs = tmp_path / "runs"
    clean = _metrics("a", "h1", 2.0, within=True)
    flagged = _metrics("bb", "h1", 4.0, within=False).model_copy(
        update={
            "integrity_flags": ["model_not_derived", "contaminated"],
            "not_derived_submissions": [2],
            "contamination": ContaminationSummary(
                flagged=True, matched_items=12, items_total=300, n=13
            ),
        }
    )
    record_run(runs, runs / "a", clean)
    record_run(runs, runs / "bb", flagged)
    rows = {r["run_id"]: r for r in list_runs(runs)}
    assert integrity_note(rows["a"]) == "-"
    assert integrity_note(rows["bb"]) == "model_not_derived, contaminated (12 items)"
    assert rows["bb"]["contaminated"] == 1 and rows["bb"]["not_derived"] == 1
    assert rows["a"]["contaminated"] is None  # no check ran: unknown, not clean
    # By default the flagged run counts as its base model (the anchors' policy): best =
    # baseline, improvement 0, and never beyond noise; --raw counts it as graded.
    (group,) = aggregate(list_runs(runs))
    assert group["flagged"] == 1 and group["mean_improvement"] == pytest.approx(1.0)
    assert group["mean_best"] == pytest.approx((3.0 + 1.0) / 2) and group["beyond_noise"] == 0
    (raw,) = aggregate(list_runs(runs), raw=True)
    assert raw["flagged"] == 1 and raw["mean_improvement"] == pytest.approx(3.0)
    assert raw["beyond_noise"] == 1
    r = _compare(runs)
    assert r.returncode == 0, r.stderr
    # the per-run row keeps the score as graded, marked; the mean counts it as 0
    assert "contaminated (12 items)" in r.stdout and "+4.00" in r.stdout
    means = r.stdout.split("mean improvement", 1)[1]  # the per-group table, after its header
    assert "+1.00" in means and "+3.00" not in means and "as their base model" in means
    r = _compare(runs, "--raw")
    assert r.returncode == 0, r.stderr
    means = r.stdout.split("mean improvement", 1)[1]
    assert "+3.00" in means and "as graded (--raw)" in means


def test_unconfined_runs_are_never_pooled_with_sandboxed_ones(tmp_path) -> None:
    """A run whose agent ran without the sandbox (``auto`` on a machine without bubblewrap)
    or on the host's network could reach what a confined one cannot: its results row
    records the sandbox and network it ran with, and compare, the dashboard and the
    export keep it apart, naming it."""
    from support.studyruns import make_run

    from agent2rl.analysis.dashboard.leaderboard import leaderboard
    from agent2rl.study.export import main_table_rows

    runs = tmp_path / "runs"
    confined = {"sandbox": "bwrap", "network": "services"}
    record_run(runs, runs / "a", _metrics("a", "h1", 2.0, within=True, **confined))
    record_run(runs, runs / "bb", _metrics("bb", "h1", 4.0, within=True, **confined))
    loose = {"sandbox": "none", "network": "host"}
    record_run(runs, runs / "ccc", _metrics("ccc", "h1", 30.0, within=False, **loose))
    hostnet = {"sandbox": "bwrap", "network": "host"}
    record_run(runs, runs / "dddd", _metrics("dddd", "h1", 9.0, within=False, **hostnet))
    rows = {r["run_id"]: r for r in list_runs(runs)}
    assert (rows["ccc"]["sandbox"], rows["ccc"]["network"]) == ("none", "host")
    groups = {g["isolation"]: g for g in aggregate(list(rows.values()))}
    assert set(groups) == {None, "sandbox: none", "network: host"}
    assert groups[None]["runs"] == 2 and groups[None]["mean_improvement"] == pytest.approx(3.0)
    assert groups["sandbox: none"]["mean_improvement"] == pytest.approx(30.0)
    r = _compare(runs)
    assert r.returncode == 0, r.stderr
    assert "(sandbox: none)" in r.stdout and "(network: host)" in r.stdout
    assert "+3.00" in r.stdout and "+30.00" in r.stdout
    # The dashboard's leaderboard and the export's main table: one stack each.
    studied = [
        make_run(baseline=10, scores=[12], **confined),
        make_run(baseline=10, scores=[40], **loose),
    ]
    labels = sorted(row.key.stack.label for row in leaderboard(studied))
    assert labels == ["reference-sft", "reference-sft · sandbox: none"]
    (table,) = main_table_rows(studied)
    assert table["reference-sft delta"] == 2.0
    assert table["reference-sft · sandbox: none delta"] == 30.0


def test_runs_with_provider_tools_are_never_pooled_with_runs_without(tmp_path) -> None:
    """A run that let the driver's provider-side tools through (web search reaches the
    public test sets past every deny list) is kept apart in compare, the dashboard and the
    export, named as such, like an unconfined run."""
    from support.studyruns import make_run

    from agent2rl.analysis.dashboard.leaderboard import leaderboard

    runs = tmp_path / "runs"
    confined = {"sandbox": "bwrap", "network": "services"}
    record_run(runs, runs / "a", _metrics("a", "h1", 2.0, within=True, **confined))
    tools = {**confined, "provider_tools": True}
    record_run(runs, runs / "bb", _metrics("bb", "h1", 20.0, within=False, **tools))
    loose = {"sandbox": "none", "network": "host", "provider_tools": True}
    record_run(runs, runs / "ccc", _metrics("ccc", "h1", 40.0, within=False, **loose))
    groups = {g["isolation"]: g for g in aggregate(list_runs(runs))}
    assert set(groups) == {None, "provider tools", "sandbox: none, provider tools"}
    assert groups[None]["mean_improvement"] == pytest.approx(2.0)
    assert groups["provider tools"]["mean_improvement"] == pytest.approx(20.0)
    r = _compare(runs)
    assert r.returncode == 0, r.stderr
    assert "(provider tools)" in r.stdout and "(sandbox: none, provider tools)" in r.stdout
    studied = [
        make_run(baseline=10, scores=[12], **confined),
        make_run(baseline=10, scores=[40], **tools),
    ]
    labels = sorted(row.key.stack.label for row in leaderboard(studied))
    assert labels == ["reference-sft", "reference-sft · provider tools"]
