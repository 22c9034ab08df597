"""A small real study on local Ray, its export, and its dashboard in a real headless Chromium.

The study (two stacks x two repeats of an agent that submits at once) runs with a fresh
AGENT2RL_HOME, so its concurrent runs share an empty task store, model store and baseline
cache: the baseline is computed once. The dashboard is opened from disk by Debian's
``chromium`` driven with Playwright; the test skips, naming what is missing, without them.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest
from support import AGENTS
from support.cli import run_cli
from support.procs import processes_mentioning

from agent2rl.study import read_state

pytestmark = pytest.mark.slow

CHROMIUM = os.environ.get("AGENT2RL_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
#: the study runs unsandboxed: its stacks say so (never pooled with sandboxed runs)
STACKS = {"quick · sandbox: none", "quick-twin · sandbox: none"}
#: the series a chart draws, from the data its script reads
SERIES_LABELS = """el => [...el.querySelectorAll("script.chart-data")]
    .flatMap(s => JSON.parse(s.textContent).series.map(x => x.label))"""


@pytest.fixture(scope="module")
def study(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("dash")
    spec = root / "study.toml"
    spec.write_text(
        'name = "dashboard-e2e"\ntasks = ["arith-lite"]\n'
        f'agents = ["{AGENTS / "quick.toml"}", "{AGENTS / "quick-twin.toml"}"]\n'
        'repeats = 2\nbudget = "2m"\nsandbox = "none"\n'
    )
    env = dict(os.environ, AGENT2RL_HOME=str(root / "home"))  # empty stores
    r = run_cli(["study", "run", str(spec), "--out", str(root / "study")], env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    again = run_cli(["study", "run", str(spec), "--out", str(root / "study")], env=env)
    assert again.returncode == 0 and "nothing to run" in again.stdout, again.stdout
    return root / "study"


def test_study_runs_concurrently_on_shared_stores(study: Path) -> None:
    meta, slots, attempts = read_state(study)
    assert [s.status for s in slots] == ["finished"] * 4
    assert len(attempts) == 4  # the second `study run` started nothing
    logs = [(study / "attempts" / f"{s.id:03d}-a1" / "console.log").read_text() for s in slots]
    measured = [log for log in logs if "baseline:" in log and "(cached)" not in log]
    assert len(measured) == 1, "the baseline is computed once, the other runs wait and reuse it"
    assert processes_mentioning(str(study)) == []
    status = run_cli(["study", "status", str(study)])
    assert status.returncode == 0 and "finished 4" in status.stdout
    exported = run_cli(["study", "export", str(study)])
    assert exported.returncode == 0, exported.stderr
    import pandas as pd

    runs = pd.read_csv(study / "export" / "runs.csv")
    subs = pd.read_parquet(study / "export" / "submissions.parquet")
    assert len(runs) == 4 and set(runs["stack"]) == STACKS
    assert set(subs["run_id"]) == set(runs["run_id"])
    coverage = pd.read_csv(study / "export" / "task_coverage.csv")
    assert set(coverage["stack"]) == STACKS and set(coverage["runs"]) == {2}
    assert (study / "export" / "task_coverage.svg").read_text().startswith("<svg")


def test_dashboard_in_a_real_browser(study: Path, tmp_path) -> None:
    if not Path(CHROMIUM).is_file():
        pytest.skip(f"chromium is not installed ({CHROMIUM}): apt-get install chromium")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("the playwright package is missing: pip install -e '.[dev]'")
    r = run_cli(["dashboard", str(study)])
    assert r.returncode == 0, r.stdout + r.stderr
    page_path = study / "dashboard.html"
    html = page_path.read_text()
    # Nothing to fetch: scripts inline only, no external source, link or stylesheet (offline).
    assert "<script src" not in html and "@import" not in html
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", html)

    errors: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(page_path.as_uri())
            assert page.title() == "agent2rl study: dashboard-e2e"
            rows = page.locator("tr.lb-row")
            assert rows.count() == 2
            assert {rows.nth(i).get_attribute("data-stack") for i in range(2)} == STACKS
            cells = page.locator("td.hm-cell")
            assert cells.count() == 2
            assert page.locator("td.cov-cell").count() == 2  # task coverage: 2 stacks x 1 task
            assert {cells.nth(i).get_attribute("data-n") for i in range(2)} == {"2"}
            for axis in ("time", "submissions"):
                figure = page.locator(f'figure.curve[data-axis="{axis}"]')
                assert figure.count() == 1
                assert figure.locator('div.a2r-chart[data-rendered="1"]').count() == 1
                stacks = figure.evaluate(SERIES_LABELS)
                assert sorted(stacks) == sorted(STACKS), (axis, stacks)
            assert sum(len(f.evaluate(SERIES_LABELS)) for f in page.locator("#passk").all()) == 2
            assert page.locator("figure.trajectory").count() == 4
            page.screenshot(path=str(tmp_path / "dashboard.png"), full_page=True)
            link = page.locator("#runs a.run-link").first
            run_id = link.inner_text()
            link.click()
            page.wait_for_load_state()
            assert page.url.endswith("/report/report.html") and run_id in page.url
            assert run_id in page.content()
        finally:
            browser.close()
    assert errors == []
