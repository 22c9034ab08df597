"""The per-run report: ``report/metrics.json``, ``report.md``, ``report.html`` and ``diffs/``.

``report.html`` is one self-contained file (inline CSS, an inline SVG plot drawn here, a few
lines of inline JS; nothing fetched), so it can be mailed, archived or opened from a sweep's
result folder as is. Every string that could have come from the agent (paths, error messages,
rejection reasons, diffs) is escaped before it reaches Markdown or HTML.
"""

from __future__ import annotations

import html
import math
import os
import re
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from agent2rl.analysis.metrics import EMPTY_TREE, compute_metrics, snapshot_diff
from agent2rl.rundir import RunPaths, write_json_atomic

#: Diffs above this size are cut in report.html (the full text stays in diffs/<id>.diff) so an
#: agent committing a huge generated file cannot make the page unopenable.
DIFF_EMBED_LIMIT = 200_000
#: Rows of the rejected-attempts table; an agent hammering the API must not bloat the report.
MAX_REJECTION_ROWS = 200
_DASH = "—"


# -- entry point -------------------------------------------------------------------------------
def write_report(paths: RunPaths) -> Path:
    """Compute the run's metrics and write every report file; return the report directory.

    Writes ``metrics.json``, ``report.md``, ``report.html`` and ``diffs/<id>.diff`` (one per
    submission whose snapshot git can read) atomically. Idempotent: a second call rewrites the
    same bytes and removes ``.diff`` files no longer backed by a submission. Works for a run
    with no submissions, no baseline or no code snapshots.
    """
    metrics = compute_metrics(paths)
    out = paths.report
    out.mkdir(parents=True, exist_ok=True)
    diffs = collect_diffs(paths, metrics)
    _write_diffs(out / "diffs", diffs)
    write_json_atomic(out / "metrics.json", metrics)
    _write_text_atomic(out / "report.md", render_markdown(metrics))
    _write_text_atomic(out / "report.html", render_html(metrics, diffs))
    return out


def collect_diffs(paths: RunPaths, metrics: Mapping[str, Any]) -> dict[int, str | None]:
    """Each submission's code diff against the snapshot its ``code_changes`` entry was compared
    with; None where there is no readable snapshot."""
    diffs: dict[int, str | None] = {}
    for change in metrics.get("code_changes", []):
        base, snap = change.get("base"), change.get("snapshot")
        diffs[int(change["id"])] = (
            snapshot_diff(paths.code_git, base, snap) if base and snap else None
        )
    return diffs


def _write_text_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _write_diffs(diff_dir: Path, diffs: Mapping[int, str | None]) -> None:
    wanted = {f"{sid}.diff": text for sid, text in diffs.items() if text is not None}
    if diff_dir.is_dir():
        for stale in diff_dir.glob("*.diff"):
            if stale.name not in wanted:
                stale.unlink()
    for name, text in wanted.items():
        _write_text_atomic(diff_dir / name, text)


# -- formatting --------------------------------------------------------------------------------
def _e(value: Any) -> str:
    """HTML-escape anything (quotes too, so the result is safe inside attributes)."""
    return html.escape("" if value is None else str(value), quote=True)


_MD_SPECIAL = re.compile(r"([\\`*_\[\]|#~])")


def _md(value: Any, limit: int = 300) -> str:
    """Escape a string for one Markdown table cell: HTML, Markdown syntax, pipes, newlines."""
    text = "" if value is None else " ".join(str(value).split())
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    return _MD_SPECIAL.sub(r"\\\1", html.escape(text, quote=False))


def _num(x: float | None, digits: int = 2, signed: bool = False) -> str:
    if x is None:
        return _DASH
    return f"{x:+.{digits}f}" if signed else f"{x:.{digits}f}"


def _dur(seconds: float | None) -> str:
    if seconds is None:
        return _DASH
    sign, s = ("-" if seconds < 0 else ""), abs(int(round(seconds)))
    if s < 60:
        return f"{sign}{s}s"
    if s < 3600:
        return f"{sign}{s // 60}m {s % 60:02d}s"
    return f"{sign}{s // 3600}h {(s % 3600) // 60:02d}m"


def _bytes(n: float | None) -> str:
    if n is None:
        return _DASH
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"  # pragma: no cover - the loop always returns


def _pct(x: float | None) -> str:
    return _DASH if x is None else f"{100 * x:.0f}%"


def _ci(ci: Sequence[float] | None, signed: bool = True) -> str:
    if not ci:
        return _DASH
    return f"[{_num(ci[0], signed=signed)}, {_num(ci[1], signed=signed)}]"


