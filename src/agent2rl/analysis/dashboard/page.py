"""The cross-run dashboard: one self-contained, offline HTML page over a set of runs, a
section per analysis and a table of runs linking to each run's ``report.html``. Charts are
uPlot's, inlined with their data (:mod:`agent2rl.analysis.rendering`); nothing is fetched, so
the page opens from disk anywhere and its bytes depend only on the runs.

Markup the browser test relies on: leaderboard rows are ``tr.lb-row``, heatmap cells
``td.hm-cell``, each chart a ``div.a2r-chart`` whose JSON names its series, run links
``a.run-link``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from agent2rl.analysis.dashboard.counting import counted, counts_as_flagged, run_flags
from agent2rl.analysis.dashboard.coverage import Coverage, cell_state, task_coverage
from agent2rl.analysis.dashboard.curves import AXES, Curve, scaling_curves
from agent2rl.analysis.dashboard.failures import failure_counts, run_failures
from agent2rl.analysis.dashboard.heatmap import Heatmap, mode_task_heatmap
from agent2rl.analysis.dashboard.leaderboard import LeaderboardRow, Stat, leaderboard
from agent2rl.analysis.dashboard.passk import PassAtK, pass_at_k
from agent2rl.analysis.dashboard.routes import ROUTES, run_route
from agent2rl.analysis.dashboard.runset import GroupKey, StudyRun, column_label, mixed_tasks
from agent2rl.analysis.dashboard.summary import Claim, RunSummary
from agent2rl.analysis.dashboard.trajectories import Trajectory, trajectories
from agent2rl.analysis.rendering import Chart, Series, chart_html, chart_runtime, chart_style, esc
from agent2rl.analysis.report.render import grading_share
from agent2rl.files import write_text_atomic
from agent2rl.formatting import format_duration, format_number
from agent2rl.rundir import RunPaths

DASHBOARD = "dashboard.html"
PALETTE = (
    "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e",
    "#17becf", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
)  # fmt: skip


def _num(v: float | None, signed: bool = False, digits: int = 2) -> str:
    """The dashboard's number cells: "-" where there is no value."""
    return format_number(v, digits, signed=signed, missing="-")


