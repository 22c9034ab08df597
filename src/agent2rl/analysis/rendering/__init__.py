"""How the analysis pages are written: escaping, and interactive charts that work offline.

Shared by the per-run report and the cross-run dashboard; it imports neither. Every string
that could have come from an agent passes through :func:`esc` or :func:`md_cell`.
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