def _noise_label(m: Mapping[str, Any]) -> str:
    if m.get("within_noise") is None:
        return ""
    return "within noise" if m["within_noise"] else "beyond noise"


def _improvement_text(m: Mapping[str, Any]) -> str:
    if m.get("improvement") is None:
        if not m.get("valid_submissions"):
            return "no valid submission"
        if m.get("baseline") is not None:
            return "not comparable: the best was graded under other evaluation settings"
        return "no baseline"
    text = f"{m['improvement']:+.2f} points"
    if m.get("improvement_ci95"):
        text += f" (95% CI {_ci(m['improvement_ci95'])}"
        label = _noise_label(m)
        text += f", {label})" if label else ")"
    return text


def _notes(tr: Mapping[str, Any]) -> list[str]:
    notes = []
    label = _noise_label(tr)
    if label:
        notes.append(label)
    if tr.get("comparable") is False:
        notes.append("graded under other evaluation settings than the baseline: not comparable")
    if tr.get("is_copy"):
        notes.append("copy of a given model")
    if tr.get("duplicate_of") is not None:
        notes.append(f"duplicate of #{tr['duplicate_of']}")
    if tr.get("error"):
        notes.append(f"error: {tr['error']}")
    return notes


def _lines_text(change: Mapping[str, Any] | None) -> str:
    if not change or change.get("added") is None:
        return _DASH
    return f"+{change['added']} / -{change['removed']}"


def _changes_by_id(m: Mapping[str, Any]) -> dict[int, Mapping[str, Any]]:
    return {int(c["id"]): c for c in m.get("code_changes", [])}


def _delta(score: float | None, baseline: float | None) -> float | None:
    return score - baseline if score is not None and baseline is not None else None


def _delta_text(tr: Mapping[str, Any], baseline: float | None) -> str:
    """``+1.33 [-0.33, +2.67]``: the change against the baseline with its paired 95% CI."""
    if tr.get("comparable") is False:
        return _DASH
    text = _num(_delta(tr["score"], baseline), signed=True)
    if tr.get("improvement_ci95"):
        text += f" {_ci(tr['improvement_ci95'])}"
    return text


# -- Markdown ----------------------------------------------------------------------------------
def render_markdown(m: Mapping[str, Any]) -> str:
    """The Markdown report for a metrics dict (as returned by ``compute_metrics``)."""
    res = m.get("resources")
    best_id = m.get("best_submission_id")
    lines = [
        f"# agent2rl run {_md(m['run_id'])}",
        "",
        "| | |",
        "|---|---|",
        f"| Task | {_md(m['task'])} (v{_md(m.get('task_version'))}) |",
        f"| Agent | {_md(m['agent'])}"
        + (f" via {_md(m['driver'])}" if m.get("driver") else "")
        + (f", mode {_md(m['mode'])}" if m.get("mode") else "")
        + " |",
        f"| Model | {_md(m['model'])} |",
        f"| Status | {_md(m['status'])}"
        + (f": {_md(m['error'])}" if m.get("error") else "")
        + " |",
        f"| Budget | {_dur(m.get('budget_s'))}, used {_pct(m.get('time_used_ratio'))} |",
        f"| Score | baseline {_num(m.get('baseline'))} → best {_num(m.get('best_score'))}"
        + (
            f" (submission #{best_id}, 95% CI {_ci(m.get('best_score_ci95'), signed=False)})"
            if best_id
            else ""
        )
        + " |",
        f"| Improvement | {_md(_improvement_text(m))} |",
        f"| Submissions | {m['submissions']} (valid {m['valid_submissions']}, "
        f"copies {m['copy_model_count']}, duplicates {m['duplicate_count']}); "
        f"rejected attempts {m['rejected_attempts']} |",
        f"| Time to first improvement | {_dur(m.get('time_to_first_improvement'))} |",
        f"| Time to best | {_dur(m.get('time_to_best'))} |",
        f"| Last submission before deadline | {_dur(m.get('last_submit_gap'))} |",
        f"| Monotonic ratio | {_num(m.get('monotonic_ratio'))} |",
        f"| Code changed | {m.get('total_lines_changed', 0)} lines |",
        "",
        "## Submissions",
        "",
    ]
    traj = m.get("trajectory", [])
    if traj:
        changes = _changes_by_id(m)
        lines += [
            "| # | t | status | score | Δ baseline [95% CI] | best so far | lines | path | notes |",
            "|---:|---:|---|---:|---:|---:|---:|---|---|",
        ]
        for tr in traj:
            lines.append(
                f"| {tr['id']} | {_dur(tr['t'])} | {_md(tr['status'])} | {_num(tr['score'])} "
                f"| {_delta_text(tr, m.get('baseline'))} "
                f"| {_num(tr['best_so_far'])} | {_lines_text(changes.get(tr['id']))} "
                f"| {_md(tr.get('path'))} | {_md('; '.join(_notes(tr)))} |"
            )
        lines.append("")
        lines.append("Code diffs per submission: `diffs/<id>.diff`.")
    else:
        lines.append("No submissions.")
    lines += ["", "## Rejected attempts", ""]
    rejections = m.get("rejections", [])
    if rejections:
        lines += ["| t | HTTP | path | reason |", "|---:|---:|---|---|"]
        for r in rejections[:MAX_REJECTION_ROWS]:
            lines.append(
                f"| {_dur(r['t'])} | {r['http_status']} | {_md(r.get('path'))} "
                f"| {_md(r.get('reason'))} |"
            )
        if len(rejections) > MAX_REJECTION_ROWS:
            lines.append(f"\n… and {len(rejections) - MAX_REJECTION_ROWS} more.")
    else:
        lines.append("None.")
    lines += ["", "## Resources", ""]
    if res:
        lines.append(
            f"Peak RSS {_bytes(res.get('peak_rss_bytes'))}, mean CPU "
            f"{_num(res.get('mean_cpu_percent'), 1)}%, at most {res.get('max_procs') or _DASH} "
            f"processes ({res['n_samples']} samples)."
        )
    else:
        lines.append("No resource samples recorded.")
    if m.get("group_scores"):
        lines += ["", "## Scores by task type", "", *_groups_md(m["group_scores"])]
    if m.get("env_usage") is not None:
        lines += ["", "## Environment rollouts", "", _env_text(m["env_usage"])]
    lines += ["", "## LLM usage", "", _usage_text(m)]
    for flag in m.get("mode_flags") or []:
        lines.append(f"\n**Mode check:** {_md(flag)}")
    return "\n".join(lines) + "\n"


