"""Task coverage (the paper's Fig. 4): which stacks improved which tasks, as data, as the
export's table and chart, and as the dashboard's table."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pandas as pd

from agent2rl.analysis.dashboard.coverage import cell_state, coverage_rows, task_coverage
from agent2rl.analysis.dashboard.page import Overview, render_dashboard
from agent2rl.study.export import write_export
from tests.support.studyruns import make_run


def _study() -> list:
    return [
        # sft: improves arith-lite in one repeat of two (beyond noise), not alfworld-lite
        make_run(task="arith-lite", agent="sft", scores=[30.0], within_noise=False),
        make_run(task="arith-lite", agent="sft", scores=[5.0]),
        make_run(task="alfworld-lite", agent="sft", scores=[8.0]),
        # rl: improves both, within noise on alfworld-lite; one run without a baseline
        make_run(task="arith-lite", agent="rl", scores=[12.0], within_noise=True),
        make_run(task="alfworld-lite", agent="rl", scores=[11.0], within_noise=True),
        make_run(task="alfworld-lite", agent="rl", baseline=None, eval_hash=None),
        # an agent that never ran alfworld-lite, and whose only run is flagged
        make_run(task="arith-lite", agent="cheat", scores=[90.0], within_noise=False,
                 integrity_flags=["contaminated"]),
    ]  # fmt: skip


def test_cells_count_improved_runs_per_stack_and_task() -> None:
    cov = task_coverage(_study())
    assert cov.stacks == ["sft", "rl", "cheat"] and cov.tasks == ["arith-lite", "alfworld-lite"]
    sft = cov.cell("sft", "arith-lite")
    assert (sft.runs, sft.graded, sft.improved, sft.beyond_noise, sft.best) == (2, 2, 1, 1, 20.0)
    assert cell_state(sft) == "noise"
    assert cell_state(cov.cell("sft", "alfworld-lite")) == "none"
    rl = cov.cell("rl", "alfworld-lite")
    assert (rl.runs, rl.graded, rl.improved, rl.beyond_noise) == (2, 1, 1, 0)
    assert cell_state(rl) == "improved"
    # a flagged run counts as its base model: it covers nothing (raw shows it as graded)
    assert cov.cell("cheat", "arith-lite").improved == 0
    assert task_coverage(_study(), raw=True).cell("cheat", "arith-lite").improved == 1
    assert cov.cell("cheat", "alfworld-lite") is None and cell_state(None) == "empty"
    per_stack, per_task = cov.covered()
    assert per_stack == {"sft": 1, "rl": 2, "cheat": 0}
    assert per_task == {"arith-lite": 2, "alfworld-lite": 1}


def test_export_writes_the_table_and_the_chart(tmp_path: Path) -> None:
    paths = write_export(_study(), tmp_path / "export", "Task coverage: <study>")
    table = pd.read_parquet(paths["task_coverage.parquet"])
    assert len(table) == 5  # cells with runs only
    row = table[(table["stack"] == "rl") & (table["task"] == "arith-lite")].iloc[0]
    assert bool(row.covered) and row.stack_tasks_covered == 2 and row.task_stacks_covering == 2
    assert pd.read_csv(paths["task_coverage.csv"]).shape == table.shape
    assert coverage_rows(task_coverage(_study())) == table.to_dict("records")
    svg = paths["task_coverage.svg"].read_text()
    root = ET.fromstring(svg)  # well-formed: a stack or study name is escaped text
    texts = [t.text for t in root.iter("{http://www.w3.org/2000/svg}text")]
    assert "Task coverage: <study>" in texts and "1/2" in texts and "2/2" in texts


def test_dashboard_shows_the_coverage_table() -> None:
    html = render_dashboard(_study(), Overview(title="t"), [], {})
    assert 'id="coverage"' in html
    assert html.count('class="cov-cell ') == 5
    assert 'class="cov-cell noise" data-row="sft" data-col="arith-lite"' in html
    assert 'class="cov-cell improved" data-row="rl" data-col="alfworld-lite"' in html
