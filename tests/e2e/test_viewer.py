"""``agent2rl view`` over a real run in progress, in a real headless Chromium.

The run is ``agent2rl run`` (a subprocess) of arith-lite on the tiny model with a scripted
test agent (tests/support/agents/llm/viewer_agent.py) that talks to its LLM through the run's
metering proxy (the scripted fake provider upstream, a streamed answer among them), writes
and changes code/train.py and submits twice; its second submission waits for the test. The
viewer (``agent2rl view``, a subprocess) is opened while the run goes: the timeline shows the
conversation, the first submission with its score; the second arrives without a reload, and
its code link opens the diff that produced it. No console errors.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import httpx
import pytest
from support import AGENTS
from support.cli import agent2rl_cmd, run_cli
from support.fake_provider import ToolCall, Turn, start_fake_provider
from support.llmruns import host_env

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

CHROMIUM = os.environ.get("AGENT2RL_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"]
REAL_KEY = "sk-real-viewer-e2e-0123456789"
TURNS = [
    Turn(
        text="I will write a training script.",
        tool_calls=[ToolCall("bash", {"command": "python code/train.py"})],
    ),
    Turn(text="Submitted v1; now a larger learning rate."),
    Turn(text="All done."),
]


def _wait(pred, timeout: float, what: str):
    end = time.time() + timeout
    while time.time() < end:
        value = pred()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def test_viewer_follows_a_live_run_in_a_browser(tmp_path: Path) -> None:
    if not Path(CHROMIUM).is_file():
        pytest.skip(f"chromium is not installed ({CHROMIUM}): apt-get install chromium")
    try:
        from playwright.sync_api import expect, sync_playwright
    except ImportError:
        pytest.skip("the playwright package is missing: pip install -e '.[dev]'")
    fake = start_fake_provider({"turns": TURNS, "final_text": "ok"}, api_key=REAL_KEY)
    runs = tmp_path / "runs"
    runs.mkdir()
    env = host_env(
        ANTHROPIC_API_KEY=REAL_KEY,
        ANTHROPIC_BASE_URL=fake.anthropic_base_url,
        AGENT2RL_HOME=os.environ.get("AGENT2RL_HOME", str(tmp_path / "home")),
    )
    run_cmd = agent2rl_cmd() + [
        "run",
        "--task",
        "arith-lite",
        "--agent",
        str(AGENTS / "llm" / "viewer_agent.toml"),
        "--model",
        "tiny",
        "--budget",
        "4m",
        "--sandbox",
        "none",
        "--runs-dir",
        str(runs),
    ]
    view_env = {**env, "AGENT2RL_HOME": str(tmp_path / "viewer-home")}
    view_cmd = agent2rl_cmd() + ["view", str(runs), "--port", "0"]
    run = subprocess.Popen(run_cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    viewer = subprocess.Popen(
        view_cmd, env=view_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    errors: list[str] = []
    try:
        assert viewer.stdout is not None
        line = viewer.stdout.readline()
        # The URL carries the viewer's token (every viewer has one, loopback too).
        url = re.search(r"(http://\S+?)/\?token=(\S+)", line)
        assert url, line
        base, token = url.group(1), url.group(2)
        run_dir = _wait(lambda: next(runs.glob("*/run.json"), None), 120, "the run directory")
        run_id = run_dir.parent.name
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                page = browser.new_page(viewport={"width": 1400, "height": 1000})
                page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
                page.on("pageerror", lambda e: errors.append(str(e)))
                page.goto(f"{base}/?token={token}")  # then kept in a cookie
                expect(page.locator(f'tr.run-row[data-run="{run_id}"]')).to_have_count(1)
                page.click(f'tr.run-row[data-run="{run_id}"] a.run-link')
                page.wait_for_url(f"**/run/{run_id}")
                page.evaluate("window.__sameDocument = true")
                # The first submission, graded, with its score; the conversation so far.
                first = page.locator("#sub-1 .score")
                expect(first).to_have_attribute("data-score", re.compile(r"\d"), timeout=240_000)
                llm = page.locator(".ev-llm")
                expect(llm.filter(has_text="I will write a training script.")).to_have_count(1)
                expect(llm.locator(".tool", has_text="bash(")).to_have_count(1)
                expect(llm.filter(has_text="now a larger learning rate")).to_have_count(
                    1, timeout=30_000
                )
                expect(page.locator("#stat-time-left b")).not_to_have_text("ended")
                # Let the agent go on: its second submission shows up without a reload.
                (run_dir.parent / "workspace" / "code" / "next").write_text("go")
                second = page.locator("#sub-2 .score")
                expect(second).to_have_attribute("data-score", re.compile(r"\d"), timeout=240_000)
                assert page.evaluate("window.__sameDocument") is True
                # From the submission to the code that produced it: the diff.
                page.click("#sub-2 .code-link")
                diff = page.locator("pre.diff")
                expect(diff).to_contain_text("+LR = 0.01", timeout=20_000)
                expect(diff).to_contain_text("-LR = 0.001")
                # Filters and search.
                page.click('#filters button[data-filter="submission"]')
                expect(page.locator(".ev-submission:not(.hidden)")).to_have_count(2)
                expect(page.locator(".ev-llm:not(.hidden)")).to_have_count(0)
                page.click('#filters button[data-filter="all"]')
                page.fill("#search", "larger learning rate")
                page.press("#search", "Enter")
                expect(page.locator("#search-info")).to_contain_text("match")
                expect(page.locator(".ev-llm.match")).not_to_have_count(0)
                # The run's end reaches the open page too.
                assert run.wait(timeout=240) == 0
                expect(page.locator("#status")).to_have_text("completed", timeout=20_000)
                expect(page.locator("#chart-scores .uplot")).to_have_count(1)
                page.screenshot(path=str(tmp_path / "viewer.png"), full_page=True)
            finally:
                browser.close()
        # The viewer never changes a run, and serves GET only.
        assert httpx.post(f"{base}/api/runs").status_code == 405
    finally:
        for proc in (run, viewer):
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        fake.stop()
    assert errors == []
    paths = run_dir.parent
    transcript = [json.loads(x) for x in (paths / "record" / "transcript.jsonl").open()]
    assert [t["stream"] for t in transcript] == [False, True, False]
    assert transcript[1]["response"]["reassembled"] is True
    for f in paths.rglob("*"):
        if f.is_file() and not f.is_symlink():
            assert REAL_KEY.encode() not in f.read_bytes(), f
    # The export of the same run: a trajectory other tools read.
    out = tmp_path / "export"
    r = run_cli(["export", str(paths), "--out", str(out)])
    assert r.returncode == 0, r.stdout + r.stderr
    traj = json.loads((out / f"{run_id}.trajectory.json").read_text())
    assert traj["schema_version"].startswith("ATIF-")
    agent_steps = [s for s in traj["steps"] if s["source"] == "agent"]
    assert [s["message"] for s in agent_steps][:2] == [TURNS[0].text, TURNS[1].text]
    assert agent_steps[0]["tool_calls"][0]["function_name"] == "bash"
    assert len(traj["extra"]["agent2rl"]["submissions"]) == 2
