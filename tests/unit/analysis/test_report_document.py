"""The report's section model: one set of sections, rendered to Markdown and to HTML."""

from __future__ import annotations

from agent2rl.analysis.report.document import (
    Column,
    Raw,
    Section,
    bullets,
    paragraph,
    table,
    to_html,
    to_markdown,
)

AGENT_TEXT = "out|put <script>x</script> *bold* #1"


def test_a_table_escapes_plain_cells_in_both_formats_and_takes_raw_ones_as_is() -> None:
    block = table(
        (Column("#", right=True), Column("path", style="path"), Column("Δ [95% CI]", True, "n")),
        [("1", AGENT_TEXT, Raw("+1.00 [0, 2]", "+1.00 &#91;0, 2&#93;"))],
        ["best"],
    )
    md_lines = block.md.splitlines()
    # titles are the harness's words: Markdown keeps "#" and "[95% CI]" as written
    assert md_lines[0] == "| # | path | Δ [95% CI] |"
    assert md_lines[1] == "|---:|---|---:|"
    assert "out\\|put &lt;script&gt;" in md_lines[2] and "\\*bold\\* \\#1" in md_lines[2]
    assert md_lines[2].endswith("| +1.00 [0, 2] |")
    assert "<script>" not in block.html and "out|put &lt;script&gt;" in block.html
    assert '<tr class="best"><td>1</td><td class="path">' in block.html
    assert '<td class="n">+1.00 &#91;0, 2&#93;</td>' in block.html


def test_a_table_without_row_styles_has_rows_without_class() -> None:
    block = table((Column("a"),), [("x",)])
    assert "<tr><td>x</td></tr>" in block.html


def test_a_paragraph_is_raw_in_markdown_unless_it_carries_agent_text() -> None:
    harness = paragraph("Code in `diffs/`.", "muted")
    assert harness.md == "Code in `diffs/`."
    assert harness.html == '<p class="muted">Code in `diffs/`.</p>'
    agent = paragraph(AGENT_TEXT + " tail", "flag", "Flagged:", md_limit=10)
    assert agent.md == "**Flagged:** out\\|put &lt;…"
    assert agent.html.startswith('<p class="flag">out|put &lt;script&gt;')


def test_bullets_escape_each_item() -> None:
    block = bullets(["a|b", "<c>"])
    assert block.md == "- a\\|b\n- &lt;c&gt;"
    assert block.html == "<ul><li>a|b</li><li>&lt;c&gt;</li></ul>"


def test_each_format_leaves_out_the_other_formats_sections() -> None:
    sections = (
        Section(None, (Raw("# title", "<h1>title</h1>"),)),
        Section("Both", (paragraph("said once"),)),
        Section("Page only", (Raw("", "<div>chart</div>"),)),
        Section("Markdown first", (paragraph("here"),), only="md"),
        Section("Tight", (paragraph("t"),), newline=False),
    )
    md = to_markdown(sections)
    assert md == "# title\n\n## Both\n\nsaid once\n\n## Markdown first\n\nhere\n\n## Tight\n\nt\n"
    page = to_html(sections, "a <title>")
    assert "<title>a &lt;title&gt;</title>" in page
    assert "<h1>title</h1>\n<h2>Both</h2>\n<p>said once</p>\n" in page
    assert "<h2>Page only</h2>\n<div>chart</div>\n<h2>Tight</h2><p>t</p>\n</main>" in page
    assert "Markdown first" not in page
