"""How the analysis pages are written: escaping, and interactive charts that work offline.

Shared by the per-run report (:mod:`agent2rl.analysis.report`) and the cross-run dashboard
(:mod:`agent2rl.analysis.dashboard`); it imports neither. Numbers, durations and sizes are
formatted by :mod:`agent2rl.formatting`, the one format of the CLI and the pages. ``text``:
:func:`esc` and :func:`md_cell`, which every string that could have come from an agent passes
through; ``charts``: :class:`Chart` / :class:`Series` -> HTML drawn by uPlot (bundled, inlined,
nothing fetched), each chart's data also a ``<noscript>`` table.
"""

from agent2rl.analysis.rendering.charts import (
    UPLOT_CSS,
    UPLOT_JS,
    UPLOT_LICENSE,
    Chart,
    Series,
    chart_html,
    chart_runtime,
    chart_style,
    uplot_asset,
)
from agent2rl.analysis.rendering.text import esc, md_cell

__all__ = [
    "UPLOT_CSS",
    "UPLOT_JS",
    "UPLOT_LICENSE",
    "Chart",
    "Series",
    "chart_html",
    "chart_runtime",
    "chart_style",
    "esc",
    "md_cell",
    "uplot_asset",
]
