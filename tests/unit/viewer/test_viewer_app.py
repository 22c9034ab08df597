"""The viewer over a run directory written by the real parts (the grader's Ledger, the code
recorder's git, the proxy's TranscriptWriter), served by ``agent2rl view`` as a subprocess
on loopback: read-only (GET only, no file changed, no write lock held against the grader),
its access rules (loopback Host, token), its 4xx answers, and the ATIF export."""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from support.cli import agent2rl_cmd, run_cli
from support.rundirs import snapshot, write_run

from agent2rl.grading.ledger import Ledger
from agent2rl.metering.transcript import TranscriptWriter
from agent2rl.rundir import RunPaths

pytestmark = pytest.mark.timeout(120)
RUN_ID = "20261125-120000-arith-lite-test-0001"
TOKEN = "t0ken-for-the-viewer-tests-123"


def make_run(root: Path) -> RunPaths:
    """A run in progress: two snapshots, one graded submission, an anthropic conversation
    of two exchanges (the second with a tool result)."""
    now = time.time()
    paths = write_run(root / RUN_ID, task_version="2")
    snapshot(paths, {"train.py": "LR = 0.001\n"}, "start")
    sha = snapshot(paths, {"train.py": "LR = 0.01\n"}, "submission: output/v1")
    paths.record.mkdir(exist_ok=True)
    with Ledger(paths.ledger) as led:
        led.set_meta("baseline", {"score": 0.25})
        sid = led.add_submission("output/v1", "w1", None, snapshot=sha, at=now - 20)
        led.update_submission(sid, status="graded", score=0.5, finished_at=now - 10)
    w = TranscriptWriter(paths.record / "transcript.jsonl", secrets=["sk-never-written-0000"])
    msgs = [{"role": "user", "content": "Improve the model please."}]
    w.write(
        {
            "time": now - 30,
            "api": "anthropic",
            "endpoint": "messages",
            "status": 200,
            "model": "claude-sonnet-4-5",
            "input_tokens": 10,
            "output_tokens": 5,
        },
        {"model": "claude-sonnet-4-5", "system": "You are a coding agent.", "messages": msgs},
        {
            "content": [
                {"type": "text", "text": "Writing train.py now."},
                {
                    "type": "tool_use",
                    "id": "toolu_1",
                    "name": "bash",
                    "input": {"command": "python code/train.py"},
                },
            ]
        },
    )
    msgs = msgs + [
        {
            "role": "assistant",
            "content": [
                {
                    "type": "tool_use",
                    "id": "toolu_1",
                    "name": "bash",
                    "input": {"command": "python code/train.py"},
                }
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "training 0.01"}
            ],
        },
    ]
    w.write(
        {
            "time": now - 15,
            "api": "anthropic",
            "endpoint": "messages",
            "status": 200,
            "model": "claude-sonnet-4-5",
            "input_tokens": 30,
            "output_tokens": 4,
        },
        {"model": "claude-sonnet-4-5", "system": "You are a coding agent.", "messages": msgs},
        {"content": [{"type": "text", "text": "Submitted: a zebra-striped answer."}]},
    )
    return paths


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("viewer") / "runs"
    make_run(root)
    return root


@dataclass
class Viewer:
    """A running `agent2rl view`: its URL, the token it printed, its AGENT2RL_HOME."""

    base: str
    token: str
    home: Path

    def request(self, method: str, path: str, **kw: Any) -> httpx.Response:
        headers = {"authorization": f"Bearer {self.token}", **kw.pop("headers", {})}
        return httpx.request(method, self.base + path, headers=headers, **kw)

    def get(self, path: str, **kw: Any) -> httpx.Response:
        return self.request("GET", path, **kw)