def _usage_text(m: Mapping[str, Any]) -> str:
    """One paragraph on the tokens the agent's LLM used (through the metering proxy)."""
    u = m.get("llm_usage")
    if not u:
        return "No LLM traffic recorded (not an LLM agent, or no metering proxy)."
    cost = f"${u['cost_usd']:.4f}" + (
        f" (lower bound: {u['unpriced_requests']} requests on unpriced models)"
        if u.get("unpriced_requests")
        else ""
    )
    budget = f" of a budget of {m['token_budget']:,}" if m.get("token_budget") else ""
    return (
        f"{u['requests']} requests ({u['refused']} refused, {u['errors']} errors), "
        f"{u['input_tokens']:,} input tokens ({u['cached_tokens']:,} cached) and "
        f"{u['output_tokens']:,} output tokens{budget}; estimated cost {cost}. "
        f"Models: {', '.join(sorted(u.get('by_model') or {})) or _DASH}."
    )


def _group_rows(groups: Mapping[str, Any]) -> list[tuple[str, str, str, str]]:
    """(group, items, baseline score, best score) rows of a ``group_scores`` metric."""
    base, best = groups.get("baseline") or {}, groups.get("best") or {}
    rows = []
    for g in sorted(set(base) | set(best)):
        n = (best.get(g) or base.get(g) or {}).get("n")
        rows.append(
            (
                g,
                str(n) if n is not None else _DASH,
                _num((base.get(g) or {}).get("score")),
                _num((best.get(g) or {}).get("score")),
            )
        )
    return rows


def _groups_md(groups: Mapping[str, Any]) -> list[str]:
    out = ["| task type | items | baseline | best |", "|---|---:|---:|---:|"]
    out += [f"| {_md(g)} | {n} | {b} | {t} |" for g, n, b, t in _group_rows(groups)]
    return out


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _env_text(u: Mapping[str, Any]) -> str:
    """One paragraph on the episodes and steps the agent played through the rollout service."""
    if not u.get("episodes"):
        return "The rollout service ran, but the agent played no episode through it."
    share = u["admissible_steps"] / u["steps"] if u["steps"] else None
    return (
        f"{_count(u['episodes'], 'episode')} on {_count(u['games'], 'game')} "
        f"({u['finished_episodes']} finished, "
        f"{u['won_episodes']} won), {u['steps']:,} environment steps "
        f"({_pct(share)} admissible actions), from {_dur(u.get('first_step_t'))} to "
        f"{_dur(u.get('last_step_t'))} into the budget."
    )


# -- SVG plot ----------------------------------------------------------------------------------
_W, _H = 760, 360
_ML, _MR, _MT, _MB = 58, 18, 38, 48


