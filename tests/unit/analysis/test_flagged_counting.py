"""How flagged runs and the final submission count in the cross-run aggregates.

A flagged run (integrity flag or mode violation) counts as its base model (improvement 0) in
the leaderboard, the heatmap and pass@k unless ``raw``, and every aggregate says how many
flagged runs it holds. The best is labelled as selected, and the final submission's score is
reported beside it.
"""

from __future__ import annotations

import json

import pytest
from support.cli import run_cli
from support.studyruns import make_run

from agent2rl.analysis.dashboard.compare import aggregate, is_flagged
from agent2rl.analysis.dashboard.counting import counted, counts_as_flagged, final_of
from agent2rl.analysis.dashboard.heatmap import mode_task_heatmap
from agent2rl.analysis.dashboard.leaderboard import leaderboard
from agent2rl.analysis.dashboard.page import Overview, render_dashboard
from agent2rl.analysis.dashboard.passk import pass_at_k
from agent2rl.analysis.dashboard.results import results_row
from agent2rl.analysis.report.run_metrics import MODE_VIOLATION, run_flags
from agent2rl.study.export import main_table_rows, write_export


def _runs():
    """Three repeats of one stack: a clean +4 (final +2), a contaminated +30 (a leak), a +20
    whose code contradicted its mode (only ``mode_flags``, as an older metrics.json has)."""
    return [
        make_run(baseline=10, scores=[14, 12]),
        make_run(baseline=10, scores=[40], integrity_flags=["contaminated"]),
        make_run(baseline=10, scores=[30], mode_flags=["uses GRPO under sft-only"]),
    ]


def test_flags_include_a_mode_violation() -> None:
    clean, leak, mode = _runs()
    assert run_flags(clean.metrics) == []
    assert run_flags(leak.metrics) == ["contaminated"]
    assert run_flags(mode.metrics) == [MODE_VIOLATION]


def test_leaderboard_counts_a_flagged_run_as_its_base_model_unless_raw() -> None:
    runs = _runs()
    (row,) = leaderboard(runs)
    assert row.flagged == 2 and row.scored == 3 and not row.raw
    assert row.improvement.mean == pytest.approx((4 + 0 + 0) / 3)
    assert row.best.mean == pytest.approx((14 + 10 + 10) / 3)
    assert row.final.mean == pytest.approx((12 + 10 + 10) / 3)
    assert row.final_improvement.mean == pytest.approx((2 + 0 + 0) / 3)
    (raw,) = leaderboard(runs, raw=True)
    assert raw.flagged == 2 and raw.raw
    assert raw.improvement.mean == pytest.approx((4 + 30 + 20) / 3)
    assert raw.final_improvement.mean == pytest.approx((2 + 30 + 20) / 3)


def test_heatmap_and_passk_count_flagged_runs_as_zero_and_say_how_many() -> None:
    runs = _runs()
    (cell,) = mode_task_heatmap(runs).cells
    assert (cell.n, cell.flagged) == (3, 2) and cell.mean == pytest.approx(4 / 3)
    (raw_cell,) = mode_task_heatmap(runs, raw=True).cells
    assert raw_cell.flagged == 2 and raw_cell.mean == pytest.approx(54 / 3)
    (curve,) = pass_at_k(runs)
    # k = n is the maximum: the leak's +30 must not be the headline
    assert curve.flagged == 2 and curve.points[-1] == (3, pytest.approx(4.0))
    (raw_curve,) = pass_at_k(runs, raw=True)
    assert raw_curve.points[-1] == (3, pytest.approx(30.0))


def test_final_is_the_last_valid_submission_even_from_an_older_metrics_json() -> None:
    run = make_run(baseline=10, scores=[14, None, 12, None])
    assert run.metrics.final_submission_id is None  # as an older metrics.json
    assert final_of(run.metrics) == (12, 2)
    c = counted(run.metrics)
    assert (c.best, c.improvement, c.final, c.final_improvement) == (14, 4, 12, 2)
    # no valid submission: the base model stands for the final too
    none = counted(make_run(baseline=10, scores=[None]).metrics)
    assert (none.final, none.final_improvement, none.has_valid) == (10, 0.0, False)


def test_dashboard_marks_flagged_counts_and_labels_best_as_selected() -> None:
    runs = _runs()
    page = render_dashboard(runs, Overview("t"), [], {})
    assert 'data-flagged="2"' in page and "2 flagged (as base)" in page
    assert "best (selected)" in page and "improvement (final)" in page
    assert "selected over 4 graded submissions" in page
    assert "2 flagged run(s) of 3, counted as their base model" in page
    assert "1.33" in page  # the counted mean improvement (4 + 0 + 0) / 3
    raw = render_dashboard(runs, Overview("t"), [], {}, raw=True)
    assert "2 flagged (as graded)" in raw and "counted as graded (--raw)" in raw
    assert "18.00" in raw  # the raw mean improvement (4 + 30 + 20) / 3