@dataclass
class Overview:
    """What the page's head says: a title and key/value lines (the study's name, matrix,
    slot counts...), plus notes (e.g. a task split by eval hash)."""

    title: str
    lines: list[tuple[str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


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
        how = (" (as graded)" if r.raw else " (as base)") if r.flagged else ""
        flagged = f"{r.flagged} flagged{how}"
        body.append(
            f'<tr class="lb-row" data-task="{esc(k.task)}" data-stack="{esc(k.stack.label)}" '
            f'data-flagged="{r.flagged}">'
            f"<td>{esc(column_label(k.task, k.eval_hash, mixed))}</td><td>{esc(k.model)}</td>"
            f"<td>{esc(k.stack.label)}</td><td>{esc(n)}</td><td>{esc(flagged)}</td>"
            f"<td>{_stat_cell(r.baseline)}</td><td>{_stat_cell(r.best)}"
            f'<br><span class="ci">selected over {r.valid_submissions} graded submissions'
            f"</span></td>"
            f"<td><b>{_stat_cell(r.improvement)}</b></td><td>{_stat_cell(r.final)}</td>"
            f"<td>{_stat_cell(r.final_improvement)}</td><td>{r.beyond_noise}</td>"
            f"<td>{esc(rate)}</td><td>{tokens}</td><td>{cost}</td><td>{esc(statuses)}</td></tr>"
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
                colors.get(c.key.stack.label, "#333333"),
                [float(k) for k, _ in c.points],
                [v for _, v in c.points],
                markers=True,
            )
            for c in mine
        ]
        title = f"{col}: expected best improvement of k runs"
        chart = Chart(
            f"passk-{len(charts)}", title, "k (runs)", "improvement", series, integer_x=True
        )
        charts.append(chart_html(chart))
        for c in mine:
            pts = " ".join(f"k={k}: {_num(v, signed=True)}" for k, v in c.points)
            rows.append(
                f'<tr class="pk-row"><td>{esc(col)}</td><td>{esc(c.key.stack.label)}</td>'
                f"<td>{c.n}</td><td>{c.flagged} flagged</td><td>{esc(pts)}</td></tr>"
            )
    table = (
        "<table><tr><th>task</th><th>stack</th><th>n</th><th>flagged</th>"
        "<th>E[max of k]</th></tr>" + "".join(rows) + "</table>"
    )
    return f'<div class="charts">{"".join(charts)}</div>{table}'


def _coverage(cov: Coverage) -> str:
    """A table: one row per stack, one column per task; each cell ``improved/graded`` runs
    (``td.cov-cell`` with its :func:`cell_state` as class), the margins at the ends."""
    if not cov.cells:
        return "<p>No runs.</p>"
    per_stack, per_task = cov.covered()
    head = "".join(f"<th>{esc(t)}</th>" for t in cov.tasks) + "<th>tasks covered</th>"
    rows = []
    for s in cov.stacks:
        tds = []
        for t in cov.tasks:
            c = cov.cell(s, t)
            if c is None:
                tds.append('<td class="cov-empty"></td>')
                continue
            tds.append(
                f'<td class="cov-cell {cell_state(c)}" data-row="{esc(s)}" data-col="{esc(t)}" '
                f'title="{esc(s)} on {esc(t)}: {c.improved} of {c.graded} graded run(s) improved '
                f'({c.beyond_noise} beyond noise), best {_num(c.best, signed=True)}">'
                f"{c.improved}/{c.graded}</td>"
            )
        rows.append(
            f"<tr><th>{esc(s)}</th>{''.join(tds)}<td><b>{per_stack[s]}/{len(cov.tasks)}</b></td></tr>"
        )
    foot = "".join(f"<td><b>{per_task[t]}/{len(cov.stacks)}</b></td>" for t in cov.tasks)
    return (
        f'<table class="coverage"><tr><th></th>{head}</tr>{"".join(rows)}'
        f"<tr><th>stacks covering</th>{foot}<td></td></tr></table>"
    )


def _heatmap(hm: Heatmap) -> str:
    """A table: one row per mode (or stack), one column per task; each cell coloured by its
    mean improvement (green up, red down, stronger further from 0) with its count."""
    if not hm.cells:
        return "<p>No runs.</p>"
    values = [c.mean for c in hm.cells if c.mean is not None]
    span = max([abs(v) for v in values] + [1e-9])
    head = "".join(f"<th>{esc(col)}</th>" for col in hm.columns)
    rows = []
    for row in hm.rows:
        tds = []
        for col in hm.columns:
            c = hm.cell(row, col)
            if c is None:
                tds.append('<td class="hm-empty"></td>')
                continue
            if c.mean is None:
                fill = "#eeeeee"
            else:
                a = min(1.0, abs(c.mean) / span)
                rgb = "44,160,44" if c.mean >= 0 else "214,39,40"
                fill = f"rgba({rgb},{0.15 + 0.75 * a:.2f})"
            mark = "best" if c.best else ("worst" if c.worst else "")
            sign = " ▲ best" if c.best else (" ▼ worst" if c.worst else "")
            n = f"n={c.n}{'' if c.n == c.runs else f' of {c.runs}'}, {c.flagged} flagged"
            tds.append(
                f'<td class="hm-cell {mark}" data-row="{esc(c.row)}" data-col="{esc(c.column)}" '
                f'data-n="{c.n}" data-flagged="{c.flagged}" style="background:{fill}" '
                f'title="{esc(c.row)} on {esc(c.column)}: {_num(c.mean, signed=True)}">'
                f"<b>{_num(c.mean, signed=True)}{sign}</b><br><small>{esc(n)}</small></td>"
            )
        rows.append(f"<tr><th>{esc(row)}</th>{''.join(tds)}</tr>")
    return f'<table class="heatmap"><tr><th></th>{head}</tr>{"".join(rows)}</table>'


_AXIS_TEXT = {
    "time": ("minutes since start", "best-so-far improvement vs wall time"),
    "tokens": ("driver tokens used", "best-so-far improvement vs tokens"),
    "submissions": ("submissions", "best-so-far improvement vs submissions"),
}


def _curves(
    runs: Sequence[StudyRun], colors: dict[str, str], mixed: dict[str, list[str]], raw: bool = False
) -> str:
    how = "as graded" if raw else "as base"
    blocks = []
    for axis in AXES:
        curves: list[Curve] = scaling_curves(runs, axis, raw=raw)
        label, title = _AXIS_TEXT[axis]
        if not curves:
            why = " (no LLM agent: no tokens metered)" if axis == "tokens" else ""
            blocks.append(f'<p class="note">{title}: no run has a record for this axis{why}.</p>')
            continue
        scale = 60.0 if axis == "time" else 1.0
        stepped = axis == "submissions"
        charts = []
        for col in _task_columns([c.key for c in curves], mixed):
            mine = [c for c in curves if column_label(c.key.task, c.key.eval_hash, mixed) == col]
            series = [
                Series(
                    c.key.stack.label,
                    colors.get(c.key.stack.label, "#333333"),
                    [x / scale for x in c.xs],
                    c.mean,
                    lo=c.lo,
                    hi=c.hi,
                    kind="step" if stepped else "line",
                )
                for c in mine
            ]
            ns = ", ".join(
                f"{c.key.stack.label} n={c.n}"
                + (f" ({c.flagged} flagged, {how})" if c.flagged else "")
                for c in mine
            )
            chart_id = f"curve-{axis}-{len(charts)}"
            chart = Chart(
                chart_id, f"{col}: {title}", label, "improvement", series, integer_x=stepped
            )
            charts.append(
                f'<figure class="curve" data-axis="{axis}" data-task="{esc(col)}">'
                + chart_html(chart)
                + f"<figcaption>{esc(ns)}</figcaption></figure>"
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
                colors.get(t.stack, "#333333"),
                [float(s.index) for s in points],
                [float(s.score) for s in points],  # type: ignore[arg-type]
                markers=True,
            )
        ]
        failed = len(t.steps) - len(points)
        caption = f"{len(t.steps)} submission(s)" + (
            f", {failed} without a score" if failed else ""
        )
        chart = Chart(
            id=f"trajectory-{len(charts)}",
            title=f"{t.task} · {t.stack} · r{t.repeat}",
            x_label="submission",
            y_label="score (dashed: baseline)",
            series=series,
            hline=t.baseline,
            width=330,
            height=200,
            integer_x=True,
        )
        charts.append(
            '<figure class="trajectory">'
            + chart_html(chart, empty_note="no scored submission")
            + f"<figcaption>{_run_cell(t.run_id, links)}: {esc(caption)}</figcaption></figure>"
        )
    return f'<div class="charts">{"".join(charts)}</div>'


