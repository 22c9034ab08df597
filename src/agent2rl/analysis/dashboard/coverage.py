"""Task coverage (the paper's Fig. 4): which agent stacks improved which tasks.

Rows are agent stacks (agent · driver · mode), in the order their runs come (a study's matrix
order); columns are tasks, in the same order, split by eval hash where a task was graded under
several settings (:func:`~agent2rl.analysis.dashboard.runset.column_label`). A cell counts its
stack's runs of the task: ``runs`` (all), ``graded`` (with a baseline), ``improved`` (best of
budget above the baseline: counted improvement > 0), ``beyond_noise`` (improved and the
improvement's 95% interval excludes 0), and the best counted improvement, a flagged run as its
base model unless ``raw`` (:mod:`agent2rl.analysis.dashboard.counting`).

A stack *covers* a task when at least one of its runs improved it; :meth:`Coverage.covered`
counts the tasks each stack covers and the stacks that cover each task, the two margins of
the chart. :func:`coverage_rows` is the long table ``agent2rl study export`` writes
(``task_coverage.csv``/``.parquet``) and :func:`coverage_svg` its chart
(``task_coverage.svg``); the dashboard shows the same cells as a table.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from html import escape
from typing import Any

from agent2rl.analysis.dashboard.counting import counted
from agent2rl.analysis.dashboard.runset import StudyRun, assign_hashes, column_label, mixed_tasks


@dataclass(frozen=True)
class CoverageCell:
    """One stack on one task (module docstring). ``best`` is None when no run was graded."""

    stack: str
    task: str
    runs: int
    graded: int
    improved: int
    beyond_noise: int
    best: float | None

    @property
    def covered(self) -> bool:
        return self.improved > 0


@dataclass(frozen=True)
class Coverage:
    stacks: list[str]
    tasks: list[str]
    cells: list[CoverageCell]

    def cell(self, stack: str, task: str) -> CoverageCell | None:
        return next((c for c in self.cells if c.stack == stack and c.task == task), None)

    def covered(self) -> tuple[dict[str, int], dict[str, int]]:
        """(tasks covered per stack, stacks covering each task), every stack and task
        present (0 where none)."""
        per_stack, per_task = dict.fromkeys(self.stacks, 0), dict.fromkeys(self.tasks, 0)
        for c in self.cells:
            if c.covered:
                per_stack[c.stack] += 1
                per_task[c.task] += 1
        return per_stack, per_task


def task_coverage(runs: Sequence[StudyRun], *, raw: bool = False) -> Coverage:
    """The coverage of ``runs`` (module docstring); empty for no runs. A run without a
    baseline counts in ``runs`` only."""
    runs = assign_hashes(runs)
    mixed = mixed_tasks(runs)
    acc: dict[tuple[str, str], dict[str, Any]] = {}
    for r in runs:
        stack = r.stack.label
        task = column_label(r.metrics.task, r.metrics.eval_hash, mixed)
        a = acc.setdefault(
            (stack, task), {"runs": 0, "graded": 0, "improved": 0, "noise": 0, "best": None}
        )
        a["runs"] += 1
        c = counted(r.metrics, raw=raw)
        if c is None:
            continue
        a["graded"] += 1
        a["best"] = c.improvement if a["best"] is None else max(a["best"], c.improvement)
        if c.improvement > 0:
            a["improved"] += 1
            # a zeroed (flagged) run never gets here; a graded one's interval is its own
            if r.metrics.within_noise is False:
                a["noise"] += 1
    # stacks and tasks in first-seen order
    stacks, tasks = dict.fromkeys(s for s, _ in acc), dict.fromkeys(t for _, t in acc)
    cells = [
        CoverageCell(s, t, a["runs"], a["graded"], a["improved"], a["noise"], a["best"])
        for s in stacks
        for t in tasks
        if (a := acc.get((s, t))) is not None
    ]
    return Coverage(list(stacks), list(tasks), cells)


def coverage_rows(cov: Coverage) -> list[dict[str, Any]]:
    """The long table: one row per (stack, task) cell with runs, with ``covered``, and the
    stack's and the task's margins (``stack_tasks_covered``, ``task_stacks_covering``)."""
    per_stack, per_task = cov.covered()
    return [
        {
            **asdict(c),
            "covered": c.covered,
            "stack_tasks_covered": per_stack[c.stack],
            "task_stacks_covering": per_task[c.task],
        }
        for c in cov.cells
    ]


#: cell colours: improved beyond noise, improved within noise, graded but not improved
_FILL = {"noise": "#2ca02c", "improved": "#98df8a", "none": "#eeeeee", "empty": "#ffffff"}


def cell_state(c: CoverageCell | None) -> str:
    """``noise`` (a run improved beyond noise), ``improved`` (only within noise), ``none``
    (runs, none improved) or ``empty`` (no run)."""
    if c is None:
        return "empty"
    if c.beyond_noise:
        return "noise"
    return "improved" if c.improved else "none"


def _text(x: float, y: float, body: str, attrs: str = 'text-anchor="middle"') -> str:
    return f'<text x="{x:.0f}" y="{y:.0f}" {attrs}>{body}</text>'


def coverage_svg(cov: Coverage, title: str = "Task coverage") -> str:
    """The chart as a standalone SVG: a grid of stacks (rows) by tasks (columns), each cell
    coloured by :func:`cell_state` and labelled ``improved/graded``, the tasks a stack covers
    at the row's end and the stacks covering a task under its column. Labels are escaped
    (a stack or task name is text, never markup)."""
    cw, ch, left, top = 110, 28, 12 + 7 * max([len(s) for s in cov.stacks] + [15]), 60
    legend = (
        ("noise", "improved beyond noise"),
        ("improved", "improved (within noise)"),
        ("none", "not improved"),
    )
    legend_w = sum(36 + 7 * len(text) for _, text in legend)
    width = max(left + cw * (len(cov.tasks) + 1), 10 + legend_w) + 10
    height = top + ch * (len(cov.stacks) + 1) + 40
    per_stack, per_task = cov.covered()
    bold = 'text-anchor="middle" font-weight="bold"'
    margin_x = left + cw * len(cov.tasks) + cw / 2  # the column of the stacks' margins
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'font-family="sans-serif" font-size="12">',
        _text(10, 20, escape(title), 'font-size="15" font-weight="bold"'),
        *(_text(left + cw * j + cw / 2, top - 8, escape(t)) for j, t in enumerate(cov.tasks)),
        _text(margin_x, top - 8, "tasks covered", 'text-anchor="middle" font-style="italic"'),
    ]
    for i, s in enumerate(cov.stacks):
        y = top + ch * i
        out.append(_text(left - 6, y + ch / 2 + 4, escape(s), 'text-anchor="end"'))
        for j, t in enumerate(cov.tasks):
            c = cov.cell(s, t)
            x = left + cw * j
            out.append(
                f'<rect x="{x}" y="{y}" width="{cw - 2}" height="{ch - 2}" '
                f'fill="{_FILL[cell_state(c)]}" stroke="#cccccc"/>'
            )
            if c is not None:
                colour = ' fill="#ffffff"' if cell_state(c) == "noise" else ""
                label = f"{c.improved}/{c.graded}"
                out.append(
                    _text(x + cw / 2, y + ch / 2 + 4, label, f'text-anchor="middle"{colour}')
                )
        out.append(_text(margin_x, y + ch / 2 + 4, f"{per_stack[s]}/{len(cov.tasks)}", bold))
    y = top + ch * len(cov.stacks) + ch / 2 + 4
    out.append(_text(left - 6, y, "stacks covering", 'text-anchor="end" font-style="italic"'))
    for j, t in enumerate(cov.tasks):
        out.append(_text(left + cw * j + cw / 2, y, f"{per_task[t]}/{len(cov.stacks)}", bold))
    x = 10
    for state, text in legend:
        out.append(
            f'<rect x="{x}" y="{height - 22}" width="12" height="12" fill="{_FILL[state]}" '
            'stroke="#cccccc"/>'
        )
        out.append(f'<text x="{x + 16}" y="{height - 12}">{text}</text>')
        x += 36 + 7 * len(text)
    out.append("</svg>")
    return "\n".join(out) + "\n"
