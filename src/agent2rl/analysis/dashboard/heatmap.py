"""The mode x task heatmap (the paper's Fig. 6): mean improvement per row and task.

Rows are operating modes when every LLM run shares one agent and driver (the paper's Claude
Code modes), else agent stacks; agents without an LLM are rows of their own. Columns are
tasks (split by eval hash where a task was graded under several settings, see
:mod:`agent2rl.analysis.dashboard.runset`). A cell is the mean counted improvement
(:mod:`agent2rl.analysis.dashboard.counting`) of its runs with an outcome, with their count and
how many are flagged; per column the best and the worst cell are marked (all of them on a tie;
a column with one filled cell marks it best only).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from agent2rl.analysis.dashboard.counting import counted
from agent2rl.analysis.dashboard.runset import StudyRun, assign_hashes, column_label, mixed_tasks


@dataclass(frozen=True)
class Cell:
    row: str
    column: str
    n: int
    """Runs with an outcome in the cell."""
    runs: int
    """All runs in the cell."""
    mean: float | None
    best: bool = False
    worst: bool = False
    flagged: int = 0
    """Runs of the ``n`` with a flag."""


@dataclass(frozen=True)
class Heatmap:
    rows: list[str]
    columns: list[str]
    cells: list[Cell]
    row_kind: str
    """``mode`` or ``stack``."""

    def cell(self, row: str, column: str) -> Cell | None:
        return next((c for c in self.cells if c.row == row and c.column == column), None)


def _row_labels(runs: Sequence[StudyRun]) -> tuple[dict[str, str], str]:
    llm = {(r.metrics.agent, r.metrics.driver) for r in runs if r.metrics.mode is not None}
    by_mode = len(llm) == 1
    labels = {}
    for r in runs:
        if r.metrics.mode is not None and by_mode:
            # the mode, still apart by feedback protocol and confinement (never pooled)
            parts = (r.metrics.mode, r.stack.feedback, r.stack.isolation)
            labels[r.run_id] = " · ".join(x for x in parts if x)
        else:
            labels[r.run_id] = r.stack.label
    return labels, "mode" if by_mode and llm else "stack"


def mode_task_heatmap(runs: Sequence[StudyRun], *, raw: bool = False) -> Heatmap:
    """The heatmap of ``runs`` (see the module docstring); empty for no runs. ``raw``
    counts flagged runs as graded."""
    runs = assign_hashes(runs)
    mixed = mixed_tasks(runs)
    labels, kind = _row_labels(runs)
    values: dict[tuple[str, str], list[float]] = defaultdict(list)
    counts: dict[tuple[str, str], int] = defaultdict(int)
    flagged: dict[tuple[str, str], int] = defaultdict(int)
    for r in runs:
        cell = (labels[r.run_id], column_label(r.metrics.task, r.metrics.eval_hash, mixed))
        counts[cell] += 1
        if (o := counted(r.metrics, raw=raw)) is not None:
            values[cell].append(o.improvement)
            flagged[cell] += o.flagged
    rows = sorted({c[0] for c in counts})
    columns = sorted({c[1] for c in counts})
    means = {c: float(np.mean(values[c])) if values[c] else None for c in counts}
    cells = []
    for col in columns:
        filled = [means[(row, col)] for row in rows if means.get((row, col)) is not None]
        top = max(filled) if filled else None
        bottom = min(filled) if len(filled) > 1 else None
        for row in rows:
            if (row, col) not in counts:
                continue
            mean = means[(row, col)]
            cells.append(
                Cell(
                    row,
                    col,
                    len(values[(row, col)]),
                    counts[(row, col)],
                    mean,
                    best=mean is not None and mean == top,
                    worst=mean is not None and bottom is not None and mean == bottom,
                    flagged=flagged[(row, col)],
                )
            )
    return Heatmap(rows, columns, cells, kind)