def _nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    """Round-numbered ticks (1/2/2.5/5 x 10^k steps) covering [lo, hi]."""
    if not hi > lo:
        hi = lo + 1.0
    raw = (hi - lo) / max(1, n)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(k * mag for k in (1, 2, 2.5, 5, 10) if raw <= k * mag * (1 + 1e-9))
    start = math.floor(lo / step + 1e-9) * step
    end = math.ceil(hi / step - 1e-9) * step
    return [start + i * step for i in range(int(round((end - start) / step)) + 1)]


def _tick_label(v: float) -> str:
    return f"{round(v, 6) + 0.0:g}"


def _f(v: float) -> str:
    """Coordinates with fixed precision so the SVG text is stable between runs."""
    return f"{v:.1f}"


def _y_domain(m: Mapping[str, Any]) -> list[float]:
    values = [tr["score"] for tr in m.get("trajectory", []) if tr["score"] is not None]
    if m.get("baseline") is not None:
        values.append(m["baseline"])
    if not values:
        return _nice_ticks(0.0, 100.0)
    vmin, vmax = min(values), max(values)
    pad = max(1.0, 0.1 * (vmax - vmin))
    # Scores live in [0, 100]: padding must not push the axis past those ends.
    lo = max(vmin - pad, min(0.0, vmin))
    hi = min(vmax + pad, max(100.0, vmax))
    return _nice_ticks(lo, hi)


def _x_domain(m: Mapping[str, Any]) -> list[float]:
    ends = [(m.get("budget_s") or 0) / 60, (m.get("duration_s") or 0) / 60]
    ends += [tr["t"] / 60 for tr in m.get("trajectory", [])]
    lo = min([0.0] + [tr["t"] / 60 for tr in m.get("trajectory", [])])
    hi = max(ends)
    return _nice_ticks(lo, hi if hi > lo else lo + 1.0, 6)


# Marker shapes centred on the origin; each point is translated into place, the legend reuses them.
_SHAPES = {
    "pt-ok": '<circle class="m ok" r="5"/>',
    "pt-best": '<circle class="m ok" r="5"/><circle class="m bestring" r="9"/>',
    "pt-dup": '<circle class="m dup" r="5"/>',
    "pt-copy": '<path class="m copy" d="M0,-6L6,0L0,6L-6,0Z"/>',
    "pt-failed": '<path class="m fail" d="M-5,-5L5,5M-5,5L5,-5"/>',
    "pt-other": '<circle class="m other" r="4"/>',
}


def _marker_kind(tr: Mapping[str, Any], best_id: int | None) -> str:
    """Filled circle (graded; ringed if best), hollow circle (duplicate), diamond (copy of a
    given model), red cross (failed) or grey dot (never finished)."""
    if tr["score"] is None:
        return "pt-failed" if tr["status"] == "failed" else "pt-other"
    if tr.get("is_copy"):
        return "pt-copy"
    if tr.get("duplicate_of") is not None:
        return "pt-dup"
    return "pt-best" if tr["id"] == best_id else "pt-ok"


def _best_steps(m: Mapping[str, Any], x_end: float) -> list[tuple[float, float]]:
    """Best-so-far as a step function, from the baseline at t=0 to the end of the run."""
    pts: list[tuple[float, float]] = []
    cur = m.get("baseline")
    if cur is not None:
        pts.append((0.0, cur))
    for tr in m.get("trajectory", []):
        score, t = tr["score"], tr["t"] / 60
        if score is None:
            continue
        if cur is None:
            pts.append((t, score))
            cur = score
        elif score > cur:
            pts += [(t, cur), (t, score)]
            cur = score
    if cur is not None:
        pts.append((max(x_end, pts[-1][0]), cur))
    return pts


