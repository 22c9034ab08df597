"""The report's figures as chart data: score over time and environment steps over time.

Drawn in the page by :mod:`agent2rl.analysis.rendering.charts` (uPlot, inlined), so
``report.html`` stays one self-contained file with hover values, zoom and series toggles, and
a ``<noscript>`` table of the same values.
"""

from __future__ import annotations

from agent2rl.analysis.rendering import Chart, Series
from agent2rl.analysis.report.run_metrics import EnvUsage, RunMetrics, TrajectoryPoint
from agent2rl.grading.ledger import SubmissionStatus

#: the score chart's series, by marker kind: (label, colour)
MARKERS = {
    "graded": ("graded", "#2563eb"),
    "best": ("best", "#1a7f37"),
    "copy": ("copy of a given model", "#c27c00"),
    "duplicate": ("duplicate", "#7aa2f7"),
    "failed": ("failed (no score; drawn on the x axis)", "#c81e1e"),
    "other": ("not finished (no score; on the x axis)", "#9aa3ad"),
}
BEST_SO_FAR = ("best so far", "#1a7f37")


def marker_kind(tr: TrajectoryPoint, best_id: int | None) -> str:
    """A submission's marker series: graded (``best`` for the run's best), ``copy`` of a given
    model, ``duplicate``, ``failed``, or ``other`` (never finished)."""
    if tr.score is None:
        return "failed" if tr.status == SubmissionStatus.FAILED else "other"
    if tr.is_copy:
        return "copy"
    if tr.duplicate_of is not None:
        return "duplicate"
    return "best" if tr.id == best_id else "graded"


def _best_steps(m: RunMetrics, x_end: float) -> list[tuple[float, float]]:
    """Best-so-far as (minute, score) change points, from the baseline at t=0 to the end."""
    pts: list[tuple[float, float]] = []
    cur = m.baseline
    if cur is not None:
        pts.append((0.0, cur))
    for tr in m.trajectory:
        if tr.score is None:
            continue
        if cur is None or tr.score > cur:
            cur = tr.score
            pts.append((tr.t / 60, cur))
    if cur is not None:
        pts.append((max(x_end, pts[-1][0]), cur))
    return pts


def score_chart(m: RunMetrics) -> Chart:
    """Score against minutes since start: one point series per marker kind (failed and
    unfinished submissions sit at the axis floor: they have no score), the best-so-far step
    line, the baseline dashed. A click at a submission's time opens its diff (``#diff-<id>``).
    The x axis spans 0 to the budget (or the run's duration, if longer)."""
    scores = [tr.score for tr in m.trajectory if tr.score is not None]
    floor = min([0.0, *scores] + ([m.baseline] if m.baseline is not None else []))
    by_kind: dict[str, tuple[list[float], list[float | None]]] = {k: ([], []) for k in MARKERS}
    for tr in m.trajectory:
        xs, ys = by_kind[marker_kind(tr, m.best_submission_id)]
        xs.append(tr.t / 60)
        ys.append(tr.score if tr.score is not None else floor)
    end = max((m.budget_s or 0) / 60, (m.duration_s or 0) / 60)
    steps = _best_steps(m, (m.duration_s or 0) / 60)
    series = [
        Series(BEST_SO_FAR[0], BEST_SO_FAR[1], [x for x, _ in steps], [y for _, y in steps],
               kind="step")
    ] if steps else []  # fmt: skip
    series += [
        Series(MARKERS[k][0], MARKERS[k][1], xs, ys, kind="points")
        for k, (xs, ys) in by_kind.items()
        if xs
    ]
    return Chart(
        id="score",
        title="score over time",
        x_label="minutes since start",
        y_label="score",
        series=series,
        hline=m.baseline,
        x_extent=(0.0, end) if (series or m.baseline is not None) else (),
        width=760,
        height=340,
        links={tr.t / 60: f"#diff-{tr.id}" for tr in m.trajectory},
    )


def env_steps_chart(u: EnvUsage) -> Chart | None:
    """Bars of environment steps per time bin on the budget clock; None without steps."""
    if not u.timeline:
        return None
    minutes, steps = [t / 60 for t, _ in u.timeline], [float(c) for _, c in u.timeline]
    return Chart(
        id="env-steps",
        title="environment steps over time",
        x_label="minutes since start",
        y_label="steps per bin",
        series=[Series("environment steps", "#2563eb", minutes, steps, kind="bars")],
        width=760,
        height=200,
    )