def _count_table(counts: Mapping[str, Mapping[str, int]], kinds: Sequence[str]) -> str:
    """Counts per stack: a row per stack (sorted), a column per kind."""
    head = "".join(f"<th>{esc(k)}</th>" for k in kinds)
    rows = "".join(
        f"<tr><td>{esc(stack)}</td>" + "".join(f"<td>{c.get(k, 0)}</td>" for k in kinds) + "</tr>"
        for stack, c in sorted(counts.items())
    )
    return f"<table><tr><th>stack</th>{head}</tr>{rows}</table>"


def _routes(runs: Sequence[StudyRun], links: dict[str, str]) -> str:
    counts: dict[str, dict[str, int]] = {}
    rows = []
    for r in runs:
        rr = run_route(r)
        counts.setdefault(r.stack.label, dict.fromkeys(ROUTES, 0))[rr.best_route.label] += 1
        ev = "".join(
            f'<li>{esc(e.detail)} <span class="ref">[{esc(e.ref)}'
            f"{'' if e.t is None else f' at {e.t:.0f}s'}]</span></li>"
            for e in rr.route.evidence
        )
        rows.append(
            f'<tr class="route-row"><td>{_run_cell(r.run_id, links)}</td>'
            f"<td>{esc(r.stack.label)}</td>"
            f"<td><b>{esc(rr.route.label)}</b><br><small>{esc(rr.route.reason)}</small></td>"
            f"<td>{esc(rr.best_route.label)}</td><td><ul>{ev or '<li>none</li>'}</ul></td></tr>"
        )
    return (
        f"<h3>Best route per stack (runs)</h3>{_count_table(counts, ROUTES)}"
        "<h3>Per run, with the evidence</h3><table><tr><th>run</th><th>stack</th>"
        "<th>route</th><th>best route</th><th>evidence [artifact]</th></tr>"
        + "".join(rows)
        + "</table>"
    )