def score_plot_svg(m: Mapping[str, Any]) -> str:
    """An inline SVG of score against minutes since start.

    A dashed line at the baseline, one marker per submission (failed and unfinished ones sit on
    the x axis since they have no score), the best-so-far step line, ticks and axis labels.
    Each marker is a ``<g class="pt ...">`` linking to ``#diff-<id>``.
    """
    xt, yt = _x_domain(m), _y_domain(m)
    x0, x1, y0, y1 = _ML, _W - _MR, _H - _MB, _MT

    def sx(v: float) -> float:
        return x0 + (v - xt[0]) / (xt[-1] - xt[0]) * (x1 - x0)

    def sy(v: float) -> float:
        return y0 + (v - yt[0]) / (yt[-1] - yt[0]) * (y1 - y0)

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="plot" viewBox="0 0 {_W} {_H}" '
        f'width="{_W}" height="{_H}" role="img" aria-label="score versus time">',
        f'<rect x="{x0}" y="{y1}" width="{x1 - x0}" height="{y0 - y1}" class="area"/>',
    ]
    for v in yt:
        y = _f(sy(v))
        parts.append(f'<line class="grid" x1="{x0}" x2="{x1}" y1="{y}" y2="{y}"/>')
        parts.append(
            f'<text class="tick" x="{x0 - 6}" y="{y}" dy="4" text-anchor="end">'
            f"{_tick_label(v)}</text>"
        )
    for v in xt:
        x = _f(sx(v))
        parts.append(f'<line class="axis" x1="{x}" x2="{x}" y1="{y0}" y2="{y0 + 5}"/>')
        parts.append(
            f'<text class="tick" x="{x}" y="{y0 + 18}" text-anchor="middle">{_tick_label(v)}</text>'
        )
    parts += [
        f'<line class="axis" x1="{x0}" x2="{x1}" y1="{y0}" y2="{y0}"/>',
        f'<line class="axis" x1="{x0}" x2="{x0}" y1="{y0}" y2="{y1}"/>',
        f'<text class="label" x="{(x0 + x1) / 2:.1f}" y="{_H - 8}" text-anchor="middle">'
        "minutes since start</text>",
        f'<text class="label" transform="translate(14 {(y0 + y1) / 2:.1f}) rotate(-90)" '
        'text-anchor="middle">score</text>',
    ]
    baseline = m.get("baseline")
    if baseline is not None:
        y = _f(sy(baseline))
        parts.append(f'<line class="baseline" x1="{x0}" x2="{x1}" y1="{y}" y2="{y}"/>')
        parts.append(
            f'<text class="note" x="{x1 - 4}" y="{y}" dy="-5" text-anchor="end">'
            f"baseline {baseline:.2f}</text>"
        )
    steps = _best_steps(m, (m.get("duration_s") or 0) / 60)
    if steps:
        pts = " ".join(f"{_f(sx(x))},{_f(sy(y))}" for x, y in steps)
        parts.append(f'<polyline class="bsf" points="{pts}"/>')
    best_id = m.get("best_submission_id")
    for tr in m.get("trajectory", []):
        x = sx(tr["t"] / 60)
        y = sy(tr["score"]) if tr["score"] is not None else y0 - 7
        kind = _marker_kind(tr, best_id)
        title = f"#{tr['id']} at {_dur(tr['t'])}: " + (
            f"{tr['score']:.2f}" if tr["score"] is not None else _e(tr["status"])
        )
        parts.append(
            f'<a href="#diff-{int(tr["id"])}"><g class="pt {kind}" data-id="{int(tr["id"])}" '
            f'transform="translate({_f(x)} {_f(y)})"><title>{_e(title)}</title>'
            f"{_SHAPES[kind]}</g></a>"
        )
    if not m.get("trajectory") and baseline is None:
        parts.append(
            f'<text class="note" x="{(x0 + x1) / 2:.1f}" y="{(y0 + y1) / 2:.1f}" '
            'text-anchor="middle">no scores to plot</text>'
        )
    parts.append(_legend(x0))
    parts.append("</svg>")
    return "\n".join(parts)


def _legend(x: float) -> str:
    items = [
        (_SHAPES["pt-ok"], "graded"),
        (_SHAPES["pt-best"], "best"),
        (_SHAPES["pt-copy"], "copy"),
        (_SHAPES["pt-dup"], "duplicate"),
        (_SHAPES["pt-failed"], "failed"),
        ('<path class="bsf" d="M-8,4L0,4L0,-4L8,-4"/>', "best so far"),
        ('<line class="baseline" x1="-9" x2="9" y1="0" y2="0"/>', "baseline"),
    ]
    out, cx = ['<g class="legend">'], x + 10
    for shape, label in items:
        out.append(
            f'<g transform="translate({cx:.0f} 18)">{shape}'
            f'<text class="tick" x="13" y="4">{label}</text></g>'
        )
        cx += 28 + 7 * len(label)
    out.append("</g>")
    return "".join(out)


# -- HTML --------------------------------------------------------------------------------------
_CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;color:#1d2430;
 margin:0;background:#f6f7f9}
