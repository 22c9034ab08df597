"""The cross-run dashboard: one self-contained, offline HTML page over a set of runs.

:func:`render_dashboard` draws, from :class:`~agent2rl.analysis.runset.StudyRun`\\ s, the
overview, the leaderboard, pass@k, the mode x task heatmap, the scaling curves (time,
tokens, submissions), the submission trajectories, routes with their evidence, failures,
post-hoc summaries and a table of runs linking to each run's ``report.html``. Figures are
inline SVG drawn here (no plotting library, no CDN, no script), so the page opens from disk
anywhere and its bytes depend only on the runs.

Markup the browser test relies on: leaderboard rows are ``tr.lb-row``, heatmap cells
``rect.hm-cell``, each curve's series a ``g.series`` with ``data-stack``, run links
``a.run-link``.
"""

from __future__ import annotations

import html
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from agent2rl.analysis.counting import counted, run_flags
from agent2rl.analysis.curves import AXES, Curve, scaling_curves
from agent2rl.analysis.failures import failure_counts, run_failures
from agent2rl.analysis.heatmap import Heatmap, mode_task_heatmap
from agent2rl.analysis.leaderboard import LeaderboardRow, Stat, leaderboard
from agent2rl.analysis.passk import PassAtK, pass_at_k
from agent2rl.analysis.report import grading_share
from agent2rl.analysis.routes import ROUTES, run_route
from agent2rl.analysis.run_metrics import RunMetrics
from agent2rl.analysis.runset import GroupKey, StudyRun, column_label, mixed_tasks
from agent2rl.analysis.summary import RunSummary
from agent2rl.analysis.trajectories import Trajectory, trajectories
from agent2rl.files import write_text_atomic
from agent2rl.formatting import format_duration

DASHBOARD = "dashboard.html"
PALETTE = (
    "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e",
    "#17becf", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
)  # fmt: skip


def _e(value: object) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def _f(v: float) -> str:
    return f"{v:.1f}"


def _num(v: float | None, signed: bool = False, digits: int = 2) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    return f"{v:+.{digits}f}" if signed else f"{v:.{digits}f}"


