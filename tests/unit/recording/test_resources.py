"""ResourceSampler on a real process tree."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import psutil

from agent2rl.recording import ResourceSampler


def test_samples_a_real_process_tree(tmp_path: Path) -> None:
    out = tmp_path / "record" / "resources.jsonl"
    proc = subprocess.Popen(["bash", "-c", "sleep 5 & sleep 5 & wait"])
    sampler = ResourceSampler(proc.pid, out, interval_s=0.1)
    try:
        # Wait until bash has forked both sleeps, so the first samples already see them.
        deadline = time.monotonic() + 5
        children: list[psutil.Process] = []
        while len(children) < 2 and time.monotonic() < deadline:
            children = psutil.Process(proc.pid).children(recursive=True)
            time.sleep(0.02)
        assert len(children) == 2
        sampler.start()
        time.sleep(0.6)
        alive = sampler.alive_seen()
    finally:
        sampler.stop()
        proc.kill()
        proc.wait()

    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(records) >= 3
    for rec in records:
        assert {"t", "cpu_percent", "rss_bytes", "n_procs"} <= rec.keys()
        assert isinstance(rec["cpu_percent"], float)
        assert isinstance(rec["rss_bytes"], int) and isinstance(rec["n_procs"], int)
    assert max(r["n_procs"] for r in records) >= 3
    assert max(r["rss_bytes"] for r in records) > 0
    seen = sampler.seen_pids()
    assert {proc.pid, *(c.pid for c in children)} <= seen
    assert {p.pid for p in alive} >= {c.pid for c in children}
    n_lines = len(records)
    time.sleep(0.3)
    assert len(out.read_text().splitlines()) == n_lines  # stop() really stopped sampling


def test_orphans_stay_tracked_and_root_exit_is_fine(tmp_path: Path) -> None:
    out = tmp_path / "resources.jsonl"
    # The subshell lives 0.4 s (long enough to be sampled), then exits: its background sleep
    # is re-parented away from bash, out of the tree (a double fork). Then bash exits too.
    proc = subprocess.Popen(["bash", "-c", "(sleep 3.217 & sleep 0.4) ; sleep 0.3"])
    sampler = ResourceSampler(proc.pid, out, interval_s=0.05)
    sampler.start()
    try:
        proc.wait()
        time.sleep(0.3)
        orphans = [p for p in sampler.alive_seen() if p.pid != proc.pid]
        assert any("3.217" in " ".join(p.cmdline()) for p in orphans)
    finally:
        sampler.stop()
        for p in sampler.alive_seen():
            p.kill()
    last = json.loads(out.read_text().splitlines()[-1])
    assert last["n_procs"] >= 1  # the orphaned sleep, though the root is gone
