"""The mode x task heatmap: means, counts, best and worst per task."""

from __future__ import annotations

import pytest
from support.studyruns import make_run

from agent2rl.analysis.dashboard.heatmap import mode_task_heatmap


def cc(mode: str, task: str, gain: float | None):
    scores = [] if gain is None else [10 + gain]
    return make_run(
        agent="claude-code", driver="claude-sonnet-4-5", mode=mode, task=task,
        baseline=10, scores=scores, status="deadline",
    )  # fmt: skip


def test_rows_are_modes_with_best_and_worst_marked() -> None:
    runs = [
        cc("free", "arith-lite", 4), cc("free", "arith-lite", 6),
        cc("sft-only", "arith-lite", 1),
        cc("rl-oriented", "arith-lite", 9),
        cc("free", "gsm8k", 2),
        cc("sft-only", "gsm8k", None),  # no valid submission: improvement 0
    ]  # fmt: skip
    hm = mode_task_heatmap(runs)
    assert hm.row_kind == "mode"
    assert hm.rows == ["free", "rl-oriented", "sft-only"]
    assert hm.columns == ["arith-lite", "gsm8k"]
    free = hm.cell("free", "arith-lite")
    assert (free.n, free.mean) == (2, pytest.approx(5.0))
    assert hm.cell("rl-oriented", "arith-lite").best
    assert hm.cell("sft-only", "arith-lite").worst
    assert not free.best and not free.worst
    assert hm.cell("free", "gsm8k").best and hm.cell("sft-only", "gsm8k").worst
    assert hm.cell("rl-oriented", "gsm8k") is None  # never run


def test_stacks_when_drivers_differ_and_single_cells() -> None:
    runs = [
        make_run(agent="reference-sft", baseline=1, scores=[3]),
        make_run(agent="codex", driver="gpt-5", mode="free", baseline=1, scores=[2]),
        make_run(
            agent="claude-code", driver="claude-opus-4-6", mode="free", baseline=1, scores=[2]
        ),
    ]
    hm = mode_task_heatmap(runs)
    assert hm.row_kind == "stack"
    assert "codex · gpt-5 · free" in hm.rows and "reference-sft" in hm.rows
    best = [c for c in hm.cells if c.best]
    assert [c.row for c in best] == ["reference-sft"]
    assert sorted(c.row for c in hm.cells if c.worst) == [
        "claude-code · claude-opus-4-6 · free",
        "codex · gpt-5 · free",
    ]  # a tie marks both
    lone = mode_task_heatmap([make_run(baseline=1, scores=[2])])
    assert lone.cells[0].best and not lone.cells[0].worst
    assert mode_task_heatmap([]).cells == []
