"""The viewer at scale: a 12-hour run with 10,000 LLM calls and a study of 1,000 runs.

    python benchmarks/viewer_scale.py [--calls 10000] [--runs 1000] [--repeats 3]

Builds, in a temp directory, with the harness's own writers (the proxy's TranscriptWriter,
the grader's Ledger, the code recorder's git):

- one run of 12 hours: ``--calls`` LLM exchanges (one growing conversation, a tool call and
  a ~1 kB tool result each), 200 graded submissions, 50 code snapshots, a resource sample
  every 5 s (8,640);
- a study of ``--runs`` runs (study.db with one slot per run, each run a run.json and a
  ledger with two graded submissions).

Then serves them with ``agent2rl view`` (a subprocess on loopback) and measures each page's
data, cold (the first request: every file read) and warm (the next): the run list, the big
run's summary, timeline, charts and a search, and the study page. With Chromium and
Playwright present it also times whole page loads in the browser (navigation to the
timeline or the slot table rendered). Target: every page under 2 s. Prints a table and
writes the figures through the figures' writer (``docs/figures/data/viewer_scale.json``):
each page's data cold (the first request after the viewer starts: one sample) and warm
(``--repeats`` requests), and ``--repeats`` whole page loads in Chromium (none without it).
``--quick``: 200 calls, 20 runs, one repeat.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import provenance

HOURS = 12


def build_big_run(root: Path, calls: int) -> str:
    from agent2rl.grading.ledger import Ledger
    from agent2rl.metering.transcript import TranscriptWriter
    from agent2rl.recording.snapshot import CodeRecorder
    from agent2rl.rundir import RunInfo, RunPaths

    run_id = "20261125-000000-arith-lite-big-0001"
    paths = RunPaths(root / run_id)
    paths.code.mkdir(parents=True)
    paths.record.mkdir()
    start = time.time() - HOURS * 3600
    RunInfo(
        run_id=run_id,
        task="arith-lite",
        task_version="2",
        level=1,
        agent="claude-code",
        model="tiny",
        budget_s=HOURS * 3600,
        seed=0,
        sandbox="bwrap",
        created_at=start - 30,
        start=start,
        deadline=start + HOURS * 3600,
        ended_at=start + HOURS * 3600,
        status="deadline",
        driver="claude-sonnet-4-5",
    ).save(paths)
    writer = TranscriptWriter(paths.record / "transcript.jsonl", secrets=["sk-x-benchmark"])
    tools = [{"name": f"tool{i}", "description": "d" * 400, "input_schema": {}} for i in range(12)]
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Improve the model."}]
    dt = HOURS * 3600 / calls
    for i in range(calls):
        t = start + i * dt
        body = {
            "model": "claude-sonnet-4-5",
            "system": "s" * 2000,
            "tools": tools,
            "messages": messages[-40:] if i % 200 == 199 else messages,
        }
        tool_use = {
            "type": "tool_use",
            "id": f"toolu_{i}",
            "name": "bash",
            "input": {"command": f"python code/train.py --step {i}"},
        }
        response = {
            "id": f"msg_{i}",
            "type": "message",
            "role": "assistant",
            "content": [{"type": "text", "text": f"Step {i}: running the trainer."}, tool_use],
            "usage": {"input_tokens": 2000 + i, "output_tokens": 60},
        }
        writer.write(
            {
                "time": t,
                "api": "anthropic",
                "endpoint": "messages",
                "model": "claude-sonnet-4-5",
                "stream": True,
                "status": 200,
                "latency_s": 2.5,
                "input_tokens": 2000 + i,
                "output_tokens": 60,
                "cost_usd": 0.006,
            },
            body,
            response,
        )
        messages = body["messages"] + [
            {"role": "assistant", "content": response["content"]},
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": f"toolu_{i}",
                        "content": f"loss {1 / (i + 1):.5f} " + "x" * 1000,
                    }
                ],
            },
        ]
    with open(paths.record / "resources.jsonl", "w") as f:
        for k in range(HOURS * 3600 // 5):
            f.write(
                json.dumps(
                    {"t": start + 5 * k, "cpu_percent": 50.0, "rss_bytes": 2 << 30, "n_procs": 12}
                )
                + "\n"
            )
    rec = CodeRecorder(paths.code_git, paths.workspace)
    snaps = []
    for k in range(50):
        (paths.code / "train.py").write_text(f"LR = {0.001 * (k + 1)}\n" + "# line\n" * k)
        snaps.append(rec.snapshot(f"submission: output/v{k}"))
    with Ledger(paths.ledger) as led:
        led.set_meta("baseline", {"score": 0.2})
        for k in range(200):
            sid = led.add_submission(
                f"output/v{k}", f"w{k}", None, snapshot=snaps[k % 50], at=start + k * 200
            )
            led.update_submission(
                sid, status="graded", score=0.2 + k / 1000, finished_at=start + k * 200 + 60
            )
    return run_id


def build_study(root: Path, runs: int) -> str:
    from agent2rl.grading.ledger import Ledger
    from agent2rl.rundir import RunInfo, RunPaths
    from agent2rl.study.state import SCHEMA

    study = root / "study-1k"
    (study / "runs").mkdir(parents=True)
    db = sqlite3.connect(study / "study.db")
    db.executescript(SCHEMA)
    db.execute("INSERT INTO meta VALUES ('name', ?)", (json.dumps("scale-1k"),))
    now = time.time()
    for i in range(runs):
        run_id = f"20261125-000000-arith-lite-s{i:04d}"
        paths = RunPaths(study / "runs" / run_id)
        paths.root.mkdir()
        status = "running" if i % 10 == 0 else "completed"
        RunInfo(
            run_id=run_id,
            task="arith-lite",
            task_version="2",
            level=1,
            agent="quick",
            model="tiny",
            budget_s=3600,
            seed=i,
            sandbox="none",
            created_at=now - 3700,
            start=now - 3600 + (i % 10) * 300,
            deadline=now + (i % 10) * 300,
            status=status,
        ).save(paths)
        with Ledger(paths.ledger) as led:
            for k in range(2):
                sid = led.add_submission(f"output/v{k}", None, None, at=now - 1000)
                led.update_submission(sid, status="graded", score=0.1 * k + i / 10_000)
        slot_status = {"running": "running", "completed": "finished"}[status]
        if i % 50 == 7:
            slot_status = "pending"
        db.execute(
            "INSERT INTO slots(key, task, model, agent, repeat, seed, status, attempts, run_id,"
            " run_dir, run_status) VALUES (?, 'arith-lite', 'tiny', 'quick', ?, ?, ?, 1, ?, ?, ?)",
            (f"arith-lite/tiny/quick/{i}", i, i, slot_status, run_id, str(paths.root), status),
        )
    db.commit()
    db.close()
    return "study-1k"


def timed_get(client: httpx.Client, url: str) -> tuple[float, int, int]:
    t0 = time.perf_counter()
    r = client.get(url)
    took = time.perf_counter() - t0
    assert r.status_code == 200, (url, r.status_code, r.text[:200])
    return took, len(r.content), r.status_code


def browser_loads(base: str, token: str, run_id: str, study: str) -> dict[str, float] | None:
    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return None
    if not Path(chromium).is_file():
        return None
    out = {}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=["--headless", "--no-sandbox"])
        try:
            page = browser.new_page()
            for name, url, ready in [
                # the token once, in the URL: a cookie carries it from then on
                ("browser: run list (warm-up)", f"{base}/?token={token}", "tr.run-row"),
                ("browser: run page (10k calls)", f"{base}/run/{run_id}", "#timeline .ev"),
                ("browser: study page (1k runs)", f"{base}/study/{study}", "tr.slot-row"),
                ("browser: run list", f"{base}/", "tr.run-row"),
            ]:
                t0 = time.perf_counter()
                page.goto(url)
                page.wait_for_selector(ready, timeout=60_000)
                out[name] = time.perf_counter() - t0
        finally:
            browser.close()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=10_000)
    ap.add_argument("--runs", type=int, default=1_000)
    ap.add_argument("--repeats", type=int, default=3, help="warm requests and browser loads")
    provenance.add_arguments(ap, "viewer_scale")
    ap.add_argument(
        "--data", type=Path, default=None, help="build into this directory and keep it (reused)"
    )
    args = ap.parse_args()
    if args.quick:
        args.calls, args.runs, args.repeats = 200, 20, 1
    rec = provenance.Recorder(args)
    keep = args.data is not None
    work = args.data or Path(tempfile.mkdtemp(prefix="viewer-scale-"))
    run_id, study = "20261125-000000-arith-lite-big-0001", "study-1k"
    if not (work / "runs" / run_id / "run.json").exists():
        t0 = time.time()
        build_big_run(work / "runs", args.calls)
        print(f"built the {HOURS} h run ({args.calls} calls) in {time.time() - t0:.1f} s")
        t0 = time.time()
        build_study(work, args.runs)
        print(f"built the study ({args.runs} runs) in {time.time() - t0:.1f} s", flush=True)
    transcript = work / "runs" / run_id / "record" / "transcript.jsonl"
    size_mb = transcript.stat().st_size / 2**20
    env = {**os.environ, "AGENT2RL_HOME": str(work / "home")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "agent2rl.cli", "view", str(work), "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    results: dict[str, Any] = {}
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        m = re.search(r"(http://\S+?)/\?token=(\S+)\s", line)
        if not m:
            raise SystemExit(f"the viewer did not start: {line}")
        base, token = m.group(1), m.group(2)
        auth = {"authorization": f"Bearer {token}"}
        with httpx.Client(timeout=120, headers=auth) as client:
            for name, url in [
                ("run timeline (10k calls)", f"/api/run/{run_id}/timeline"),
                ("run summary", f"/api/run/{run_id}/summary"),
                ("run charts", f"/api/run/{run_id}/charts"),
                ("run search", f"/api/run/{run_id}/search?q=loss%200.00050"),
                ("study (1k runs)", f"/api/study/{study}"),
                ("run list (1k runs)", "/api/runs"),
                ("run page html", f"/run/{run_id}"),
            ]:
                cold = timed_get(client, base + url)
                warm = [timed_get(client, base + url) for _ in range(args.repeats)]
                results[name] = {
                    "cold_s": round(cold[0], 3),
                    "warm_s": provenance.summarize([w[0] for w in warm]),
                    "bytes": warm[-1][1],
                }
        tries = [browser_loads(base, token, run_id, study) for _ in range(args.repeats)]
        loads = {k: [t[k] for t in tries if t] for k in (tries[0] or {})}
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
    print(f"\ntranscript: {size_mb:.1f} MiB for {args.calls} calls")
    print(f"{'page data':34} {'cold s':>8} {'warm s':>8} {'bytes':>11}")
    for name, r in results.items():
        warm_s = r["warm_s"]["samples"][-1]
        print(f"{name:34} {r['cold_s']:8.3f} {warm_s:8.3f} {r['bytes']:11,}")
    for name, took in loads.items():
        print(f"{name:34} {max(took):8.3f} (slowest of {len(took)})")
    data = {
        "calls": args.calls,
        "runs": args.runs,
        "transcript_mib": round(size_mb, 2),
        "api": results,
        "browser_s": {k: provenance.summarize(v) for k, v in loads.items()},
        "target_s": 2.0,
    }
    rec.write(data, repeats=args.repeats, split="none")
    if not keep:  # the temp dir, the viewer's home in it too
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