def _failures(runs: Sequence[StudyRun], links: dict[str, str]) -> str:
    counts = failure_counts(runs)
    kinds = sorted({k for c in counts.values() for k in c})
    rows = []
    for r in runs:
        fs = run_failures(r.metrics)
        if fs:
            items = "".join(
                f"<li><b>{esc(f.kind)}</b>: {esc(f.detail)} "
                f'<span class="ref">[{esc(f.ref)}]</span></li>'
                for f in fs
            )
            rows.append(f"<tr><td>{_run_cell(r.run_id, links)}</td><td><ul>{items}</ul></td></tr>")
    if not kinds:
        return "<p>No failures recorded.</p>"
    return (
        _count_table(counts, kinds)
        + "<h3>Per run</h3><table><tr><th>run</th><th>failures [artifact]</th></tr>"
        + "".join(rows)
        + "</table>"
    )


def _cited(c: Claim) -> str:
    return f'{esc(c.text)} <span class="ref">[{esc("; ".join(c.refs))}]</span>'


def _claims(claims: Sequence[Claim]) -> str:
    return "".join(f"<li>{_cited(c)}</li>" for c in claims)


def _summaries(summaries: Sequence[RunSummary]) -> str:
    out = []
    for s in summaries:
        notes = "".join(f"<li>{esc(n)}</li>" for n in s.notes)
        out.append(
            f'<details class="summary"><summary>{esc(s.run_id)}: {esc(s.route)} '
            f"(best from {esc(s.best_route)}) · {esc(s.source)}</summary>"
            f"<p>{_cited(s.route_claim)}</p>"
            f"<h4>Key decisions</h4><ul>{_claims(s.decisions) or '<li>none</li>'}</ul>"
            f"<h4>What failed</h4><ul>{_claims(s.failures) or '<li>nothing</li>'}</ul>"
            f"<h4>Timeline</h4><ul>{_claims(s.timeline)}</ul>"
            + (f'<ul class="note">{notes}</ul>' if notes else "")
            + "</details>"
        )
    return "".join(out)


def _run_cell(run_id: str, links: dict[str, str]) -> str:
    link = links.get(run_id)
    return f'<a class="run-link" href="{esc(link)}">{esc(run_id)}</a>' if link else esc(run_id)


