"""The grading service's throughput and latency under concurrent clients, over loopback HTTP
against the real service process: status polls (``GET /submissions``) and duplicate
submissions (``POST /submit`` of byte-identical copies of a model graded once: recorded,
snapshotted, copied, hashed and settled as a duplicate, no evaluation), at 1, 10 and 100
concurrent clients.

    python benchmarks/grading_service.py

writes ``docs/figures/data/grading_service.json`` (the figure as published); options:
``[--clients 1 10 100] [--polls 300] [--dups 100] [--repeats 3] [--out PATH] [--quick]``.

Each client sends its requests one after another; a level's throughput is its requests over
its wall time, p50/p99 are per-request latencies. Every level is measured ``--repeats``
times, the levels' order alternating between repeats: ``p50_ms`` and ``p99_ms`` are the
percentiles of all its requests over all repeats (the chart's points), and the per-repeat
throughput, p50 and p99 are summaries (median and range from 3 repeats, the samples below).
Polls run first, on a ledger of two rows (the graded model and its first duplicate); each
duplicate level then adds its rows. The duplicates are copies of one directory
(``output/dup-<i>``), so every one is staged (one copy at a time). Uses the tiny model on
arith-lite and a private AGENT2RL_HOME (a temp dir) unless one is set; the one evaluation
(the baseline, then the graded model, on arith-lite's graded split) is not timed: split
``graded``, though the figures are the service's, not the model's.

``--quick``: 1 and 4 clients, 20 polls and 4 duplicates per level, one repeat (seconds; the
file is marked quick and is no figure).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import provenance


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


def percentile(ordered: list[float], q: float) -> float:
    """The ``q`` quantile of sorted ``ordered`` (nearest rank)."""
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def level_summary(runs: list[tuple[list[float], float, dict[int, int]]]) -> dict[str, Any]:
    """One level's figures over its repeats (``runs``: latencies, wall, statuses each): the
    percentiles of all its requests, and the per-repeat throughput and percentiles."""
    pooled = sorted(x for lat, _, _ in runs for x in lat)
    statuses: dict[str, int] = {}
    for _, _, st in runs:
        for k, v in st.items():
            statuses[str(k)] = statuses.get(str(k), 0) + v
    return {
        "requests_per_repeat": len(runs[0][0]),
        "p50_ms": round(statistics.median(pooled) * 1000, 1),
        "p99_ms": round(percentile(pooled, 0.99) * 1000, 1),
        "throughput_rps": provenance.summarize([len(lat) / wall for lat, wall, _ in runs], 2),
        "p50_ms_per_repeat": provenance.summarize(
            [statistics.median(lat) * 1000 for lat, _, _ in runs], 1
        ),
        "p99_ms_per_repeat": provenance.summarize(
            [percentile(sorted(lat), 0.99) * 1000 for lat, _, _ in runs], 1
        ),
        "wall_s": provenance.summarize([wall for _, wall, _ in runs]),
        "statuses": dict(sorted(statuses.items())),
    }


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter
    )
    ap.add_argument("--clients", type=int, nargs="+", default=[1, 10, 100])
    ap.add_argument("--polls", type=int, default=300, help="status polls per level and repeat")
    ap.add_argument("--dups", type=int, default=100, help="duplicates per level and repeat")
    ap.add_argument("--repeats", type=int, default=3, help="each level measured this often")
    provenance.add_arguments(ap, "grading_service")
    args = ap.parse_args()
    if args.quick:
        args.clients, args.polls, args.dups, args.repeats = [1, 4], 20, 4, 1
    rec = provenance.Recorder(args)
    if "AGENT2RL_HOME" not in os.environ:
        os.environ["AGENT2RL_HOME"] = tempfile.mkdtemp(prefix="agent2rl-bench-")
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    import httpx

    from agent2rl.grading.ledger import Ledger
    from agent2rl.grading.service import start_service

    work = Path(tempfile.mkdtemp(prefix="grading-bench-"))
    try:
        print(provenance.machine(), flush=True)
        t0 = time.time()
        paths, model = build_run(work / "run")
        print(f"run set up (baseline evaluated) in {time.time() - t0:.1f}s", flush=True)
        token = secrets.token_urlsafe(16)
        handle = start_service(
            paths, token, eval_timeout_s=600, max_bytes=64 * 2**20, base_model_dir=model.path
        )
        runs: dict[str, dict[int, list]] = {
            "polls": {n: [] for n in args.clients},
            "duplicates": {n: [] for n in args.clients},
        }
        try:
            auth = {"Authorization": f"Bearer {token}"}
            with httpx.Client(base_url=handle.url, headers=auth, timeout=600) as http:
                first = http.post("/submit", json={"model_path": "output/graded"}).json()
                assert first["status"] == "graded", first
                shutil.copytree(paths.output / "graded", paths.output / "dup-0")
                dup = http.post("/submit", json={"model_path": "output/dup-0"}).json()
                assert dup["duplicate_of"] == first["submission_id"], dup
            for r in range(args.repeats):
                for n in args.clients if r % 2 == 0 else args.clients[::-1]:
                    polls = [("GET", "/submissions", None)] * max(args.polls, n)
                    runs["polls"][n].append(asyncio.run(measure(handle.url, token, n, polls)))
            for r in range(args.repeats):
                for n in args.clients if r % 2 == 0 else args.clients[::-1]:
                    count = max(args.dups, n)
                    names = [f"dup-{n}-{r}-{i}" for i in range(count)]
                    for name in names:
                        shutil.copytree(paths.output / "graded", paths.output / name)
                    subs = [("POST", "/submit", {"model_path": f"output/{m}"}) for m in names]
                    runs["duplicates"][n].append(asyncio.run(measure(handle.url, token, n, subs)))
                    for name in names:
                        shutil.rmtree(paths.output / name)
        finally:
            handle.stop()
        results = {
            kind: {str(n): level_summary(levels[n]) for n in args.clients}
            for kind, levels in runs.items()
        }
        with Ledger(paths.ledger) as ledger:
            rows = ledger.submissions()
        evaluated = sum(1 for s in rows if (s.eval_seconds or 0) > 0)
        print(f"\nledger: {len(rows)} rows, {evaluated} evaluated (the graded model only)")
        print(
            f"{'kind':<12}{'clients':>8}{'requests':>10}{'req/s':>24}{'p50 ms':>10}{'p99 ms':>10}"
        )
        for kind, levels in results.items():
            for n, r in levels.items():
                rps = r["throughput_rps"]
                shown = rps.get("median", ", ".join(str(x) for x in rps["samples"]))
                print(
                    f"{kind:<12}{n:>8}{r['requests_per_repeat']:>10}{shown:>24}"
                    f"{r['p50_ms']:>10}{r['p99_ms']:>10}  {r['statuses']}"
                )
        rec.write(
            {
                "task": "arith-lite",
                "model": "tiny",
                "clients": args.clients,
                "ledger_rows_at_end": len(rows),
                "evaluations": evaluated,
                **results,
            },
            repeats=args.repeats,
            split="graded",
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
