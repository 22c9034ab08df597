"""How the analysis pages are written: escaping, and interactive charts that work offline.

Shared by the per-run report (:mod:`agent2rl.analysis.report`) and the cross-run dashboard
(:mod:`agent2rl.analysis.dashboard`); it imports neither. Numbers, durations and sizes are
formatted by :mod:`agent2rl.formatting`, the one format of the CLI and the pages.

Modules:

``text``
    :func:`esc` (HTML, attributes included) and :func:`md_cell` (one Markdown table cell):
    every string that could have come from an agent passes through one of them.
``charts``
    :class:`Chart` / :class:`Series` -> HTML: uPlot (bundled under ``vendor/``, inlined into
    the page, nothing fetched) draws them with hover values, drag-to-zoom and series toggles;
    each chart's data is also a ``<noscript>`` table, readable without JavaScript.
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