@dataclass
class Overview:
    """What the page's head says: a title and key/value lines (the study's name, matrix,
    slot counts...), plus notes (e.g. a task split by eval hash)."""

    title: str
    lines: list[tuple[str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


# -- charts -------------------------------------------------------------------------------------
def _ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    if not hi > lo:
        hi = lo + 1.0
    raw = (hi - lo) / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(k * mag for k in (1, 2, 2.5, 5, 10) if raw <= k * mag * (1 + 1e-9))
    start = math.floor(lo / step + 1e-9) * step
    end = math.ceil(hi / step - 1e-9) * step
    return [start + i * step for i in range(int(round((end - start) / step)) + 1)]


def _tick(v: float) -> str:
    if abs(v) >= 10000:
        return f"{v / 1000:g}k"
    return f"{round(v, 6) + 0.0:g}"


@dataclass(frozen=True)
class Series:
    label: str
    color: str
    xs: list[float]
    ys: list[float]
    lo: list[float] | None = None
    hi: list[float] | None = None
    step: bool = False
    markers: bool = False


def line_chart(
    series: Sequence[Series],
    *,
    title: str,
    x_label: str,
    y_label: str,
    hline: float | None = None,
    width: int = 420,
    height: int = 260,
    integer_x: bool = False,
) -> str:
    """An SVG line chart: one ``g.series`` per series (a band when ``lo``/``hi`` are given,
    the line, optional markers), axes with ticks (whole numbers on x with ``integer_x``), a
    legend, and ``hline`` dashed."""
    ml, mr, mt, mb = 50, 12, 28, 40
    xs = [x for s in series for x in s.xs] or [0.0, 1.0]
    ys = [y for s in series for y in (s.ys + (s.lo or []) + (s.hi or []))] or [0.0, 1.0]
    if hline is not None:
        ys.append(hline)
    xt, yt = _ticks(min(xs), max(xs)), _ticks(min(ys), max(ys))
    if integer_x:  # counts (k, submissions): whole-number ticks only
        lo, hi = math.floor(min(xs)), max(math.ceil(max(xs)), math.floor(min(xs)) + 1)
        step = max(1, math.ceil((hi - lo) / 8))
        xt = [float(v) for v in range(lo, hi + 1, step)]
        if xt[-1] < hi:
            xt.append(float(xt[-1] + step))
    x0, x1, y0, y1 = ml, width - mr, height - mb, mt

    def sx(v: float) -> float:
        return x0 + (v - xt[0]) / (xt[-1] - xt[0]) * (x1 - x0)

    def sy(v: float) -> float:
        return y0 + (v - yt[0]) / (yt[-1] - yt[0]) * (y1 - y0)

    legend_h = 14 * len(series)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" viewBox="0 0 {width} '
        f'{height + legend_h}" width="{width}" height="{height + legend_h}" role="img" '
        f'aria-label="{_e(title)}">',
        f'<text class="title" x="{ml}" y="16">{_e(title)}</text>',
    ]
    for v in yt:
        y = _f(sy(v))
        parts.append(f'<line class="grid" x1="{x0}" x2="{x1}" y1="{y}" y2="{y}"/>')
        parts.append(
            f'<text class="tick" x="{x0 - 5}" y="{y}" dy="4" text-anchor="end">{_tick(v)}</text>'
        )
    for v in xt:
        x = _f(sx(v))
        parts.append(f'<line class="axis" x1="{x}" x2="{x}" y1="{y0}" y2="{y0 + 4}"/>')
        parts.append(
            f'<text class="tick" x="{x}" y="{y0 + 16}" text-anchor="middle">{_tick(v)}</text>'
        )
    parts += [
        f'<line class="axis" x1="{x0}" x2="{x1}" y1="{y0}" y2="{y0}"/>',
        f'<line class="axis" x1="{x0}" x2="{x0}" y1="{y0}" y2="{y1}"/>',
        f'<text class="label" x="{(x0 + x1) / 2:.0f}" y="{y0 + 32}" text-anchor="middle">'
        f"{_e(x_label)}</text>",
        f'<text class="label" transform="translate(12 {(y0 + y1) / 2:.0f}) rotate(-90)" '
        f'text-anchor="middle">{_e(y_label)}</text>',
    ]
    if hline is not None:
        y = _f(sy(hline))
        parts.append(f'<line class="hline" x1="{x0}" x2="{x1}" y1="{y}" y2="{y}"/>')
    for s in series:
        parts.append(f'<g class="series" data-stack="{_e(s.label)}">')
        if s.lo is not None and s.hi is not None and len(s.xs) > 1:
            top = [f"{_f(sx(x))},{_f(sy(y))}" for x, y in zip(s.xs, s.hi, strict=True)]
            bottom = [f"{_f(sx(x))},{_f(sy(y))}" for x, y in zip(s.xs, s.lo, strict=True)]
            parts.append(
                f'<polygon class="band" fill="{s.color}" points="{" ".join(top + bottom[::-1])}"/>'
            )
        pts: list[str] = []
        for i, (x, y) in enumerate(zip(s.xs, s.ys, strict=True)):
            if s.step and i:
                pts.append(f"{_f(sx(x))},{_f(sy(s.ys[i - 1]))}")
            pts.append(f"{_f(sx(x))},{_f(sy(y))}")
        if len(pts) > 1:
            parts.append(f'<polyline class="line" stroke="{s.color}" points="{" ".join(pts)}"/>')
        if s.markers or len(pts) == 1:
            for x, y in zip(s.xs, s.ys, strict=True):
                parts.append(
                    f'<circle class="dot" fill="{s.color}" cx="{_f(sx(x))}" cy="{_f(sy(y))}" '
                    f'r="3"><title>{_e(s.label)}: {_tick(x)}, {_num(y)}</title></circle>'
                )
        parts.append("</g>")
    for i, s in enumerate(series):
        y = height + 14 * i + 2
        parts.append(
            f'<rect x="{ml}" y="{y}" width="10" height="10" fill="{s.color}"/>'
            f'<text class="legend" x="{ml + 14}" y="{y + 9}">{_e(s.label)}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


def _colors(runs: Sequence[StudyRun]) -> dict[str, str]:
    labels = sorted({r.stack.label for r in runs})
    return {label: PALETTE[i % len(PALETTE)] for i, label in enumerate(labels)}


# -- sections -----------------------------------------------------------------------------------
def _stat_cell(s: Stat) -> str:
    if s.mean is None:
        return "-"
    text = _num(s.mean)
    if s.std is not None:
        text += f" ± {_num(s.std)}"
    if s.ci95 is not None:
        text += f' <span class="ci">[{_num(s.ci95[0])}, {_num(s.ci95[1])}]</span>'
    return text


def _leaderboard(rows: list[LeaderboardRow], mixed: dict[str, list[str]]) -> str:
    head = (
        "<tr><th>task</th><th>model</th><th>stack</th><th>runs</th><th>flagged</th>"
        "<th>baseline</th><th>best (selected)</th><th>improvement (best, selected)</th>"
        "<th>final</th><th>improvement (final)</th><th>beyond noise</th><th>valid subm.</th>"
        "<th>tokens / run</th><th>cost / run</th><th>statuses</th></tr>"
    )
    body = []
    for r in rows:
        k = r.key
        rate = "-" if r.valid_rate is None else f"{100 * r.valid_rate:.0f}%"
        rate += f" ({r.valid_submissions}/{r.submissions})"
        cost = "-" if r.cost_usd.mean is None else f"${r.cost_usd.mean:.2f}"
        tokens = "-" if r.tokens.mean is None else f"{r.tokens.mean:,.0f}"
        statuses = ", ".join(f"{s} {n}" for s, n in sorted(r.statuses.items()))
        n = f"{r.runs}" + (f" ({r.no_valid} w/o valid)" if r.no_valid else "")
        flagged = f"{r.flagged} flagged" + (
            "" if not r.flagged else (" (as graded)" if r.raw else " (as base)")
        )
        body.append(
            f'<tr class="lb-row" data-task="{_e(k.task)}" data-stack="{_e(k.stack.label)}" '
            f'data-flagged="{r.flagged}">'
            f"<td>{_e(column_label(k.task, k.eval_hash, mixed))}</td><td>{_e(k.model)}</td>"
            f"<td>{_e(k.stack.label)}</td><td>{_e(n)}</td><td>{_e(flagged)}</td>"
            f"<td>{_stat_cell(r.baseline)}</td><td>{_stat_cell(r.best)}"
            f'<br><span class="ci">selected over {r.valid_submissions} graded submissions'
            f"</span></td>"
            f"<td><b>{_stat_cell(r.improvement)}</b></td><td>{_stat_cell(r.final)}</td>"
            f"<td>{_stat_cell(r.final_improvement)}</td><td>{r.beyond_noise}</td>"
            f"<td>{_e(rate)}</td><td>{tokens}</td><td>{cost}</td><td>{_e(statuses)}</td></tr>"
        )
    return f'<table id="leaderboard-table">{head}{"".join(body)}</table>'


def _task_columns(keys: Sequence[GroupKey], mixed: dict[str, list[str]]) -> list[str]:
    return sorted({column_label(k.task, k.eval_hash, mixed) for k in keys})


def _passk(curves: list[PassAtK], colors: dict[str, str], mixed: dict[str, list[str]]) -> str:
    charts, rows = [], []
    for col in _task_columns([c.key for c in curves], mixed):
        mine = [c for c in curves if column_label(c.key.task, c.key.eval_hash, mixed) == col]
        series = [
            Series(
                c.key.stack.label + ("" if c.key.model == "tiny" else f" ({c.key.model})"),
                colors.get(c.key.stack.label, "#333"),
                [float(k) for k, _ in c.points],
                [v for _, v in c.points],
                markers=True,
            )
            for c in mine
        ]
        charts.append(
            line_chart(
                series,
                title=f"{col}: expected best improvement of k runs",
                x_label="k (runs)",
                y_label="improvement",
                integer_x=True,
            )
        )
        for c in mine:
            pts = " ".join(f"k={k}: {_num(v, signed=True)}" for k, v in c.points)
            rows.append(
                f'<tr class="pk-row"><td>{_e(col)}</td><td>{_e(c.key.stack.label)}</td>'
                f"<td>{c.n}</td><td>{c.flagged} flagged</td><td>{_e(pts)}</td></tr>"
            )
    table = (
        "<table><tr><th>task</th><th>stack</th><th>n</th><th>flagged</th>"
        "<th>E[max of k]</th></tr>" + "".join(rows) + "</table>"
    )
    return f'<div class="charts">{"".join(charts)}</div>{table}'


def _heatmap(hm: Heatmap) -> str:
    if not hm.cells:
        return "<p>No runs.</p>"
    cw, ch, left, top = 130, 44, 230, 40
    width = left + cw * len(hm.columns) + 10
    height = top + ch * len(hm.rows) + 30
    values = [c.mean for c in hm.cells if c.mean is not None]
    span = max([abs(v) for v in values] + [1e-9])
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="heatmap" viewBox="0 0 {width} '
        f'{height}" width="{width}" height="{height}" role="img" aria-label="heatmap">'
    ]
    for j, col in enumerate(hm.columns):
        x = left + cw * j + cw / 2
        parts.append(
            f'<text class="label" x="{x:.0f}" y="{top - 12}" text-anchor="middle">{_e(col)}</text>'
        )
    for i, row in enumerate(hm.rows):
        y = top + ch * i + ch / 2 + 4
        parts.append(
            f'<text class="label" x="{left - 8}" y="{y:.0f}" text-anchor="end">{_e(row)}</text>'
        )
    for c in hm.cells:
        i, j = hm.rows.index(c.row), hm.columns.index(c.column)
        x, y = left + cw * j, top + ch * i
        if c.mean is None:
            fill = "#eeeeee"
        else:
            a = min(1.0, abs(c.mean) / span)
            fill = (
                f"rgba(44,160,44,{0.15 + 0.75 * a:.2f})"
                if c.mean >= 0
                else f"rgba(214,39,40,{0.15 + 0.75 * a:.2f})"
            )
        mark = "best" if c.best else ("worst" if c.worst else "")
        parts.append(
            f'<rect class="hm-cell {mark}" data-row="{_e(c.row)}" data-col="{_e(c.column)}" '
            f'data-n="{c.n}" data-flagged="{c.flagged}" x="{x + 2}" y="{y + 2}" '
            f'width="{cw - 4}" height="{ch - 4}" '
            f'fill="{fill}"><title>{_e(c.row)} on {_e(c.column)}: {_num(c.mean, signed=True)} '
            f"(n={c.n}, {c.flagged} flagged)</title></rect>"
        )
        sign = " ▲ best" if c.best else (" ▼ worst" if c.worst else "")
        parts.append(
            f'<text class="cell" x="{x + cw / 2:.0f}" y="{y + ch / 2:.0f}" text-anchor="middle">'
            f"{_num(c.mean, signed=True)}{sign}</text>"
            f'<text class="cell-n" x="{x + cw / 2:.0f}" y="{y + ch / 2 + 14:.0f}" '
            f'text-anchor="middle">n={c.n}{"" if c.n == c.runs else f" of {c.runs}"}'
            f", {c.flagged} flagged</text>"
        )
    parts.append("</svg>")
    return "".join(parts)


_AXIS_TEXT = {
    "time": ("minutes since start", "best-so-far improvement vs wall time"),
    "tokens": ("driver tokens used", "best-so-far improvement vs tokens"),
    "submissions": ("submissions", "best-so-far improvement vs submissions"),
}


def _curves(runs: Sequence[StudyRun], colors: dict[str, str], mixed: dict[str, list[str]]) -> str:
    blocks = []
    for axis in AXES:
        curves: list[Curve] = scaling_curves(runs, axis)
        if not curves:
            blocks.append(
                f'<p class="note">{_AXIS_TEXT[axis][1]}: no run has a record for this axis'
                f"{' (no LLM agent: no tokens metered)' if axis == 'tokens' else ''}.</p>"
            )
            continue
        charts = []
        for col in _task_columns([c.key for c in curves], mixed):
            mine = [c for c in curves if column_label(c.key.task, c.key.eval_hash, mixed) == col]
            scale = 60.0 if axis == "time" else 1.0
            series = [
                Series(
                    c.key.stack.label,
                    colors.get(c.key.stack.label, "#333"),
                    [x / scale for x in c.xs],
                    c.mean,
                    c.lo,
                    c.hi,
                    step=axis == "submissions",
                )
                for c in mine
            ]
            label, title = _AXIS_TEXT[axis]
            ns = ", ".join(f"{c.key.stack.label} n={c.n}" for c in mine)
            charts.append(
                f'<figure class="curve" data-axis="{axis}" data-task="{_e(col)}">'
                + line_chart(
                    series,
                    title=f"{col}: {title}",
                    x_label=label,
                    y_label="improvement",
                    integer_x=axis == "submissions",
                )
                + f"<figcaption>{_e(ns)}</figcaption></figure>"
            )
        blocks.append(f'<div class="charts">{"".join(charts)}</div>')
    return "".join(blocks)


def _trajectories(ts: list[Trajectory], colors: dict[str, str], links: dict[str, str]) -> str:
    charts = []
    for t in ts:
        points = [s for s in t.steps if s.score is not None]
        series = [
            Series(
                f"{t.stack} r{t.repeat if t.repeat is not None else '?'}",
                colors.get(t.stack, "#333"),
                [float(s.index) for s in points],
                [float(s.score) for s in points],  # type: ignore[arg-type]
                markers=True,
            )
        ]
        failed = len(t.steps) - len(points)
        caption = f"{len(t.steps)} submission(s)" + (
            f", {failed} without a score" if failed else ""
        )
        link = links.get(t.run_id)
        name = f'<a class="run-link" href="{_e(link)}">{_e(t.run_id)}</a>' if link else _e(t.run_id)
        charts.append(
            '<figure class="trajectory">'
            + line_chart(
                series,
                title=f"{t.task} · {t.stack} · r{t.repeat}",
                x_label="submission",
                y_label="score (dashed: baseline)",
                hline=t.baseline,
                width=330,
                height=200,
                integer_x=True,
            )
            + f"<figcaption>{name}: {_e(caption)}</figcaption></figure>"
        )
    return f'<div class="charts">{"".join(charts)}</div>'


def _routes(runs: Sequence[StudyRun], links: dict[str, str]) -> str:
    counts: dict[str, dict[str, int]] = {}
    rows = []
    for r in runs:
        rr = run_route(r)
        counts.setdefault(r.stack.label, dict.fromkeys(ROUTES, 0))[rr.best_route.label] += 1
        ev = "".join(
            f'<li>{_e(e.detail)} <span class="ref">[{_e(e.ref)}'
            f"{'' if e.t is None else f' at {e.t:.0f}s'}]</span></li>"
            for e in rr.route.evidence
        )
        rows.append(
            f'<tr class="route-row"><td>{_run_cell(r, links)}</td><td>{_e(r.stack.label)}</td>'
            f"<td><b>{_e(rr.route.label)}</b><br><small>{_e(rr.route.reason)}</small></td>"
            f"<td>{_e(rr.best_route.label)}</td><td><ul>{ev or '<li>none</li>'}</ul></td></tr>"
        )
    summary = "".join(
        f"<tr><td>{_e(stack)}</td>" + "".join(f"<td>{n}</td>" for n in c.values()) + "</tr>"
        for stack, c in sorted(counts.items())
    )
    return (
        "<h3>Best route per stack (runs)</h3><table><tr><th>stack</th>"
        + "".join(f"<th>{_e(x)}</th>" for x in ROUTES)
        + f"</tr>{summary}</table>"
        "<h3>Per run, with the evidence</h3><table><tr><th>run</th><th>stack</th>"
        "<th>route</th><th>best route</th><th>evidence [artifact]</th></tr>"
        + "".join(rows)
        + "</table>"
    )


def _failures(runs: Sequence[StudyRun], links: dict[str, str]) -> str:
    counts = failure_counts(runs)
    kinds = sorted({k for c in counts.values() for k in c})
    head = "".join(f"<th>{_e(k)}</th>" for k in kinds)
    summary = "".join(
        f"<tr><td>{_e(stack)}</td>" + "".join(f"<td>{c.get(k, 0)}</td>" for k in kinds) + "</tr>"
        for stack, c in sorted(counts.items())
    )
    rows = []
    for r in runs:
        fs = run_failures(r.metrics)
        if fs:
            items = "".join(
                f"<li><b>{_e(f.kind)}</b>: {_e(f.detail)} "
                f'<span class="ref">[{_e(f.ref)}]</span></li>'
                for f in fs
            )
            rows.append(f"<tr><td>{_run_cell(r, links)}</td><td><ul>{items}</ul></td></tr>")
    if not kinds:
        return "<p>No failures recorded.</p>"
    return (
        f"<table><tr><th>stack</th>{head}</tr>{summary}</table>"
        "<h3>Per run</h3><table><tr><th>run</th><th>failures [artifact]</th></tr>"
        + "".join(rows)
        + "</table>"
    )


def _summaries(summaries: Sequence[RunSummary]) -> str:
    out = []
    for s in summaries:

        def claims(cs: Sequence) -> str:
            return "".join(
                f'<li>{_e(c.text)} <span class="ref">[{_e("; ".join(c.refs))}]</span></li>'
                for c in cs
            )

        notes = "".join(f"<li>{_e(n)}</li>" for n in s.notes)
        out.append(
            f'<details class="summary"><summary>{_e(s.run_id)}: {_e(s.route)} '
            f"(best from {_e(s.best_route)}) · {_e(s.source)}</summary>"
            f"<p>{_e(s.route_claim.text)} "
            f'<span class="ref">[{_e("; ".join(s.route_claim.refs))}]</span></p>'
            f"<h4>Key decisions</h4><ul>{claims(s.decisions) or '<li>none</li>'}</ul>"
            f"<h4>What failed</h4><ul>{claims(s.failures) or '<li>nothing</li>'}</ul>"
            f"<h4>Timeline</h4><ul>{claims(s.timeline)}</ul>"
            + (f'<ul class="note">{notes}</ul>' if notes else "")
            + "</details>"
        )
    return "".join(out)


def _run_cell(r: StudyRun, links: dict[str, str]) -> str:
    link = links.get(r.run_id)
    return f'<a class="run-link" href="{_e(link)}">{_e(r.run_id)}</a>' if link else _e(r.run_id)


def _grading_cell(m: RunMetrics) -> str:
    """Time spent grading the run's submissions and its share of the budget."""
    spent, share = grading_share(m)
    return format_duration(spent) + (f" ({100 * share:.1f}%)" if share is not None else "")


def _runs_table(runs: Sequence[StudyRun], links: dict[str, str]) -> str:
    rows = []
    for r in sorted(runs, key=lambda r: (r.metrics.task, r.stack.label, r.repeat or 0)):
        # per run, the scores as graded (the raw figures); the flags say how it counts above
        m, o = r.metrics, counted(r.metrics, raw=True)
        flags = ", ".join(run_flags(m)) or "-"
        rows.append(
            f'<tr class="run-row"><td>{_run_cell(r, links)}</td><td>{_e(m.task)}</td>'
            f"<td>{_e(r.stack.label)}</td><td>{_e(m.model)}</td>"
            f"<td>{'-' if r.repeat is None else r.repeat}</td><td>{_e(m.status)}</td>"
            f"<td>{_num(m.baseline)}</td><td>{_num(m.best_score)}</td>"
            f"<td>{_num(o.improvement if o else None, signed=True)}</td>"
            f"<td>{_num(o.final if o else None)}</td>"
            f"<td>{m.valid_submissions}/{m.submissions}</td>"
            f"<td>{format_duration(m.duration_s) if m.duration_s is not None else '-'}</td>"
            f"<td>{_e(_grading_cell(m))}</td>"
            f"<td>{_e(flags)}</td></tr>"
        )
    return (
        "<table><tr><th>run (report)</th><th>task</th><th>stack</th><th>model</th><th>repeat</th>"
        "<th>status</th><th>baseline</th><th>best (selected)</th><th>improvement</th>"
        "<th>final</th><th>valid/all</th><th>duration</th><th>grading (budget share)</th>"
        "<th>flags</th></tr>" + "".join(rows) + "</table>"
    )


_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#222;
max-width:1500px}
h1{margin:0 0 8px}h2{margin-top:34px;border-bottom:1px solid #ddd;padding-bottom:4px}
nav a{margin-right:12px}table{border-collapse:collapse;margin:8px 0;font-size:13px}
th,td{border:1px solid #ddd;padding:4px 7px;text-align:left;vertical-align:top}
th{background:#f5f5f5}
.ci{color:#777;font-size:11px}.ref{color:#555;font-family:ui-monospace,monospace;font-size:11px}
.note{color:#666;font-size:13px}.charts{display:flex;flex-wrap:wrap;gap:10px}
figure{margin:0}figcaption{font-size:12px;color:#555;max-width:420px}
svg text{font-size:11px;fill:#333}svg .title{font-size:12px;font-weight:600}
svg .grid{stroke:#eee}svg .axis{stroke:#999}svg .hline{stroke:#888;stroke-dasharray:4 3}
svg .line{fill:none;stroke-width:2}svg .band{opacity:.18}svg .legend{font-size:11px}
.heatmap .hm-cell{stroke:#fff}.heatmap .hm-cell.best{stroke:#2ca02c;stroke-width:3}
.heatmap .hm-cell.worst{stroke:#d62728;stroke-width:3}.heatmap .cell{font-weight:600}
.heatmap .cell-n{font-size:10px;fill:#555}ul{margin:2px 0;padding-left:18px}
details.summary{margin:4px 0}details.summary>summary{cursor:pointer}
dl.overview{display:grid;grid-template-columns:max-content auto;gap:2px 14px;font-size:14px}
dl.overview dt{font-weight:600}
"""

_GLOSSARY = """
<ul class="note">
<li><b>Leaderboard</b>: per task and agent stack (agent, driver, mode), over repeats: mean ±
sample std and a 95% bootstrap interval of the mean, for the baseline, the best score and the
improvement. A run without a valid submission leaves the base model: it scores its baseline
(improvement 0, counted in "w/o valid"). "Best" is selected: the maximum over every graded
submission, each scored on the private split the agent saw, so it and its interval are
optimistic; "final" is the run's last valid submission, not selected. Valid submissions: the
mean per-run rate (and the pooled count). Tokens and cost: the driver LLM's, metered by the
harness.</li>
<li><b>Flagged runs</b> (model not derived from the base, own chat template, contamination,
mode violation) count as their base model, improvement 0, in the leaderboard, pass@k and the
heatmap (the anchors' policy), and each of them says how many it holds;
<code>agent2rl dashboard --raw</code> counts them as graded. The runs table shows every run
as graded, with its flags.</li>
<li><b>pass@k</b>: the expected best improvement of k runs drawn from the n repeats
(unbiased estimator, improvements sorted ascending: sum C(i-1,k-1)/C(n,k) x(i)).</li>
<li><b>Heatmap</b>: mean improvement per mode (or stack) and task, n runs per cell (and how
many are flagged); per task the best cell is outlined green, the worst red.</li>
<li><b>Scaling curves</b>: best-so-far improvement against wall time, driver tokens and
submissions; the line is the mean over repeats, the band ± one standard deviation.</li>
<li><b>Trajectories</b>: each run's scores by submission; the dashed line is its baseline.</li>
<li><b>Routes</b>: SFT only / RL only / SFT then RL / SFT and RL / no training / failed, from
the methods in the code at each submission, the agent's own progress lines and environment
steps; "best route" uses only the evidence up to the run's best submission.</li>
</ul>
"""


def report_links(runs: Sequence[StudyRun], base: Path) -> dict[str, str]:
    """Run id -> the path of its ``report/report.html`` relative to ``base`` (runs without
    a report are left out)."""
    out = {}
    for r in runs:
        if r.run_dir is None:
            continue
        report = Path(r.run_dir) / "report" / "report.html"
        if report.is_file():
            out[r.run_id] = Path(os.path.relpath(report, base)).as_posix()
    return out


def render_dashboard(
    runs: Sequence[StudyRun],
    overview: Overview,
    summaries: Sequence[RunSummary],
    links: dict[str, str],
    *,
    raw: bool = False,
) -> str:
    """The dashboard's HTML for ``runs`` (see the module docstring). ``links`` maps run ids
    to the href of their report (:func:`report_links`). ``raw`` counts flagged runs as
    graded in the leaderboard, pass@k and the heatmap (default: as their base model,
    :mod:`agent2rl.analysis.counting`)."""
    mixed = mixed_tasks(runs)
    colors = _colors(runs)
    notes = list(overview.notes)
    for task, hashes in mixed.items():
        notes.append(
            f"{task} was graded under {len(hashes)} evaluation settings "
            f"({', '.join(h[:8] for h in hashes)}): its runs are shown per setting, never pooled."
        )
    lines = "".join(f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>" for k, v in overview.lines)
    note_html = "".join(f'<p class="note">{_e(n)}</p>' for n in notes)
    n_flagged = sum(1 for r in runs if run_flags(r.metrics))
    counting = f'<p class="note counting">{n_flagged} flagged run(s) of {len(runs)}, counted ' + (
        "as graded (--raw).</p>"
        if raw
        else "as their base model (improvement 0); --raw shows them as graded.</p>"
    )
    sections = [
        ("overview", "Overview", f'<dl class="overview">{lines}</dl>{note_html}{_GLOSSARY}'),
        ("leaderboard", "Leaderboard", counting + _leaderboard(leaderboard(runs, raw=raw), mixed)),
        (
            "passk",
            "pass@k: expected best improvement",
            counting + _passk(pass_at_k(runs, raw=raw), colors, mixed),
        ),
        (
            "heatmap",
            "Mode × task heatmap (mean improvement)",
            counting + _heatmap(mode_task_heatmap(runs, raw=raw)),
        ),
        ("curves", "Scaling curves", _curves(runs, colors, mixed)),
        (
            "trajectories",
            "Submission trajectories",
            _trajectories(trajectories(runs), colors, links),
        ),
        ("routes", "Routes", _routes(runs, links)),
        ("failures", "Failures", _failures(runs, links)),
        ("summaries", "Post-hoc summaries", _summaries(summaries)),
        ("runs", "Runs", _runs_table(runs, links)),
    ]
    nav = "".join(f'<a href="#{sid}">{_e(title.split(":")[0])}</a>' for sid, title, _ in sections)
    body = "".join(
        f'<section id="{sid}"><h2>{_e(title)}</h2>{content}</section>'
        for sid, title, content in sections
    )
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{_e(overview.title)}</title><style>{_CSS}</style></head><body>"
        f"<h1>{_e(overview.title)}</h1><nav>{nav}</nav>{body}</body></html>\n"
    )


def write_dashboard(
    out_dir: Path,
    runs: Sequence[StudyRun],
    overview: Overview,
    summaries: Sequence[RunSummary],
    *,
    raw: bool = False,
) -> Path:
    """Write ``out_dir/dashboard.html`` (atomically) and return its path; ``raw`` as in
    :func:`render_dashboard`."""
    out_dir = Path(out_dir)
    html_text = render_dashboard(runs, overview, summaries, report_links(runs, out_dir), raw=raw)
    path = out_dir / DASHBOARD
    write_text_atomic(path, html_text)
    return path


__all__ = [
    "DASHBOARD",
    "Overview",
    "Series",
    "line_chart",
    "render_dashboard",
    "report_links",
    "write_dashboard",
]
