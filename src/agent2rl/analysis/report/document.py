"""The run report as data, and its two renderings: :func:`to_markdown` and :func:`to_html`.

A :class:`Report` is a heading and :class:`Section` s of typed blocks, built once from a run's
metrics by :mod:`agent2rl.analysis.report.render`; both render functions walk that one model,
so the two files cannot say different things. Text in the model is plain: the renderers escape
every string (:func:`~agent2rl.analysis.rendering.md_cell` for Markdown,
:func:`~agent2rl.analysis.rendering.esc` for HTML), because any of it may have come from the
agent. The one exception is :class:`Verbatim`, harness-written text that Markdown takes as is.

Markdown has no cards, charts or collapsible blocks: it leaves out ``Cards``,
:class:`Figure` and :class:`Details` (a section then says the same figures in words), and a
section left with nothing is left out whole. A section with ``only`` set is for that format
alone (the header: a facts table in Markdown, the at-a-glance lines and cards in HTML).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from agent2rl.analysis.rendering import Chart, chart_html, chart_runtime, chart_style, esc, md_cell

Format = Literal["md", "html"]
#: Longest Markdown paragraph or list item; a table cell is cut at md_cell's default (300).
MD_PARAGRAPH_LIMIT = 2000


@dataclass(frozen=True)
class Verbatim:
    """Harness-written text that goes into Markdown unescaped, so that ``[lo, hi]`` and
    ``#3`` read as written; HTML still escapes it. Never for text the agent could influence."""

    text: str


@dataclass(frozen=True)
class Link:
    """A link to ``href`` (harness-built: ``#diff-3``, ``diffs/3.diff``); Markdown, which has
    no anchors for the HTML page's targets, shows its text only."""

    text: str
    href: str


@dataclass(frozen=True)
class Lines:
    """Short notes in one table cell: a line each in HTML, ``; ``-separated in Markdown."""

    lines: tuple[str, ...]


#: A run of text: a plain string, verbatim text, a link, or plain strings and links in a row.
Inline = str | Verbatim | Link | tuple[str | Link, ...]


@dataclass(frozen=True)
class Paragraph:
    """``text``, after ``lead`` in bold when set; ``style`` is the HTML class (``muted``,
    ``flag``, ``sub``, ``tag noise``), which Markdown has no use for."""

    text: Inline
    lead: str = ""
    style: str = ""


@dataclass(frozen=True)
class Items:
    """A bulleted list."""

    items: tuple[str, ...]


@dataclass(frozen=True)
class Column:
    """A table column: ``kind`` ``n`` is a right-aligned number, ``path`` a monospace path.
    ``title`` is the harness's own words: Markdown takes it as is (``#``, ``[95% CI]``)."""

    title: str
    kind: Literal["", "n", "path"] = ""


@dataclass(frozen=True)
class Row:
    """A table row; ``style`` is its HTML class (``best``, ``failed``)."""

    cells: tuple[Inline | Lines, ...]
    style: str = ""


@dataclass(frozen=True)
class Table:
    """Rows under columns; every column title empty gives Markdown's bare ``| | |`` head."""

    columns: tuple[Column, ...]
    rows: tuple[Row, ...]


@dataclass(frozen=True)
class Card:
    """One headline figure; ``tag`` a small label after the value, in class ``tag_style``.
    ``value`` and ``label`` are escaped like everything else."""

    value: str
    label: str
    tag: str = ""
    tag_style: str = ""


#: Headline figures side by side (HTML only).
Cards = tuple[Card, ...]


@dataclass(frozen=True)
class Figure:
    """An interactive chart (HTML only); ``empty_note`` replaces it when it has no x value."""

    chart: Chart
    empty_note: str = "nothing to plot"


@dataclass(frozen=True)
class Diff:
    """A unified diff, its added, removed, hunk and file lines coloured (HTML only)."""

    text: str


@dataclass(frozen=True)
class Details:
    """A collapsible block with id ``anchor`` (HTML only): a link to ``#<anchor>`` opens it."""

    anchor: str
    summary: str
    blocks: tuple[Block, ...]


Block = Paragraph | Items | Table | Cards | Figure | Diff | Details


@dataclass(frozen=True)
class Section:
    """Blocks under an ``<h2>`` ``title`` (None: none, the header); ``only``: one format's."""

    title: str | None
    blocks: tuple[Block, ...]
    only: Format | None = None


@dataclass(frozen=True)
class Report:
    """The whole report: ``heading`` (the ``<h1>``; the HTML title adds ``agent2rl · ``)."""

    heading: str
    sections: tuple[Section, ...]


# -- Markdown ----------------------------------------------------------------------------------
def _plain(x: Inline) -> str:
    if isinstance(x, tuple):
        return "".join(_plain(p) for p in x)
    return x if isinstance(x, str) else x.text


def _md(x: Inline | Lines, limit: int = 300) -> str:
    if isinstance(x, Verbatim):
        return x.text
    return md_cell("; ".join(x.lines) if isinstance(x, Lines) else _plain(x), limit)


def _md_row(cells: list[str]) -> str:
    return "|" + "".join(f" {c} |" for c in cells)


def _md_block(b: Block) -> str:
    """One block as Markdown; empty for the blocks Markdown has no form for."""
    if isinstance(b, Paragraph):
        lead = f"**{md_cell(b.lead)}** " if b.lead else ""
        return lead + _md(b.text, MD_PARAGRAPH_LIMIT)
    if isinstance(b, Items):
        return "\n".join(f"- {md_cell(i, MD_PARAGRAPH_LIMIT)}" for i in b.items)
    if isinstance(b, Table):
        titles = [c.title for c in b.columns]
        head = _md_row(titles) if any(titles) else "|" + " |" * len(titles)
        rule = "|" + "".join("---:|" if c.kind == "n" else "---|" for c in b.columns)
        return "\n".join([head, rule, *(_md_row([_md(c) for c in r.cells]) for r in b.rows)])
    return ""