main{max-width:1100px;margin:0 auto;padding:24px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 10px}
.sub{color:#5b6573;margin-bottom:16px}
.cards{display:flex;flex-wrap:wrap;gap:10px}
.card{background:#fff;border:1px solid #dde2e8;border-radius:8px;padding:10px 14px;min-width:150px}
.card b{display:block;font-size:19px}.card span{color:#5b6573;font-size:12px}
.tag{display:inline-block;border-radius:10px;padding:0 8px;font-size:12px;background:#e8edf3}
.tag.noise{background:#fff1c2}.tag.real{background:#d5f5dc}
table{border-collapse:collapse;width:100%;background:#fff;border:1px solid #dde2e8}
th,td{padding:5px 8px;border-bottom:1px solid #eef1f4;text-align:left;vertical-align:top}
th{background:#f0f3f6;font-weight:600}td.n{text-align:right;font-variant-numeric:tabular-nums}
td.path{font-family:ui-monospace,Menlo,monospace;font-size:12px;word-break:break-all}
tr.failed td{color:#9b1c1c}tr.best td{background:#eefbf1}
.plot{background:#fff;border:1px solid #dde2e8;border-radius:8px;max-width:100%;height:auto}
.plot .area{fill:#fff}.plot .grid{stroke:#eef1f4}.plot .axis{stroke:#56606d}
.plot .tick{font-size:11px;fill:#56606d}.plot .label{font-size:12px;fill:#1d2430}
.plot .note{font-size:11px;fill:#8a5a00}
.plot .baseline{stroke:#c27c00;stroke-width:1.5;stroke-dasharray:6 4}
.plot .bsf{fill:none;stroke:#1a7f37;stroke-width:2}
.plot .m.ok{fill:#2563eb}.plot .m.dup{fill:#fff;stroke:#2563eb;stroke-width:2}
.plot .m.copy{fill:#fff;stroke:#c27c00;stroke-width:2}
.plot .m.fail{stroke:#c81e1e;stroke-width:2.5}.plot .m.other{fill:#9aa3ad}
.plot .m.bestring{fill:none;stroke:#1a7f37;stroke-width:2}
.plot a:hover .m{opacity:.6}
details{background:#fff;border:1px solid #dde2e8;border-radius:6px;margin:6px 0}
summary{cursor:pointer;padding:6px 10px;font-weight:600}
details:target{outline:2px solid #2563eb}
pre.diff{margin:0;padding:8px 10px;overflow:auto;max-height:600px;font-size:12px;
 border-top:1px solid #eef1f4;background:#fbfcfd}
pre.diff .a{color:#116329;background:#e6ffec}pre.diff .d{color:#82071e;background:#ffebe9}
pre.diff .h{color:#6f42c1}pre.diff .f{font-weight:700}
.muted{color:#5b6573}
"""

# Following a #diff-<id> link should show the diff, so open the targeted <details>.
_JS = """
function openTarget(){var h=location.hash.slice(1);if(!h)return;
var el=document.getElementById(h);if(el&&el.tagName==='DETAILS')el.open=true;}
window.addEventListener('hashchange',openTarget);window.addEventListener('load',openTarget);
"""


def _card(value: str, label: str) -> str:
    return f'<div class="card"><b>{value}</b><span>{_e(label)}</span></div>'


def _headline_html(m: Mapping[str, Any]) -> str:
    imp = m.get("improvement")
    label = _noise_label(m)
    tag = ""
    if label:
        cls = "noise" if m.get("within_noise") else "real"
        tag = f' <span class="tag {cls}">{_e(label)}</span>'
    imp_value = _e(_num(imp, signed=True)) + tag if imp is not None else _e(_improvement_text(m))
    ci = m.get("improvement_ci95")
    cards = [
        _card(
            f"{_e(_num(m.get('baseline')))} → {_e(_num(m.get('best_score')))}",
            "baseline → best score",
        ),
        _card(imp_value, f"improvement, 95% CI {_ci(ci)}" if ci else "improvement"),
        _card(f"{m['valid_submissions']} / {m['submissions']}", "valid / submissions"),
        _card(_e(_dur(m.get("time_to_first_improvement"))), "time to first improvement"),
        _card(_e(_dur(m.get("time_to_best"))), "time to best"),
        _card(_e(_pct(m.get("time_used_ratio"))), f"of {_dur(m.get('budget_s'))} budget used"),
        _card(str(int(m.get("total_lines_changed") or 0)), "lines of code changed"),
        _card(str(m["rejected_attempts"]), "rejected attempts"),
    ]
    return '<div class="cards">' + "".join(cards) + "</div>"


def _submissions_html(m: Mapping[str, Any]) -> str:
    traj = m.get("trajectory", [])
    if not traj:
        return '<p class="muted">No submissions.</p>'
    changes = _changes_by_id(m)
    rows = [
        "<table><thead><tr><th>#</th><th>t</th><th>status</th><th>score</th>"
        "<th>Δ baseline [95% CI]</th><th>best so far</th><th>lines +/−</th><th>path</th>"
        "<th>notes</th>"
        "</tr></thead><tbody>"
    ]
    for tr in traj:
        sid = int(tr["id"])
        cls = "best" if sid == m.get("best_submission_id") else ""
        cls = "failed" if tr["status"] == "failed" else cls
        rows.append(
            f'<tr class="{cls}"><td><a href="#diff-{sid}">#{sid}</a></td>'
            f'<td class="n">{_e(_dur(tr["t"]))}</td><td>{_e(tr["status"])}</td>'
            f'<td class="n">{_e(_num(tr["score"]))}</td>'
            f'<td class="n">{_e(_delta_text(tr, m.get("baseline")))}</td>'
            f'<td class="n">{_e(_num(tr["best_so_far"]))}</td>'
            f'<td class="n">{_e(_lines_text(changes.get(sid)))}</td>'
            f'<td class="path">{_e(tr.get("path"))}</td>'
            f"<td>{'<br>'.join(_e(n) for n in _notes(tr))}</td></tr>"
        )
    rows.append("</tbody></table>")
    return "".join(rows)


def _rejections_html(m: Mapping[str, Any]) -> str:
    rejections = m.get("rejections", [])
    if not rejections:
        return '<p class="muted">None.</p>'
    rows = [
        "<table><thead><tr><th>t</th><th>HTTP</th><th>path</th><th>reason</th></tr></thead><tbody>"
    ]
    for r in rejections[:MAX_REJECTION_ROWS]:
        rows.append(
            f'<tr><td class="n">{_e(_dur(r["t"]))}</td><td class="n">{int(r["http_status"])}</td>'
            f'<td class="path">{_e(r.get("path"))}</td><td>{_e(r.get("reason"))}</td></tr>'
        )
    rows.append("</tbody></table>")
    if len(rejections) > MAX_REJECTION_ROWS:
        rows.append(f'<p class="muted">… and {len(rejections) - MAX_REJECTION_ROWS} more.</p>')
    return "".join(rows)


def _resources_html(m: Mapping[str, Any]) -> str:
    res = m.get("resources")
    if not res:
        return '<p class="muted">No resource samples recorded.</p>'
    return (
        '<div class="cards">'
        + "".join(
            [
                _card(_e(_bytes(res.get("peak_rss_bytes"))), "peak RSS"),
                _card(_e(_num(res.get("mean_cpu_percent"), 1)) + "%", "mean CPU"),
                _card(
                    _e(res.get("max_procs") if res.get("max_procs") is not None else _DASH),
                    "max processes",
                ),
                _card(str(int(res["n_samples"])), "samples"),
            ]
        )
        + "</div>"
    )


def _groups_html(m: Mapping[str, Any]) -> str:
    if not m.get("group_scores"):
        return ""
    rows = "".join(
        f'<tr><td>{_e(g)}</td><td class="n">{_e(n)}</td><td class="n">{_e(b)}</td>'
        f'<td class="n">{_e(t)}</td></tr>'
        for g, n, b, t in _group_rows(m["group_scores"])
    )
    return (
        "<h2>Scores by task type</h2><table><thead><tr><th>task type</th><th>items</th>"
        f"<th>baseline</th><th>best</th></tr></thead><tbody>{rows}</tbody></table>\n"
    )


def env_steps_svg(u: Mapping[str, Any]) -> str:
    """Bars of environment steps per time bin over the budget clock (empty with no steps)."""
    timeline = u.get("timeline") or []
    if not timeline:
        return ""
    w, h, ml, mb, mt = _W, 160, _ML, 32, 12
    peak = max(c for _, c in timeline) or 1
    width = (timeline[1][0] - timeline[0][0]) if len(timeline) > 1 else 1.0
    end = timeline[-1][0] + width
    bar_w = (w - ml - _MR) / len(timeline)
    bars = []
    for t, c in timeline:
        bh = (h - mt - mb) * c / peak
        x = ml + (w - ml - _MR) * t / end
        bars.append(
            f'<rect x="{_f(x)}" y="{_f(h - mb - bh)}" width="{_f(max(1.0, bar_w - 1))}" '
            f'height="{_f(bh)}" fill="#2563eb"><title>{_e(_dur(t))}: {c} steps</title></rect>'
        )
    return (
        f'<svg viewBox="0 0 {w} {h}" width="{w}" height="{h}" role="img" '
        'aria-label="environment steps over time">'
        f'<text x="{ml}" y="{h - 8}" font-size="11">0</text>'
        f'<text x="{w - _MR}" y="{h - 8}" font-size="11" text-anchor="end">{_e(_dur(end))}</text>'
        f'<text x="{ml - 6}" y="{mt + 10}" font-size="11" text-anchor="end">{peak}</text>'
        f'<line x1="{ml}" y1="{h - mb}" x2="{w - _MR}" y2="{h - mb}" stroke="#888"/>'
        + "".join(bars)
        + "</svg>"
    )


def _env_html(m: Mapping[str, Any]) -> str:
    u = m.get("env_usage")
    if u is None:
        return ""
    cards = "".join(
        [
            _card(str(u["episodes"]), "episodes"),
            _card(f"{u['steps']:,}", "environment steps"),
            _card(str(u["won_episodes"]), "episodes won"),
            _card(str(u["games"]), "games played"),
        ]
    )
    return (
        f'<h2>Environment rollouts</h2><div class="cards">{cards}</div>'
        f"<p>{_e(_env_text(u))}</p>{env_steps_svg(u)}\n"
    )


def _diff_body(text: str) -> str:
    """Escaped diff text with added/removed/hunk lines wrapped in spans for colour."""
    out = []
    for line in text.splitlines():
        esc = _e(line)
        if line.startswith("diff --git"):
            out.append(f'<span class="f">{esc}</span>')
        elif line.startswith("@@"):
            out.append(f'<span class="h">{esc}</span>')
        elif line.startswith("+") and not line.startswith("+++"):
            out.append(f'<span class="a">{esc}</span>')
        elif line.startswith("-") and not line.startswith("---"):
            out.append(f'<span class="d">{esc}</span>')
        else:
            out.append(esc)
    return "\n".join(out)


def _diffs_html(m: Mapping[str, Any], diffs: Mapping[int, str | None]) -> str:
    changes = _changes_by_id(m)
    out = []
    for tr in m.get("trajectory", []):
        sid = int(tr["id"])
        change = changes.get(sid) or {}
        text = diffs.get(sid)
        base = change.get("base")
        vs = "the empty tree" if base == EMPTY_TREE else f"{str(base)[:10]}"
        if text is None:
            summary = f"#{sid} · no code snapshot"
            body = '<p class="muted" style="padding:0 10px">No readable code snapshot.</p>'
        else:
            summary = f"#{sid} · {_lines_text(change)} lines vs {vs}"
            if not text:
                body = '<p class="muted" style="padding:0 10px">No code change.</p>'
            else:
                note = ""
                if len(text) > DIFF_EMBED_LIMIT:
                    text = text[:DIFF_EMBED_LIMIT]
                    note = (
                        f'<p class="muted" style="padding:0 10px">Truncated; the full diff '
                        f'is in <a href="diffs/{sid}.diff">diffs/{sid}.diff</a>.</p>'
                    )
                body = f'<pre class="diff">{_diff_body(text)}</pre>{note}'
        out.append(f'<details id="diff-{sid}"><summary>{_e(summary)}</summary>{body}</details>')
    return "".join(out) or '<p class="muted">No submissions.</p>'


def render_html(m: Mapping[str, Any], diffs: Mapping[int, str | None] | None = None) -> str:
    """The self-contained HTML report for a metrics dict and the submissions' diffs.

    ``diffs`` maps submission id to diff text (None: no snapshot); omitted, every submission
    is shown without code. Every anchor ``#diff-<id>`` in the table and the plot has a matching
    ``<details id="diff-<id>">``.
    """
    diffs = diffs or {}
    title = f"agent2rl · {m['task']} · {m['agent']} · {m['run_id']}"
    status = _e(m["status"]) + (f": {_e(m['error'])}" if m.get("error") else "")
    driver = f" via {_e(m['driver'])}" if m.get("driver") else ""
    driver += f", mode {_e(m['mode'])}" if m.get("mode") else ""
    flags = "".join(
        f'<p class="tag noise">Mode check: {_e(f)}</p>' for f in m.get("mode_flags") or []
    )
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{_e(title)}</title>
<style>{_CSS}</style>
</head><body><main>
<h1>{_e(m["task"])} · {_e(m["agent"])}</h1>
<div class="sub">run <b>{_e(m["run_id"])}</b> · task version {_e(m.get("task_version"))}
 · agent {_e(m["agent"])}{driver} · model <b>{_e(m["model"])}</b> · status <b>{status}</b></div>
{_headline_html(m)}
<h2>Score over time</h2>
{score_plot_svg(m)}
<h2>Submissions</h2>
{_submissions_html(m)}
<h2>Rejected attempts</h2>
{_rejections_html(m)}
<h2>Resources</h2>
{_resources_html(m)}
{_groups_html(m)}{_env_html(m)}<h2>LLM usage</h2>
<p>{_e(_usage_text(m))}</p>{flags}
<h2>Code changes</h2>
{_diffs_html(m, diffs)}
</main>
<script>{_JS}</script>
</body></html>
"""