def test_the_dashboard_command_counts_flagged_runs_as_base_unless_raw(tmp_path) -> None:
    for run in _runs():
        d = tmp_path / run.run_id
        (d / "report").mkdir(parents=True)
        (d / "run.json").write_text("{}")
        (d / "report" / "metrics.json").write_text(json.dumps(run.metrics.to_json()))
    r = run_cli(["dashboard", str(tmp_path)], env={"PATH": "/usr/bin:/bin"}, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    page = (tmp_path / "dashboard.html").read_text()
    assert "2 flagged (as base)" in page and "<b>1.33" in page
    r = run_cli(["dashboard", str(tmp_path), "--raw"], env={"PATH": "/usr/bin:/bin"}, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    page = (tmp_path / "dashboard.html").read_text()
    assert "2 flagged (as graded)" in page and "<b>18.00" in page


def test_study_export_main_table_counts_a_flagged_run_as_its_base_model(tmp_path) -> None:
    """The paper's main table applies the policy of every other aggregate: the contaminated
    +30 and the mode-violating +20 count as their base model, never with their graded best."""
    runs = _runs()
    (row,) = main_table_rows(runs)
    label = runs[0].stack.label
    assert row[f"{label} best"] == pytest.approx((14 + 10 + 10) / 3)
    assert row[f"{label} delta"] == pytest.approx(4 / 3)
    assert row["flagged"] == 2
    (raw,) = main_table_rows(runs, raw=True)
    assert raw[f"{label} delta"] == pytest.approx((4 + 30 + 20) / 3)
    # The files the command writes say the same, and each run row says whether it counted.
    import pandas as pd

    paths = write_export(runs, tmp_path / "export")
    table = pd.read_csv(paths["main_table.csv"])
    assert table[f"{label} delta"].tolist() == [pytest.approx(4 / 3)]
    rows = pd.read_csv(paths["runs.csv"])
    assert rows["flagged"].tolist() == [False, True, True]


@pytest.mark.parametrize(
    ("flags", "flagged"),
    [
        ([], False),
        (["contaminated"], True),
        (["model_not_derived"], True),
        ([MODE_VIOLATION], True),
        (["unchecked"], True),  # a check that could not run is never clean
        (["some_future_flag"], True),
        (["chat_template_changed"], False),  # recorded: the renderer rule checked it
        (["chat_template_changed", "contaminated"], True),
    ],
)
def test_one_flag_policy_decides_for_every_aggregate(flags, flagged, tmp_path) -> None:
    """counts_as_flagged is the one place that decides; the metrics-based aggregates
    (leaderboard, export, heatmap: counted) and the results-ledger ones (compare) agree."""
    assert counts_as_flagged(flags) is flagged
    run = make_run(baseline=10, scores=[16], integrity_flags=flags)
    c = counted(run.metrics)
    assert (c.flagged, c.improvement) == (flagged, 0.0 if flagged else 6)
    row = results_row(tmp_path, run.metrics)
    assert is_flagged(row) is flagged
    (group,) = aggregate([row])
    assert group["flagged"] == int(flagged)
    assert group["mean_improvement"] == pytest.approx(0.0 if flagged else 6)
    (table,) = main_table_rows([run])
    assert table[f"{run.stack.label} delta"] == pytest.approx(0.0 if flagged else 6)


def test_scaling_curves_count_a_flagged_run_as_a_flat_zero_unless_raw() -> None:
    """The scaling curves are a mean over repeats too: the leak's +30 and the mode
    violation's +20 do not lift them (a flat 0, the base model) unless raw."""
    from agent2rl.analysis.dashboard.curves import scaling_curves

    runs = _runs()
    for axis in ("time", "submissions"):
        (curve,) = scaling_curves(runs, axis)
        assert (curve.n, curve.flagged) == (3, 2)
        assert curve.mean[-1] == pytest.approx(4 / 3) and max(curve.mean) == pytest.approx(4 / 3)
        (raw,) = scaling_curves(runs, axis, raw=True)
        assert raw.flagged == 2 and raw.mean[-1] == pytest.approx((4 + 30 + 20) / 3)
    page = render_dashboard(runs, Overview("t"), [], {})
    assert "n=3 (2 flagged, as base)" in page
