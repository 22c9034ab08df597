"""The chart placeholders of the analysis pages: data aligned for uPlot, escaped, stable."""

from __future__ import annotations

from support.charts import chart_specs

from agent2rl.analysis.rendering import Chart, Series, chart_html
from agent2rl.analysis.rendering.charts import chart_data

EVIL = "</script><script>alert(1)</script><!--"


def test_series_are_aligned_on_the_union_of_their_x_values() -> None:
    chart = Chart(
        id="c",
        title="t",
        x_label="x",
        y_label="y",
        series=[
            Series("a", "#112233", [0, 2], [1.0, 3.0]),
            Series("b", "#445566", [1, 2], [5.0, 6.0], lo=[4.0, 5.0], hi=[6.0, 7.0]),
        ],
        x_extent=(0.0, 10.0),
        links={2: "#diff-2"},
    )
    data = chart_data(chart)
    assert data["x"] == [0, 1, 2, 10]
    assert data["series"][0]["y"] == [1.0, None, 3.0, None]
    assert data["series"][1]["lo"] == [None, 4.0, 5.0, None]
    assert data["links"] == [None, None, "#diff-2", None]


def test_agent_text_in_a_chart_stays_data() -> None:
    chart = Chart(
        id="c", title=EVIL, x_label="x", y_label="y", series=[Series(EVIL, "#112233", [1], [2.0])]
    )
    page = chart_html(chart)
    # the only </script> closes the data element itself; nothing in it opens a comment
    assert page.count("</script>") == 1 and "<!--" not in page and "<script>alert" not in page
    spec = chart_specs(page)["c"]
    assert spec["title"] == EVIL and spec["series"][0]["label"] == EVIL
    # the no-JavaScript table shows the same label, escaped
    assert "&lt;/script&gt;&lt;script&gt;alert(1)" in page


def test_chart_bytes_are_stable_and_an_empty_chart_is_a_note() -> None:
    chart = Chart(id="c", title="t", x_label="x", y_label="y",
                  series=[Series("a", "#112233", [0.1 + 0.2], [1 / 3])])  # fmt: skip
    assert chart_html(chart) == chart_html(chart)
    assert chart_data(chart)["x"] == [0.3] and chart_data(chart)["series"][0]["y"] == [0.333333]
    empty = chart_html(Chart(id="e", title="t", x_label="x", y_label="y", series=[]))
    assert "a2r-chart" not in empty and "nothing to plot" in empty