def to_markdown(report: Report) -> str:
    """``report`` as Markdown: the heading, then each section's ``## title`` and its blocks,
    a blank line between blocks; HTML-only sections and blocks are left out (module doc)."""
    parts = [f"# {md_cell(report.heading)}"]
    for section in report.sections:
        blocks = [t for b in section.blocks if (t := _md_block(b))]
        if section.only == "html" or not blocks:
            continue
        parts += [f"## {section.title}", *blocks] if section.title else blocks
    return "\n\n".join(parts) + "\n"


# -- HTML --------------------------------------------------------------------------------------
_CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;color:#1d2430;
 margin:0;background:#f6f7f9}
main{max-width:1100px;margin:0 auto;padding:24px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 10px}
.sub{color:#5b6573;margin:0 0 16px}
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
details{background:#fff;border:1px solid #dde2e8;border-radius:6px;margin:6px 0}
details>p{padding:0 10px}
summary{cursor:pointer;padding:6px 10px;font-weight:600}
details:target{outline:2px solid #2563eb}
pre.diff{margin:0;padding:8px 10px;overflow:auto;max-height:600px;font-size:12px;
 border-top:1px solid #eef1f4;background:#fbfcfd}
pre.diff .a{color:#116329;background:#e6ffec}pre.diff .d{color:#82071e;background:#ffebe9}
pre.diff .h{color:#6f42c1}pre.diff .f{font-weight:700}
.muted{color:#5b6573}
.flag{background:#ffe4e1;border:1px solid #e8a39c;border-radius:8px;padding:8px 12px;margin:10px 0}
"""

# Following a #diff-<id> link should show the diff, so open the targeted <details>.
_JS = """
function openTarget(){var h=location.hash.slice(1);if(!h)return;
var el=document.getElementById(h);if(el&&el.tagName==='DETAILS')el.open=true;}
window.addEventListener('hashchange',openTarget);window.addEventListener('load',openTarget);
"""

#: A diff line's class by its start, first match wins (``+++``/``---`` are file names).
_DIFF_CLASSES = (("diff --git", "f"), ("@@", "h"), ("+++", ""), ("---", ""), ("+", "a"), ("-", "d"))


def _cls(style: str) -> str:
    return f' class="{esc(style)}"' if style else ""


def _html(x: Inline | Lines) -> str:
    if isinstance(x, tuple):
        return "".join(_html(p) for p in x)
    if isinstance(x, Link):
        return f'<a href="{esc(x.href)}">{esc(x.text)}</a>'
    if isinstance(x, Lines):
        return "<br>".join(esc(line) for line in x.lines)
    return esc(_plain(x))


def _diff_html(text: str) -> str:
    out = []
    for line in text.splitlines():
        cls = next((c for start, c in _DIFF_CLASSES if line.startswith(start)), "")
        out.append(f'<span class="{cls}">{esc(line)}</span>' if cls else esc(line))
    return "\n".join(out)


def _html_block(b: Block) -> str:
    if isinstance(b, Paragraph):
        lead = f"<b>{esc(b.lead)}</b> " if b.lead else ""
        return f"<p{_cls(b.style)}>{lead}{_html(b.text)}</p>"
    if isinstance(b, Items):
        return "<ul>" + "".join(f"<li>{esc(i)}</li>" for i in b.items) + "</ul>"
    if isinstance(b, Table):
        head = "".join(f"<th>{esc(c.title)}</th>" for c in b.columns)
        rows = "".join(
            f"<tr{_cls(r.style)}>"
            + "".join(
                f"<td{_cls(c.kind)}>{_html(x)}</td>"
                for c, x in zip(b.columns, r.cells, strict=True)
            )
            + "</tr>"
            for r in b.rows
        )
        return f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>"
    if isinstance(b, tuple):
        return '<div class="cards">' + "".join(_card_html(c) for c in b) + "</div>"
    if isinstance(b, Figure):
        return chart_html(b.chart, empty_note=b.empty_note)
    if isinstance(b, Diff):
        return f'<pre class="diff">{_diff_html(b.text)}</pre>'
    inner = "".join(_html_block(x) for x in b.blocks)
    return f'<details id="{esc(b.anchor)}"><summary>{esc(b.summary)}</summary>{inner}</details>'


def _card_html(c: Card) -> str:
    tag = f' <span class="tag {esc(c.tag_style)}">{esc(c.tag)}</span>' if c.tag else ""
    return f'<div class="card"><b>{esc(c.value)}{tag}</b><span>{esc(c.label)}</span></div>'


def to_html(report: Report) -> str:
    """``report`` as one self-contained page (inline CSS, inlined chart runtime, nothing
    fetched); Markdown-only sections are left out, every string is escaped."""
    body = "".join(
        (f"<h2>{esc(s.title)}</h2>\n" if s.title else "")
        + "".join(_html_block(b) for b in s.blocks)
        + "\n"
        for s in report.sections
        if s.only != "md"
    )
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>agent2rl · {esc(report.heading)}</title>
<style>{_CSS}</style>
{chart_style()}
</head><body><main>
<h1>{esc(report.heading)}</h1>
{body}</main>
<script>{_JS}</script>
{chart_runtime()}
</body></html>
"""
