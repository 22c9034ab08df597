"""The report's figures as inline SVG: score over time and environment steps over time.

Drawn here as text rather than with a plotting library so that ``report.html`` stays one
self-contained file and its bytes are the same on every run (coordinates have fixed
precision). Titles that carry agent-controlled text are escaped.
"""

from __future__ import annotations

import html
import math

from agent2rl.analysis.run_metrics import EnvUsage, RunMetrics, TrajectoryPoint
from agent2rl.formatting import format_duration


def _e(value: object) -> str:
    """HTML-escape anything (quotes too, so the result is safe inside attributes)."""
    return html.escape("" if value is None else str(value), quote=True)


# -- score over time ---------------------------------------------------------------------------
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


def _y_domain(m: RunMetrics) -> list[float]:
    values = [tr.score for tr in m.trajectory if tr.score is not None]
    if m.baseline is not None:
        values.append(m.baseline)
    if not values:
        return _nice_ticks(0.0, 100.0)
    vmin, vmax = min(values), max(values)
    pad = max(1.0, 0.1 * (vmax - vmin))
    # Scores live in [0, 100]: padding must not push the axis past those ends.
    lo = max(vmin - pad, min(0.0, vmin))
    hi = min(vmax + pad, max(100.0, vmax))
    return _nice_ticks(lo, hi)


def _x_domain(m: RunMetrics) -> list[float]:
    ends = [(m.budget_s or 0) / 60, (m.duration_s or 0) / 60]
    ends += [tr.t / 60 for tr in m.trajectory]
    lo = min([0.0] + [tr.t / 60 for tr in m.trajectory])
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


def _marker_kind(tr: TrajectoryPoint, best_id: int | None) -> str:
    """Filled circle (graded; ringed if best), hollow circle (duplicate), diamond (copy of a
    given model), red cross (failed) or grey dot (never finished)."""
    if tr.score is None:
        return "pt-failed" if tr.status == "failed" else "pt-other"
    if tr.is_copy:
        return "pt-copy"
    if tr.duplicate_of is not None:
        return "pt-dup"
    return "pt-best" if tr.id == best_id else "pt-ok"


def _best_steps(m: RunMetrics, x_end: float) -> list[tuple[float, float]]:
    """Best-so-far as a step function, from the baseline at t=0 to the end of the run."""
    pts: list[tuple[float, float]] = []
    cur = m.baseline
    if cur is not None:
        pts.append((0.0, cur))
    for tr in m.trajectory:
        score, t = tr.score, tr.t / 60
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


def score_plot_svg(m: RunMetrics) -> str:
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
    baseline = m.baseline
    if baseline is not None:
        y = _f(sy(baseline))
        parts.append(f'<line class="baseline" x1="{x0}" x2="{x1}" y1="{y}" y2="{y}"/>')
        parts.append(
            f'<text class="note" x="{x1 - 4}" y="{y}" dy="-5" text-anchor="end">'
            f"baseline {baseline:.2f}</text>"
        )
    steps = _best_steps(m, (m.duration_s or 0) / 60)
    if steps:
        pts = " ".join(f"{_f(sx(x))},{_f(sy(y))}" for x, y in steps)
        parts.append(f'<polyline class="bsf" points="{pts}"/>')
    for tr in m.trajectory:
        x = sx(tr.t / 60)
        y = sy(tr.score) if tr.score is not None else y0 - 7
        kind = _marker_kind(tr, m.best_submission_id)
        title = f"#{tr.id} at {format_duration(tr.t)}: " + (
            f"{tr.score:.2f}" if tr.score is not None else _e(tr.status)
        )
        parts.append(
            f'<a href="#diff-{tr.id}"><g class="pt {kind}" data-id="{tr.id}" '
            f'transform="translate({_f(x)} {_f(y)})"><title>{_e(title)}</title>'
            f"{_SHAPES[kind]}</g></a>"
        )
    if not m.trajectory and baseline is None:
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


# -- environment steps over time --------------------------------------------------------------
def env_steps_svg(u: EnvUsage) -> str:
    """Bars of environment steps per time bin over the budget clock (empty with no steps)."""
    timeline = u.timeline
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
            f'height="{_f(bh)}" fill="#2563eb">'
            f"<title>{_e(format_duration(t))}: {c} steps</title></rect>"
        )
    return (
        f'<svg viewBox="0 0 {w} {h}" width="{w}" height="{h}" role="img" '
        'aria-label="environment steps over time">'
        f'<text x="{ml}" y="{h - 8}" font-size="11">0</text>'
        f'<text x="{w - _MR}" y="{h - 8}" font-size="11" text-anchor="end">'
        f"{_e(format_duration(end))}</text>"
        f'<text x="{ml - 6}" y="{mt + 10}" font-size="11" text-anchor="end">{peak}</text>'
        f'<line x1="{ml}" y1="{h - mb}" x2="{w - _MR}" y2="{h - mb}" stroke="#888"/>'
        + "".join(bars)
        + "</svg>"
    )
