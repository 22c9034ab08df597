"""Figures for the spine: the demo's wall time, evaluation throughput of the transformers
backend on arith-lite, and the grading service's latency for a duplicate submission.

    python benchmarks/spine.py [--skip-demo] [--repeats 20]

Prints one line per figure. Uses a private AGENT2RL_HOME (a temp dir) unless one is set, so
the first evaluation also builds the tiny model and the task data (reported separately).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx


def machine() -> str:
    """Host name, cores and processor, then the GPUs ``nvidia-smi`` lists (none on a CPU
    machine), so that a figure names the machine that measured it."""
    cpu = platform.processor() or platform.machine()
    line = f"{platform.node()} ({os.cpu_count()} cores, {cpu})"
    if shutil.which("nvidia-smi"):
        query = ["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader"]
        gpus = subprocess.run(query, capture_output=True, text=True, timeout=30).stdout
        line += "".join(f", GPU {g.strip()}" for g in gpus.splitlines() if g.strip())
    return line


def write_figures(out: Path, data: dict[str, Any]) -> None:
    """Write a benchmark's figures to ``out`` as JSON (its folder created): the command line,
    the short commit, the date (UTC) and :func:`machine` first, then ``data``."""
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parent,
    ).stdout.strip()
    head = {
        "command": " ".join(["python", *sys.argv]),
        "commit": commit,
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": machine(),
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({**head, **data}, indent=2) + "\n")


def demo_wall_time(runs: Path) -> float:
    start = time.time()
    subprocess.run(
        [sys.executable, "-m", "agent2rl.cli", "demo", "--runs-dir", str(runs)],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return time.time() - start


def eval_throughput() -> tuple[float, int, float]:
    from agent2rl.inference import load_backend
    from agent2rl.models import resolve_model
    from agent2rl.settings import load_settings
    from agent2rl.tasks import get_task, prepare_task

    settings = load_settings()
    model = resolve_model("tiny", settings.model_store)
    task = get_task("arith-lite")
    prepared = prepare_task(task, settings.task_store)
    backend = load_backend(model.path)
    task.evaluate(backend, prepared, limit=16)  # warm-up
    start = time.time()
    result = task.evaluate(backend, prepared)
    seconds = time.time() - start
    return result.n_items / seconds, result.n_items, seconds


def duplicate_latency(work: Path, repeats: int) -> tuple[float, float, float]:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    from support.rundirs import make_run, serve

    from agent2rl.models import resolve_model
    from agent2rl.settings import load_settings
    from agent2rl.tasks import get_task, prepare_task

    settings = load_settings()
    model = resolve_model("tiny", settings.model_store)
    task = get_task("arith-lite")
    paths = make_run(work / "run", task, prepare_task(task, settings.task_store), model)
    handle, token = serve(paths, model.path)
    try:
        shutil.copytree(model.path, paths.output / "v1")
        import torch
        from safetensors.torch import load_file, save_file

        t = load_file(model.path / "model.safetensors")
        save_file(
            {k: v + 0.01 * torch.randn_like(v) for k, v in t.items()},
            paths.output / "v1" / "model.safetensors",
        )
        client = httpx.Client(
            base_url=handle.url, timeout=600, headers={"Authorization": f"Bearer {token}"}
        )
        start = time.time()
        client.post("/submit", json={"model_path": "output/v1"}).raise_for_status()
        first = time.time() - start
        lat = []
        for _ in range(repeats):
            start = time.time()
            r = client.post("/submit", json={"model_path": "output/v1"})
            lat.append(time.time() - start)
            assert r.json()["duplicate_of"] is not None
        return first, statistics.median(lat), sorted(lat)[int(0.95 * (len(lat) - 1))]
    finally:
        handle.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--skip-demo", action="store_true")
    ap.add_argument("--repeats", type=int, default=20)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="agent2rl-bench-"))
    os.environ.setdefault("AGENT2RL_HOME", str(work / "home"))
    print(f"machine: {machine()}")
    ips, n, secs = eval_throughput()
    print(
        f"eval throughput (transformers backend, tiny model, arith-lite): {ips:.1f} items/s "
        f"({n} items in {secs:.1f}s)"
    )
    first, med, p95 = duplicate_latency(work, args.repeats)
    print(
        f"grading service: first submission {first:.2f}s (copy + hash + evaluation); "
        f"duplicate submission latency median {med * 1000:.0f} ms, p95 {p95 * 1000:.0f} ms "
        f"over {args.repeats}"
    )
    if not args.skip_demo:
        wall = demo_wall_time(work / "runs")
        print(f"demo wall time (agent2rl demo, budget included): {wall:.0f}s")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