def _runs_table(runs: Sequence[StudyRun], links: dict[str, str]) -> str:
    rows = []
    for r in sorted(runs, key=lambda r: (r.metrics.task, r.stack.label, r.repeat or 0)):
        # per run, the scores as graded (the raw figures); the flags say how it counts above
        m, o = r.metrics, counted(r.metrics, raw=True)
        flags = ", ".join(run_flags(m)) or "-"
        spent, share = grading_share(m)  # time spent grading and its share of the budget
        grading = format_duration(spent) + (f" ({100 * share:.1f}%)" if share is not None else "")
        rows.append(
            f'<tr class="run-row"><td>{_run_cell(r.run_id, links)}</td><td>{esc(m.task)}</td>'
            f"<td>{esc(r.stack.label)}</td><td>{esc(m.model)}</td>"
            f"<td>{'-' if r.repeat is None else r.repeat}</td><td>{esc(m.status)}</td>"
            f"<td>{_num(m.baseline)}</td><td>{_num(m.best_score)}</td>"
            f"<td>{_num(o.improvement if o else None, signed=True)}</td>"
            f"<td>{_num(o.final if o else None)}</td>"
            f"<td>{m.valid_submissions}/{m.submissions}</td>"
            f"<td>{format_duration(m.duration_s) if m.duration_s is not None else '-'}</td>"
            f"<td>{esc(grading)}</td>"
            f"<td>{esc(flags)}</td></tr>"
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
.heatmap td.hm-cell{text-align:center;min-width:110px}
.heatmap td.hm-cell.best{outline:3px solid #2ca02c}
.heatmap td.hm-cell.worst{outline:3px solid #d62728}
td.cov-cell{text-align:center;min-width:90px}td.cov-cell.noise{background:#2ca02c;color:#fff}
td.cov-cell.improved{background:#98df8a}td.cov-cell.none{background:#eeeeee}
ul{margin:2px 0;padding-left:18px}
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
<li><b>Task coverage</b> (the paper's Fig. 4): per stack and task, how many runs improved
the task over graded runs (dark: one improved beyond noise, its interval excluding 0; light:
improved within noise; grey: none); the margins count the tasks a stack covers and the stacks
covering a task.</li>
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
    reports = {r.run_id: RunPaths(r.run_dir).report / "report.html" for r in runs if r.run_dir}
    return {
        run_id: Path(os.path.relpath(report, base)).as_posix()
        for run_id, report in reports.items()
        if report.is_file()
    }


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
    :mod:`agent2rl.analysis.dashboard.counting`)."""
    mixed = mixed_tasks(runs)
    labels = sorted({r.stack.label for r in runs})
    colors = {label: PALETTE[i % len(PALETTE)] for i, label in enumerate(labels)}
    notes = list(overview.notes)
    for task, hashes in mixed.items():
        notes.append(
            f"{task} was graded under {len(hashes)} evaluation settings "
            f"({', '.join(h[:8] for h in hashes)}): its runs are shown per setting, never pooled."
        )
    lines = "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in overview.lines)
    note_html = "".join(f'<p class="note">{esc(n)}</p>' for n in notes)
    n_flagged = sum(1 for r in runs if counts_as_flagged(run_flags(r.metrics)))
    counting = f'<p class="note counting">{n_flagged} flagged run(s) of {len(runs)}, counted ' + (
        "as graded (--raw).</p>"
        if raw
        else "as their base model (improvement 0); --raw shows them as graded.</p>"
    )
    passk = _passk(pass_at_k(runs, raw=raw), colors, mixed)
    heatmap = _heatmap(mode_task_heatmap(runs, raw=raw))
    coverage = _coverage(task_coverage(runs, raw=raw))
    plots = _trajectories(trajectories(runs), colors, links)
    sections = [
        ("overview", "Overview", f'<dl class="overview">{lines}</dl>{note_html}{_GLOSSARY}'),
        ("leaderboard", "Leaderboard", counting + _leaderboard(leaderboard(runs, raw=raw), mixed)),
        ("passk", "pass@k: expected best improvement", counting + passk),
        ("heatmap", "Mode × task heatmap (mean improvement)", counting + heatmap),
        ("coverage", "Task coverage: which stacks improved which tasks", counting + coverage),
        ("curves", "Scaling curves", counting + _curves(runs, colors, mixed, raw)),
        ("trajectories", "Submission trajectories", plots),
        ("routes", "Routes", _routes(runs, links)),
        ("failures", "Failures", _failures(runs, links)),
        ("summaries", "Post-hoc summaries", _summaries(summaries)),
        ("runs", "Runs", _runs_table(runs, links)),
    ]
    nav = "".join(f'<a href="#{sid}">{esc(title.split(":")[0])}</a>' for sid, title, _ in sections)
    body = "".join(
        f'<section id="{sid}"><h2>{esc(title)}</h2>{content}</section>'
        for sid, title, content in sections
    )
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(overview.title)}</title><style>{_CSS}</style>{chart_style()}</head><body>"
        f"<h1>{esc(overview.title)}</h1><nav>{nav}</nav>{body}{chart_runtime()}</body></html>\n"
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
    path = Path(out_dir) / DASHBOARD
    links = report_links(runs, path.parent)
    write_text_atomic(path, render_dashboard(runs, overview, summaries, links, raw=raw))
    return path
