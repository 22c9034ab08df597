"""The grading service's throughput and latency under concurrent clients, over loopback HTTP
against the real service process: status polls (``GET /submissions``) and duplicate
submissions (``POST /submit`` of byte-identical copies of a model graded once: recorded,
snapshotted, copied, hashed and settled as a duplicate, no evaluation), at 1, 10 and 100
concurrent clients.

    python benchmarks/grading_service.py [--clients 1 10 100] [--polls 300] [--dups 100]
        [--out docs/figures/data/grading_service.json]

Each client sends its requests one after another; a level's throughput is its requests over
its wall time, p50/p99 are per-request latencies. Polls run first, on a ledger of two rows
(the graded model and its first duplicate); each duplicate level then adds its rows. The
duplicates are copies of one directory (``output/dup-<i>``), so every one is staged (one copy
at a time). Uses the tiny model on arith-lite and a private AGENT2RL_HOME (a temp dir) unless
one is set; the one evaluation (the baseline, then the graded model) is not timed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from spine import machine  # the machine line every benchmark prints


def build_run(root: Path):
    """A run directory as the orchestrator makes one (workspace, baseline, a running clock:
    :func:`agent2rl.orchestration.scratch_run.make_run`), with ``output/graded`` (the tiny
    model, perturbed) in its workspace."""
    from agent2rl.models import resolve_model
    from agent2rl.orchestration.scratch_run import make_run, perturbed_copy
    from agent2rl.settings import load_settings
    from agent2rl.tasks import get_task, prepare_task

    settings = load_settings()
    model = resolve_model("tiny", settings.model_store)
    task = get_task("arith-lite")
    prepared = prepare_task(task, settings.task_store)
    paths = make_run(root, task, prepared, model, budget_s=3600.0, agent="benchmark")
    perturbed_copy(model.path, paths.output / "graded", seed=1)
    return paths, model


async def measure(url: str, token: str, clients: int, requests: list[tuple[str, str, dict]]):
    """Send ``requests`` (method, path, json body or None) with ``clients`` concurrent
    clients; returns (per-request seconds, wall seconds, status counts)."""
    import httpx

    queue: asyncio.Queue = asyncio.Queue()
    for r in requests:
        queue.put_nowait(r)
    latencies: list[float] = []
    statuses: dict[int, int] = {}
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=600, limits=limits) as http:

        async def client() -> None:
            while not queue.empty():
                method, path, body = queue.get_nowait()
                began = time.perf_counter()
                r = await http.request(method, path, json=body)
                latencies.append(time.perf_counter() - began)
                statuses[r.status_code] = statuses.get(r.status_code, 0) + 1

        began = time.perf_counter()
        await asyncio.gather(*(client() for _ in range(clients)))
        wall = time.perf_counter() - began
    return latencies, wall, statuses


def summary(latencies: list[float], wall: float, statuses: dict[int, int]) -> dict:
    ordered = sorted(latencies)
    p99 = ordered[min(len(ordered) - 1, int(round(0.99 * (len(ordered) - 1))))]
    return {
        "requests": len(latencies),
        "wall_s": round(wall, 3),
        "throughput_rps": round(len(latencies) / wall, 2),
        "p50_ms": round(statistics.median(ordered) * 1000, 1),
        "p99_ms": round(p99 * 1000, 1),
        "statuses": {str(k): v for k, v in sorted(statuses.items())},
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", type=int, nargs="+", default=[1, 10, 100])
    ap.add_argument("--polls", type=int, default=300, help="status polls per level")
    ap.add_argument("--dups", type=int, default=100, help="duplicate submissions per level")
    ap.add_argument("--out", type=Path, default=Path("docs/figures/data/grading_service.json"))
    args = ap.parse_args()
    if "AGENT2RL_HOME" not in os.environ:
        os.environ["AGENT2RL_HOME"] = tempfile.mkdtemp(prefix="agent2rl-bench-")
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    import httpx

    from agent2rl.grading.ledger import Ledger
    from agent2rl.grading.service import start_service

    work = Path(tempfile.mkdtemp(prefix="grading-bench-"))
    try:
        print(machine())
        t0 = time.time()
        paths, model = build_run(work / "run")
        print(f"run set up (baseline evaluated) in {time.time() - t0:.1f}s")
        token = secrets.token_urlsafe(16)
        handle = start_service(
            paths, token, eval_timeout_s=600, max_bytes=64 * 2**20, base_model_dir=model.path
        )
        results: dict = {"polls": {}, "duplicates": {}}
        try:
            auth = {"Authorization": f"Bearer {token}"}
            with httpx.Client(base_url=handle.url, headers=auth, timeout=600) as http:
                first = http.post("/submit", json={"model_path": "output/graded"}).json()
                assert first["status"] == "graded", first
                shutil.copytree(paths.output / "graded", paths.output / "dup-0")
                dup = http.post("/submit", json={"model_path": "output/dup-0"}).json()
                assert dup["duplicate_of"] == first["submission_id"], dup
            for n in args.clients:
                polls = [("GET", "/submissions", None)] * max(args.polls, n)
                lat, wall, st = asyncio.run(measure(handle.url, token, n, polls))
                results["polls"][str(n)] = summary(lat, wall, st)
            for n in args.clients:
                count = max(args.dups, n)
                names = [f"dup-{n}-{i}" for i in range(count)]
                for name in names:
                    shutil.copytree(paths.output / "graded", paths.output / name)
                subs = [("POST", "/submit", {"model_path": f"output/{m}"}) for m in names]
                lat, wall, st = asyncio.run(measure(handle.url, token, n, subs))
                results["duplicates"][str(n)] = summary(lat, wall, st)
                for name in names:
                    shutil.rmtree(paths.output / name)
        finally:
            handle.stop()
        with Ledger(paths.ledger) as ledger:
            rows = ledger.submissions()
        evaluated = sum(1 for s in rows if (s.eval_seconds or 0) > 0)
        print(f"\nledger: {len(rows)} rows, {evaluated} evaluated (the graded model only)")
        print(
            f"{'kind':<12}{'clients':>8}{'requests':>10}{'req/s':>10}{'p50 ms':>10}{'p99 ms':>10}"
        )
        for kind, levels in results.items():
            for n, r in levels.items():
                print(
                    f"{kind:<12}{n:>8}{r['requests']:>10}{r['throughput_rps']:>10}"
                    f"{r['p50_ms']:>10}{r['p99_ms']:>10}  {r['statuses']}"
                )
        data = {
            "benchmark": "grading_service",
            "machine": machine(),
            "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "task": "arith-lite",
            "model": "tiny",
            "ledger_rows_at_end": len(rows),
            "evaluations": evaluated,
            **results,
        }
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(data, indent=2) + "\n")
        print(f"wrote {args.out}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
