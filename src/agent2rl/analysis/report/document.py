"""The run report as data, :class:`Section` s of blocks, and its two renderings,
:func:`to_markdown` and :func:`to_html`, so that ``report.md`` and ``report.html`` list the
same sections in the same order.

A block is a :class:`Raw`: the same content in each format's markup. :func:`paragraph`,
:func:`bullets` and :func:`table` write one kind of block in both formats at once and escape
its text (HTML always; Markdown where the block says so), as any of it may have come from the
agent. A :class:`Raw` built by hand is for what one format shows and the other has no form
for (cards, charts and diffs in HTML; the facts table in Markdown); its builder escapes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from agent2rl.analysis.rendering import chart_runtime, chart_style, esc, md_cell


@dataclass(frozen=True)
class Raw:
    """One block, or one table cell, in Markdown (``md``) and in HTML (``html``), taken as is;
    ``""`` where a format has nothing."""

    md: str
    html: str


@dataclass(frozen=True)
class Column:
    """A table column: ``title`` is the harness's words, taken as is by Markdown (``#``,
    ``[95% CI]``); ``right`` aligns it right in Markdown, ``style`` is its cells' HTML class
    (``n`` right-aligned figures, ``path`` monospace)."""

    title: str | Raw
    right: bool = False
    style: str | None = None


@dataclass(frozen=True)
class Section:
    """Blocks under an ``<h2>`` ``title`` (None: none, the page's head); ``only``: the one
    format that shows it; ``newline``: a line break after the heading in the HTML source."""

    title: str | None
    blocks: tuple[Raw, ...]
    only: Literal["md", "html"] | None = None
    newline: bool = True


def _cls(style: str | None) -> str:
    return "" if style is None else f' class="{esc(style)}"'


def paragraph(
    text: str, style: str | None = None, md_lead: str = "", md_limit: int | None = None
) -> Raw:
    """``text`` in a ``<p>`` of class ``style`` (``muted``, ``flag``); Markdown has no classes
    and bolds ``md_lead`` before the text instead. Markdown takes the text as the harness
    wrote it, or, given ``md_limit``, escaped by ``md_cell`` and cut at that length."""
    md = text if md_limit is None else md_cell(text, md_limit)
    return Raw(f"**{md_lead}** {md}" if md_lead else md, f"<p{_cls(style)}>{esc(text)}</p>")


def bullets(items: Sequence[str]) -> Raw:
    """A bulleted list, each item escaped (and cut at 2000 characters in Markdown)."""
    return Raw(
        "\n".join(f"- {md_cell(i, 2000)}" for i in items),
        "<ul>" + "".join(f"<li>{esc(i)}</li>" for i in items) + "</ul>",
    )


def table(
    columns: Sequence[Column],
    rows: Sequence[Sequence[str | Raw]],
    row_styles: Sequence[str | None] | None = None,
) -> Raw:
    """Rows under columns: a pipe table in Markdown, a ``<table>`` in HTML, its rows of class
    ``row_styles`` (``best``, ``failed``; ``""`` an empty class; None: no class at all). A
    plain-string cell is escaped in both formats; a :class:`Raw` one is taken as is."""

    def cell(x: str | Raw, md: Callable[[str], str] = md_cell) -> Raw:
        return x if isinstance(x, Raw) else Raw(md(x), esc(x))

    heads, cells = [cell(c.title, str) for c in columns], [[*map(cell, r)] for r in rows]
    lines = ["| " + " | ".join(x.md for x in row) + " |" for row in [heads, *cells]]
    rule = "|" + "".join("---:|" if c.right else "---|" for c in columns)
    body = "".join(
        f"<tr{_cls(style)}>"
        + "".join(f"<td{_cls(c.style)}>{x.html}</td>" for c, x in zip(columns, row, strict=True))
        + "</tr>"
        for row, style in zip(cells, row_styles or [None] * len(rows), strict=True)
    )
    head = "".join(f"<th>{x.html}</th>" for x in heads)
    return Raw(
        "\n".join([lines[0], rule, *lines[1:]]),
        f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>",
    )


def to_markdown(sections: Sequence[Section]) -> str:
    """The sections as Markdown: each one's ``## title`` and blocks, a blank line between any
    two; HTML-only sections, and sections with no Markdown block, are left out."""
    parts = []
    for section in sections:
        blocks = [b.md for b in section.blocks if b.md]
        if section.only != "html" and blocks:
            parts += [f"## {section.title}", *blocks] if section.title else blocks
    return "\n\n".join(parts) + "\n"


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
details{background:#fff;border:1px solid #dde2e8;border-radius:6px;margin:6px 0}
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


def to_html(sections: Sequence[Section], title: str) -> str:
    """The sections as one self-contained page titled ``title`` (inline CSS, inlined chart
    runtime, nothing fetched); Markdown-only sections are left out."""
    body = "".join(
        (f"<h2>{esc(s.title)}</h2>" + "\n" * s.newline if s.title else "")
        + "".join(b.html for b in s.blocks)
        + "\n"
        for s in sections
        if s.only != "md"
    )
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{esc(title)}</title>
<style>{_CSS}</style>
{chart_style()}
</head><body><main>
{body}</main>
<script>{_JS}</script>
{chart_runtime()}
</body></html>
"""
