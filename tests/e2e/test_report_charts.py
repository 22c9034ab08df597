"""The static report's and the dashboard's charts in headless Chromium, from disk (file://):
uPlot, inlined, draws every chart with no console error and nothing fetched; the legend
toggles a series; a label that tries to close the data's <script> element stays text.

Fast (no run: the pages are rendered from constructed metrics)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from support.studyruns import make_run

from agent2rl.analysis.dashboard import Overview, render_dashboard
from agent2rl.analysis.report import render_html

CHROMIUM = os.environ.get("AGENT2RL_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"]
EVIL = "</script><script>window.__pwned=1</script>"


def _browser():
    if not Path(CHROMIUM).is_file():
        pytest.skip(f"chromium is not installed ({CHROMIUM}): apt-get install chromium")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("the playwright package is missing: pip install -e '.[dev]'")
    return sync_playwright


def _open(page_path: Path, check) -> list[str]:
    """Open ``page_path`` offline, run ``check(page)``; the console errors and any request
    that left the file."""
    errors: list[str] = []
    with _browser()() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1300, "height": 900})
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.on(
                "request",
                lambda r: (
                    errors.append(f"fetched {r.url}") if not r.url.startswith("file:") else None
                ),
            )
            page.goto(page_path.as_uri())
            check(page)
        finally:
            browser.close()
    return errors


def test_report_chart_renders_offline_with_no_console_errors(tmp_path: Path) -> None:
    run = make_run(scores=[12.0, None, 30.0, 25.0], baseline=10.0, budget_s=600.0)
    page_path = tmp_path / "report.html"
    page_path.write_text(render_html(run.metrics))

    def check(page) -> None:
        chart = page.locator("#chart-score")
        assert chart.get_attribute("data-rendered") == "1"
        assert chart.locator("canvas").count() == 1
        labels = chart.locator(".u-legend .u-series .u-label").all_inner_texts()
        assert "best so far" in labels and "baseline" in labels and "graded" in labels
        # a click on a legend entry hides that series (uPlot marks it u-off)
        entry = chart.locator(".u-legend .u-series", has_text="best so far").first
        entry.click()
        assert "u-off" in (entry.get_attribute("class") or "")

    assert _open(page_path, check) == []


def test_dashboard_charts_render_and_a_label_cannot_close_their_script(tmp_path: Path) -> None:
    runs = [
        make_run(agent=EVIL, scores=[12.0, 20.0], repeat=0),
        make_run(agent=EVIL, scores=[15.0], repeat=1),
        make_run(agent="reference-sft", scores=[11.0, 14.0], repeat=0),
    ]
    page_path = tmp_path / "dashboard.html"
    page_path.write_text(render_dashboard(runs, Overview("charts"), [], {}))

    def check(page) -> None:
        charts = page.locator("div.a2r-chart")
        assert charts.count() > 3
        assert page.locator('div.a2r-chart[data-rendered="1"]').count() == charts.count()
        assert page.evaluate("window.__pwned") is None
        legend = page.locator("#passk .u-legend").first.inner_text()
        assert EVIL in legend  # shown as text

    assert _open(page_path, check) == []


def test_a_dashboard_of_many_runs_draws_every_chart_in_batches(tmp_path: Path) -> None:
    """Charts are drawn 25 at a time (the page shows before the last one is drawn): with
    more than a batch, every one is drawn in the end, without a console error."""
    runs = [make_run(agent=f"a{i % 3}", scores=[10.0 + i % 7, 12.0], repeat=i) for i in range(40)]
    page_path = tmp_path / "dashboard.html"
    page_path.write_text(render_dashboard(runs, Overview("many"), [], {}))

    def check(page) -> None:
        total = page.locator("div.a2r-chart").count()
        assert total > 25
        page.wait_for_function(
            "document.querySelectorAll('div.a2r-chart:not([data-rendered])').length === 0",
            timeout=60_000,
        )

    assert _open(page_path, check) == []
