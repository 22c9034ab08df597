"""Interactive charts for the self-contained analysis pages, drawn by uPlot.

A :class:`Chart` is data: its series, axis labels and an optional dashed reference line.
:func:`chart_html` writes it as a placeholder ``<div class="a2r-chart">`` holding

- the chart's data as JSON in a ``<script type="application/json">`` (the browser test and the
  unit tests read the figure from there, not from drawn pixels);
- a ``<noscript>`` table of the same values, so the page is readable without JavaScript.

:func:`chart_style` and :func:`chart_runtime` go once into a page (in ``<head>`` and before
``</body>``): uPlot's CSS and code, inlined from ``vendor/`` (uPlot 1.6.32, MIT; the live
viewer serves the same files), and a few lines that draw every placeholder with hover values
in the legend, drag-to-zoom on x (double-click resets) and a click on a legend entry that
hides or shows its series. Nothing is fetched, so a report or a dashboard still works offline
and archived as one file.

Bytes are deterministic: the JSON has sorted keys and floats rounded to 6 significant digits,
so writing a report twice gives the same file. Agent-controlled strings (labels, titles) are
JSON-escaped with ``<``, ``>`` and ``&`` as ``\\u003c``-style escapes, so no label can close the
``<script>`` element it sits in, and HTML-escaped in the table.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from agent2rl.analysis.rendering.text import esc

VENDOR = "vendor"
#: the bundled library's files (JavaScript, CSS, licence)
UPLOT_JS, UPLOT_CSS, UPLOT_LICENSE = "uPlot.iife.min.js", "uPlot.min.css", "uPlot.LICENSE"
#: replaces the minified file's first line (a banner with the project's URL) when inlined:
#: the page holds no address, and the licence's notice stays with the code
_UPLOT_NOTICE = "/*! uPlot v1.6.32, (c) 2022 Leon Sorokin, MIT License */"

SeriesKind = Literal["line", "step", "points", "bars"]


@dataclass(frozen=True)
class Series:
    """One series: ``ys[i]`` at ``xs[i]`` (None: no value there).

    ``kind``: ``line`` (straight segments), ``step`` (holds its value until the next x),
    ``points`` (markers only) or ``bars``. ``markers`` adds points to a line; ``dash`` dashes
    it; ``lo``/``hi`` (same length as ``xs``) shade a band around it. The colour must be
    ``#rrggbb`` (the band is that colour, translucent).
    """

    label: str
    color: str
    xs: Sequence[float]
    ys: Sequence[float | None]
    kind: SeriesKind = "line"
    markers: bool = False
    dash: bool = False
    lo: Sequence[float] | None = None
    hi: Sequence[float] | None = None


@dataclass(frozen=True)
class Chart:
    """A chart: ``series`` against one x axis.

    ``hline`` draws a dashed reference line labelled ``hline_label`` across the chart;
    ``x_extent`` adds x values with no point (e.g. 0 and the end of the budget) so the axis
    spans them; ``integer_x`` keeps x ticks whole (counts); ``links`` maps an x value to an
    href that a click at that x follows (the report's submissions link to their diffs).
    """

    id: str
    title: str
    x_label: str
    y_label: str
    series: Sequence[Series]
    hline: float | None = None
    hline_label: str = "baseline"
    x_extent: Sequence[float] = ()
    integer_x: bool = False
    width: int = 420
    height: int = 260
    links: Mapping[float, str] = field(default_factory=dict)


def _r(v: float | None) -> float | None:
    """A float rounded to 6 significant digits (stable JSON); None and non-finite -> None."""
    if v is None or not math.isfinite(v):
        return None
    return float(f"{v:.6g}")


def chart_data(chart: Chart) -> dict[str, Any]:
    """The JSON the page's script draws: ``x`` is the sorted union of every series' x values
    (and ``x_extent``); each series' ``y`` (and ``lo``/``hi``) is aligned to it, None where
    that series has no value. A series with two values at one x keeps the later one."""
    xs = sorted({_r(x) for s in chart.series for x in s.xs} | {_r(x) for x in chart.x_extent})
    xs = [x for x in xs if x is not None]
    pos = {x: i for i, x in enumerate(xs)}

    def aligned(s: Series, values: Sequence[float | None]) -> list[float | None]:
        out: list[float | None] = [None] * len(xs)
        for x, y in zip(s.xs, values, strict=True):
            if (rx := _r(x)) is not None:
                out[pos[rx]] = _r(y)
        return out

    series = [
        {
            "label": s.label,
            "color": s.color,
            "kind": s.kind,
            "markers": s.markers,
            "dash": s.dash,
            "y": aligned(s, s.ys),
            "lo": aligned(s, s.lo) if s.lo is not None and s.hi is not None else None,
            "hi": aligned(s, s.hi) if s.lo is not None and s.hi is not None else None,
        }
        for s in chart.series
    ]
    links = {pos[rx]: href for x, href in chart.links.items() if (rx := _r(x)) in pos}
    return {
        "id": chart.id,
        "title": chart.title,
        "x_label": chart.x_label,
        "y_label": chart.y_label,
        "x": xs,
        "series": series,
        "hline": _r(chart.hline),
        "hline_label": chart.hline_label,
        "integer_x": chart.integer_x,
        "width": chart.width,
        "height": chart.height,
        "links": [links.get(i) for i in range(len(xs))] if links else None,
    }


def _script_json(data: Any) -> str:
    """JSON safe inside ``<script>``: ``<``, ``>`` and ``&`` escaped, so no string in it can
    end the element (``</script>``) or open a comment."""
    text = json.dumps(data, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _cell(v: float | None) -> str:
    return "" if v is None else f"{v:g}"


def _table(data: Mapping[str, Any]) -> str:
    """The chart's values as an HTML table: one row per x, one column per series."""
    cols = [(s["label"], s["y"]) for s in data["series"]]
    for s in data["series"]:
        if s["lo"] is not None:
            cols += [(f"{s['label']} (low)", s["lo"]), (f"{s['label']} (high)", s["hi"])]
    if data["hline"] is not None:
        cols.append((data["hline_label"], [data["hline"]] * len(data["x"])))
    head = "".join(f"<th>{esc(label)}</th>" for label, _ in cols)
    rows = []
    for i, x in enumerate(data["x"]):
        cells = "".join(f"<td>{_cell(values[i])}</td>" for _, values in cols)
        rows.append(f"<tr><td>{_cell(x)}</td>{cells}</tr>")
    return (
        f'<table class="chart-table"><caption>{esc(data["title"])}</caption>'
        f"<tr><th>{esc(data['x_label'])}</th>{head}</tr>{''.join(rows)}</table>"
    )


def chart_html(chart: Chart, *, empty_note: str = "nothing to plot") -> str:
    """A chart's placeholder (module docstring); ``empty_note`` in a ``<p>`` instead when it
    has no x value at all."""
    data = chart_data(chart)
    if not data["x"]:
        return f'<p class="note chart-empty">{esc(chart.title)}: {esc(empty_note)}</p>'
    return (
        f'<div class="a2r-chart" id="chart-{esc(chart.id)}" data-chart="{esc(chart.id)}" '
        f'role="figure" aria-label="{esc(chart.title)}">'
        '<div class="chart-host"></div>'
        f'<script type="application/json" class="chart-data">{_script_json(data)}</script>'
        f"<noscript>{_table(data)}</noscript></div>"
    )


# -- the page's style and script ----------------------------------------------------------------
def uplot_asset(name: str) -> Path:
    """The path of a bundled uPlot file (:data:`UPLOT_JS`, :data:`UPLOT_CSS`,
    :data:`UPLOT_LICENSE`); the live viewer serves these same files."""
    return Path(str(resources.files("agent2rl.analysis.rendering") / VENDOR / name))


@cache
def _uplot_js() -> str:
    text = uplot_asset(UPLOT_JS).read_text(encoding="utf-8")
    first, _, rest = text.partition("\n")
    return (_UPLOT_NOTICE + "\n" + rest) if first.startswith("/*!") else text


_CSS = """
.a2r-chart{margin:6px 0;background:#fff;display:inline-block;max-width:100%;overflow:auto}
.a2r-chart .u-title{font-size:13px;font-weight:600}.a2r-chart .u-legend{font-size:12px}
.a2r-chart .u-legend .u-series{cursor:pointer}
table.chart-table{font-size:12px;margin:6px 0}table.chart-table caption{text-align:left;
font-weight:600}
"""

# Draws every placeholder. ES5, no dependency but uPlot; a chart that fails to draw leaves
# its placeholder (and the console says why) without stopping the others. Charts are drawn
# 25 at a time, the rest in later tasks, so a dashboard of 1,000 runs (a chart each) is
# shown and scrolls while its charts are still being drawn.
_INIT_JS = r"""
(function(){"use strict";
var BATCH=25;
function fmt(v){if(v==null||isNaN(v))return "\u2013";
 if(Math.abs(v)>=10000)return (Math.round(v/100)/10)+"k";return String(Math.round(v*100)/100);}
function val(u,v){return fmt(v);}
function draw(el){
 var spec=JSON.parse(el.querySelector("script.chart-data").textContent);
 var data=[spec.x],series=[{label:spec.x_label,value:val}],bands=[];
 spec.series.forEach(function(s){
  var n=0;s.y.forEach(function(v){if(v!=null)n++;});
  var pts=s.kind==="points"||s.markers||n<2;
  var one={label:s.label,stroke:s.color,width:s.kind==="points"?0:2,spanGaps:true,value:val,
   points:{show:pts,size:s.kind==="points"?9:6,fill:s.color,stroke:s.color}};
  if(s.dash)one.dash=[6,4];
  if(s.kind==="points")one.paths=function(){return null;};
  if(s.kind==="step")one.paths=uPlot.paths.stepped({align:1});
  if(s.kind==="bars"){one.paths=uPlot.paths.bars({size:[0.9,40]});one.fill=s.color;
   one.points={show:false};}
  data.push(s.y);series.push(one);
  if(s.lo&&s.hi){var hi=series.length;
   data.push(s.hi);series.push({label:s.label+" (high)",stroke:s.color,width:0,spanGaps:true,
    value:val,points:{show:false}});
   data.push(s.lo);series.push({label:s.label+" (low)",stroke:s.color,width:0,spanGaps:true,
    value:val,points:{show:false}});
   bands.push({series:[hi,hi+1],fill:s.color+"2e"});}
 });
 if(spec.hline!=null){data.push(spec.x.map(function(){return spec.hline;}));
  series.push({label:spec.hline_label,stroke:"#888888",dash:[4,3],width:1.5,value:val,
   points:{show:false}});}
 var ax={values:function(u,vs){return vs.map(fmt);}};
 var xAxis={label:spec.x_label,values:ax.values};
 if(spec.integer_x)xAxis.incrs=[1,2,5,10,20,50,100,200,500,1000,2000,5000,10000];
 var u=new uPlot({title:spec.title,width:spec.width,height:spec.height,series:series,
  bands:bands,scales:{x:{time:false}},axes:[xAxis,{label:spec.y_label,values:ax.values}],
  cursor:{drag:{x:true,y:false}}},data,el.querySelector(".chart-host"));
 if(spec.links){u.over.style.cursor="pointer";u.over.addEventListener("click",function(){
  var i=u.cursor.idx;if(i!=null&&spec.links[i])location.hash=spec.links[i];});}
 el.setAttribute("data-rendered","1");}
var els=document.querySelectorAll("div.a2r-chart"),next=0;
function batch(){var end=Math.min(els.length,next+BATCH);
 for(;next<end;next++){try{draw(els[next]);}catch(e){console.error("chart",e);}}
 if(next<els.length)setTimeout(batch,0);}
batch();
})();
"""


def chart_style() -> str:
    """The ``<style>`` a page with charts puts in its ``<head>`` (uPlot's CSS and ours)."""
    css = uplot_asset(UPLOT_CSS).read_text(encoding="utf-8")
    return f"<style>{css}{_CSS}</style>"


def chart_runtime() -> str:
    """The ``<script>`` a page with charts puts before ``</body>``: uPlot, then the lines
    that draw each placeholder."""
    return f"<script>{_uplot_js()}\n{_INIT_JS}</script>"
