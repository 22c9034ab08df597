"""Read the charts of an analysis page back as data (what the page's script draws)."""

from __future__ import annotations

import json
import re
from typing import Any

_CHART = re.compile(
    r'<div class="a2r-chart" id="chart-[^"]*" data-chart="([^"]*)"[^>]*>.*?'
    r'<script type="application/json" class="chart-data">(.*?)</script>',
    re.S,
)


def chart_specs(page: str) -> dict[str, dict[str, Any]]:
    """Chart id -> its JSON data, for every chart placeholder in ``page``."""
    return {m.group(1): json.loads(m.group(2)) for m in _CHART.finditer(page)}
