"""Figures on the docs pages come from docs/figures/data/*.json: the site hook's table and
chart markers (docs/hooks/site.py), so no figure on a page is retyped."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest
from support.charts import chart_specs

ROOT = Path(__file__).resolve().parents[3]
pytest.importorskip("mkdocs")


def _hooks():
    spec = importlib.util.spec_from_file_location("docs_site_hooks", ROOT / "docs/hooks/site.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_table_and_chart_markers_render_from_the_data(tmp_path: Path) -> None:
    hooks = _hooks()
    (tmp_path / "b.json").write_text(
        json.dumps(
            {
                "runs": [
                    {"run": "a", "step": 1, "score": 2.5},
                    {"run": "a", "step": 2, "score": 4.0},
                    {"run": "b", "step": 1, "score": 3.0, "note": "x|y"},
                ],
                "polls": {"1": {"p50_ms": 5.0}, "10": {"p50_ms": 9.0}},
            }
        )
    )
    page = (
        "Before.\n\n<!-- table b.json runs -->\n\n<!-- table b.json polls columns=key,p50_ms -->"
        "\n\n<!-- chart b.json runs x=step y=score group=run title=score_by_step -->\n"
    )
    md = hooks.render_markers(page, tmp_path, page_uri="tasks/x.md")
    assert "| run | step | score | note |" in md and "| b | 1 | 3 | x\\|y |" in md
    assert "| key | p50_ms |" in md and "| 10 | 9 |" in md
    assert "From [`b.json`](../figures/data/b.json), `runs`." in md  # relative to the page
    (spec,) = chart_specs(md).values()
    assert spec["title"] == "score by step" and spec["x"] == [1, 2]
    assert {s["label"]: s["y"] for s in spec["series"]} == {"a": [2.5, 4.0], "b": [3.0, None]}
    assert md.count("uPlot v1.6.32") == 1  # the library once per page, inlined
    assert "uPlot" not in hooks.render_markers("<!-- table b.json runs -->", tmp_path)


@pytest.mark.parametrize(
    ("marker", "says"),
    [
        ("<!-- table nope.json runs -->", "no data file 'nope.json'"),
        ("<!-- table b.json nothing -->", "no 'nothing' in it"),
        ("<!-- table b.json runs columns=run,speed -->", "no field 'speed'"),
        ("<!-- chart b.json runs x=step -->", "needs x= and y="),
    ],
)
def test_a_marker_that_names_nothing_fails_the_build(tmp_path: Path, marker: str, says) -> None:
    hooks = _hooks()
    (tmp_path / "b.json").write_text(json.dumps({"runs": [{"run": "a", "step": 1}]}))
    with pytest.raises(ValueError, match=re.escape(says)) as err:
        hooks.render_markers(marker, tmp_path)
    assert marker in str(err.value)


def test_every_marker_on_the_docs_pages_resolves() -> None:
    """The real pages and data files: each marker renders (the strict site build runs the
    same hook; this names the page)."""
    hooks = _hooks()
    found = 0
    for page in sorted((ROOT / "docs").rglob("*.md")):
        text = page.read_text(encoding="utf-8")
        found += len(hooks.FIGURE_MARKER.findall(text))
        hooks.render_markers(text, page_uri=page.relative_to(ROOT / "docs").as_posix())
    assert found >= 8