def _serve(root: Path, home: Path, *extra: str) -> Iterator[Viewer]:
    proc = subprocess.Popen(
        agent2rl_cmd() + ["view", str(root), "--port", "0", *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "AGENT2RL_HOME": str(home)},
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        # The URL the user opens carries the token, like Jupyter's.
        m = re.search(r"(http://\S+?)/\?token=(\S+)\s", line)
        assert m, line
        yield Viewer(m.group(1), m.group(2), home)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def viewer(runs: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Viewer]:
    yield from _serve(runs, tmp_path_factory.mktemp("home"))


def _tree(root: Path) -> dict[str, tuple[int, int]]:
    # SQLite's -shm/-wal are the writer's (a WAL reader maps the -shm it finds).
    return {
        str(p): (p.stat().st_mtime_ns, p.stat().st_size)
        for p in root.rglob("*")
        if p.is_file() and not p.name.endswith(("-shm", "-wal"))
    }


def test_run_page_data_and_read_only(runs: Path, viewer: Viewer) -> None:
    """Summary, timeline (conversation, snapshots with diff, the submission linked to its
    snapshot, harness events), search; and not one file of the run changed by reading."""
    before = _tree(runs)
    s = viewer.get(f"/api/run/{RUN_ID}/summary").json()
    assert s["status"] == "running" and s["live"] and 500 < s["time_left_s"] <= 550
    assert (s["submissions"], s["best"], s["baseline"], s["llm_calls"]) == (1, 0.5, 0.25, 2)
    assert (s["input_tokens"], s["output_tokens"], s["snapshots"]) == (40, 9, 2)
    tl = viewer.get(f"/api/run/{RUN_ID}/timeline").json()["events"]
    kinds = [e["kind"] for e in tl]
    assert kinds.count("llm") == 2 and kinds.count("snapshot") == 2 and "harness" in kinds
    llm = [e for e in tl if e["kind"] == "llm"]
    assert llm[0]["input"] == [{"role": "user", "text": "Improve the model please."}]
    assert llm[0]["tool_calls"][0]["name"] == "bash" and llm[0]["text"] == "Writing train.py now."
    assert llm[1]["input"][-1] == {"role": "user", "text": "training 0.01"}
    sub = next(e for e in tl if e["kind"] == "submission")
    assert sub["id"] == "sub-1" and sub["submission_id"] == 1 and sub["score"] == 0.5
    snap = next(e for e in tl if e["id"] == sub["snapshot_id"])
    diff = viewer.get(f"/api/run/{RUN_ID}/diff/{snap['sha']}").text
    assert "-LR = 0.001" in diff and "+LR = 0.01" in diff
    hits = viewer.get(f"/api/run/{RUN_ID}/search", params={"q": "ZEBRA-striped"}).json()
    assert hits["ids"] == ["llm-1"]
    raw = viewer.get(f"/api/run/{RUN_ID}/llm/0").json()
    assert raw["request"]["system"] == "You are a coding agent."
    charts = viewer.get(f"/api/run/{RUN_ID}/charts").json()
    assert [row[1] for row in charts["scores"]] == [0.5] and charts["baseline"] == 0.25
    for page in ("/", f"/run/{RUN_ID}", "/static/uPlot.iife.min.js", "/static/viewer.js"):
        assert viewer.get(page).status_code == 200
    assert _tree(runs) == before


def test_errors_are_4xx_json(viewer: Viewer) -> None:
    for url, status in [
        ("/api/run/nope/summary", 404),
        (f"/api/run/{RUN_ID}/diff/0123456789abcdef", 404),
        (f"/api/run/{RUN_ID}/diff/..%2f..%2fetc", 404),
        (f"/api/run/{RUN_ID}/llm/99", 404),
        ("/static/../run.json", 404),
    ]:
        r = viewer.get(url)
        assert r.status_code == status and "error" in r.json(), (url, r.text)
    for method in ("POST", "PUT", "DELETE", "PATCH"):
        r = viewer.request(method, f"/api/run/{RUN_ID}/summary")
        assert r.status_code == 405 and "read-only" in r.json()["error"]


def test_a_viewer_on_loopback_serves_nothing_without_its_token(runs: Path, viewer: Viewer) -> None:
    """An agent under --network host or --sandbox none shares the host's loopback: without
    the token the viewer printed it reads no run, no transcript, no diff, no score; a web
    page elsewhere (DNS rebinding, any Host) neither. Each start draws a fresh token."""
    sha = next(
        e["sha"]
        for e in viewer.get(f"/api/run/{RUN_ID}/timeline").json()["events"]
        if e["kind"] == "snapshot"
    )
    paths = [
        "/",
        "/api/runs",
        f"/run/{RUN_ID}",
        f"/api/run/{RUN_ID}/summary",
        f"/api/run/{RUN_ID}/timeline",
        f"/api/run/{RUN_ID}/llm/0",
        f"/api/run/{RUN_ID}/diff/{sha}",
        f"/api/run/{RUN_ID}/search?q=ZEBRA",
        f"/api/run/{RUN_ID}/charts",
    ]
    for path in paths:
        assert viewer.get(path).status_code == 200, path
        for headers in ({}, {"host": "attacker.example:80"}, {"host": "127.0.0.1"}):
            r = httpx.get(viewer.base + path, headers=headers)
            assert r.status_code == 401 and "token" in r.json()["error"], (path, headers)
            assert "ZEBRA" not in r.text and "LR =" not in r.text
        wrong = httpx.get(viewer.base + path, params={"token": "x" * len(viewer.token)})
        assert wrong.status_code == 401, path
    assert len(viewer.token) >= 16
    # The announce file `agent2rl run` reads (for the page URL it prints) holds the token:
    # readable by the user alone.
    announce = viewer.home / "viewer.json"
    assert json.loads(announce.read_text())["token"] == viewer.token
    assert announce.stat().st_mode & 0o077 == 0


def test_a_given_token_is_required_by_query_cookie_or_bearer(runs: Path, tmp_path: Path) -> None:
    for served in _serve(runs, tmp_path, "--token", TOKEN):
        base = served.base
        assert served.token == TOKEN
        assert httpx.get(f"{base}/api/runs").status_code == 401
        assert httpx.get(f"{base}/api/runs?token=wrong-token-xxxxxxxxxxx").status_code == 401
        with httpx.Client() as client:
            first = client.get(f"{base}/?token={TOKEN}")
            assert first.status_code == 200 and "agent2rl_view" in first.headers["set-cookie"]
            # The cookie carries the token from then on.
            assert client.get(f"{base}/api/runs").json()["runs"][0]["run_id"] == RUN_ID
        auth = {"authorization": f"Bearer {TOKEN}", "host": "viewer.lan"}
        assert httpx.get(f"{base}/api/runs", headers=auth).status_code == 200


def test_binding_off_loopback_needs_a_token_and_a_short_one_is_refused(runs: Path) -> None:
    r = run_cli(["view", str(runs), "--host", "0.0.0.0", "--port", "0", "--token", "short"])
    assert r.returncode == 2 and "at least 16 characters" in r.stdout + r.stderr
    assert "Traceback" not in r.stdout + r.stderr
    r = run_cli(["view", str(runs / "missing")])
    assert r.returncode == 2 and "not a directory" in r.stdout + r.stderr


def test_a_write_transaction_of_the_grader_is_not_blocked(runs: Path, viewer: Viewer) -> None:
    """The grader holds a write transaction open on the ledger while the viewer reads it:
    the viewer answers (with what was committed) and the grader commits right after; the
    committed row then shows. A reader taking a write lock would make one of them wait."""
    db = runs / RUN_ID / "ledger.db"
    writer = sqlite3.connect(db, timeout=0.5)
    try:
        writer.execute("BEGIN IMMEDIATE")
        writer.execute(
            "INSERT INTO submissions(submitted_at, path, status)"
            " VALUES (?, 'output/v2', 'evaluating')",
            (time.time(),),
        )
        t0 = time.monotonic()
        s = viewer.get(f"/api/run/{RUN_ID}/summary", timeout=10).json()
        assert time.monotonic() - t0 < 2 and s["submissions"] == 1
        writer.execute("COMMIT")
    finally:
        writer.close()
    s = viewer.get(f"/api/run/{RUN_ID}/summary").json()
    assert s["submissions"] == 2 and s["evaluating"] == 1


def test_export_atif(runs: Path, tmp_path: Path) -> None:
    r = run_cli(["export", str(runs), "--out", str(tmp_path / "out")])
    assert r.returncode == 0, r.stdout + r.stderr
    index = json.loads((tmp_path / "out" / "index.json").read_text())
    assert index["format"] == "agent2rl-trajectory" and index["version"] == 1
    traj = json.loads((tmp_path / "out" / f"{RUN_ID}.trajectory.json").read_text())
    assert traj["schema_version"] == "ATIF-v1.4" and traj["session_id"] == RUN_ID
    steps = traj["steps"]
    assert [s["step_id"] for s in steps] == list(range(1, len(steps) + 1))
    by_source = [(s["source"], s["message"][:20]) for s in steps]
    assert by_source[:3] == [
        ("system", "You are a coding age"),
        ("user", "Improve the model pl"),
        ("agent", "Writing train.py now"),
    ]
    agent = [s for s in steps if s["source"] == "agent"]
    call = agent[0]["tool_calls"][0]
    assert call == {
        "tool_call_id": "toolu_1",
        "function_name": "bash",
        "arguments": {"command": "python code/train.py"},
    }
    assert agent[0]["observation"]["results"] == [
        {"source_call_id": "toolu_1", "content": "training 0.01"}
    ]
    assert agent[1]["metrics"]["prompt_tokens"] == 30
    assert traj["final_metrics"]["total_prompt_tokens"] == 40
    subs = [s for s in steps if s["source"] == "system" and "submission" in s.get("extra", {})]
    assert len(subs) >= 1 and subs[0]["extra"]["submission"]["score"] == 0.5
    assert traj["extra"]["agent2rl"]["baseline"] == 0.25
    r = run_cli(["export", str(tmp_path / "nothing-here")])
    assert r.returncode == 2 and "holds no run" in r.stdout + r.stderr


def test_jsonl_tail_reads_only_complete_lines(tmp_path: Path) -> None:
    """A line being written (no newline yet) is read once it is whole, not torn."""
    from agent2rl.viewer.data import JsonlTail

    path = tmp_path / "t.jsonl"
    path.write_text('{"a": 1}\n{"a": ')
    tail = JsonlTail(path, lambda d: d["a"])
    assert tail.refresh() == [1]
    with open(path, "a") as f:
        f.write("2}\n")
    assert tail.refresh() == [1, 2] and tail.line(1) == {"a": 2}


def test_run_page_url_names_a_live_viewer_of_the_run(
    runs: Path, viewer: Viewer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While `agent2rl view` serves a directory, a run under it has a page URL with the
    viewer's token (what `agent2rl run` prints); a stale announce file (its process gone)
    gives none."""
    from agent2rl.files import write_json_atomic
    from agent2rl.viewer_link import ANNOUNCE, run_page_url

    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("AGENT2RL_HOME", str(home))
    assert run_page_url(runs / RUN_ID) is None
    monkeypatch.setenv("AGENT2RL_HOME", str(viewer.home))  # the live viewer's announce file
    url = run_page_url(runs / RUN_ID)
    assert url == f"{viewer.base}/run/{RUN_ID}?token={viewer.token}"
    assert httpx.get(url).status_code == 200
    assert run_page_url(tmp_path / "elsewhere" / RUN_ID) is None
    monkeypatch.setenv("AGENT2RL_HOME", str(home))
    dead = subprocess.Popen(["true"])
    dead.wait()
    record = {"url": viewer.base, "root": str(runs.resolve()), "pid": dead.pid}
    write_json_atomic(home / ANNOUNCE, record)
    assert run_page_url(runs / RUN_ID) is None


def test_timeline_shows_the_harness_caps_and_kills(tmp_path: Path) -> None:
    """A run stopped by its memory cap, whose token budget ran out first: the timeline has the
    token cap (the first refusal, with the count) and the cap that killed the agent, each
    with the record's own words, besides created / start / ended. A refusal that is not the
    budget's (a model not allowed) is not a token cap."""
    from agent2rl.metering import UsageRecord, append_record
    from agent2rl.metering.budget import Estimate, TokenBudget
    from agent2rl.viewer.data import RunView

    t0 = 1_000_000.0
    paths = write_run(
        tmp_path / "capped",
        task_version="2",
        created_at=t0 - 10,
        start=t0,
        deadline=t0 + 600,
        ended_at=t0 + 300,
        status="oom",
        agent_exit_code=-9,
        error="memory cap of 2.0 GiB reached (2.1 GiB in use)",
    )
    paths.record.mkdir()
    refusal = TokenBudget(100, used=100).reserve(Estimate(50, 10))
    assert refusal is not None
    lines = [
        UsageRecord(api="openai", endpoint="chat", time=t0 + 100, status=200, input_tokens=100),
        UsageRecord(api="openai", endpoint="chat", time=t0 + 150, status=403, refused=True,
                    error="model gpt-4-1106-preview is not allowed for the agent"),
        UsageRecord(api="openai", endpoint="chat", time=t0 + 200, status=429, refused=True,
                    error=refusal.message),
        UsageRecord(api="openai", endpoint="chat", time=t0 + 210, status=429, refused=True,
                    error=refusal.message),
    ]  # fmt: skip
    for rec in lines:
        append_record(paths.llm_usage, rec)

    events = [e for e in RunView(paths.root).timeline() if e["kind"] == "harness"]
    by = {e["event"]: e for e in events}
    assert [e["event"] for e in events] == ["created", "start", "token_cap", "cap", "ended"]
    assert by["token_cap"]["t"] == t0 + 200 and "2 requests refused" in by["token_cap"]["text"]
    assert by["token_cap"]["error"] == refusal.message
    assert by["cap"]["t"] == t0 + 300 and "memory cap reached" in by["cap"]["text"]
    assert "killed" in by["cap"]["text"] and by["cap"]["error"].startswith("memory cap of 2.0")
    assert "oom" in by["ended"]["text"]
