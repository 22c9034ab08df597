"""Cold vs warm grading (issue #28 item 2): submission-to-score latency through the real
grading service, one process per submission (``--grader cold``) against one long-lived worker
that keeps the task and the model loaded and reloads each submission's weights
(``--grader warm``), side by side on the same submissions.

    python benchmarks/grading_cold_warm.py [--tasks arith-lite] [--submissions 4]
        [--out docs/figures/data/grading_cold_warm.json]

For each task and grader, a fresh run directory (workspace, baseline, running clock) and
service; ``--submissions`` distinct perturbed copies of the tiny model are submitted one
after another. Per submission: the client's submit-to-score wall time and the ledger's
``timings`` (queue, staging, process start, task setup, device wait, load, generation,
scoring). Overhead is everything but generation, scoring and waits behind other evaluations
(:func:`agent2rl.grading.evaluator.grading_overhead_s`). Medians are over the submissions
after the first (the first warm one also starts the worker, reported on its own). The
per-item results of the two graders are compared. JSON goes to ``--out`` with the command,
commit, date and machine. Uses a private AGENT2RL_HOME (a temp dir) unless one is set.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from spine import machine  # the machine line every benchmark prints

ROOT = Path(__file__).resolve().parent.parent


def build_run(root: Path, task_name: str, n: int) -> tuple[Any, Any, list[str]]:
    """A run directory as the orchestrator makes one
    (:func:`agent2rl.orchestration.scratch_run.make_run`), with ``n`` perturbed copies of the
    tiny model in its workspace's output/ (the same ``n`` for every run: seeded)."""
    from agent2rl.models import resolve_model
    from agent2rl.orchestration.scratch_run import make_run, perturbed_copy
    from agent2rl.settings import load_settings
    from agent2rl.tasks import get_task, prepare_task

    settings = load_settings()
    model = resolve_model("tiny", settings.model_store)
    task = get_task(task_name)
    prepared = prepare_task(task, settings.task_store)
    paths = make_run(root, task, prepared, model, budget_s=3600.0, agent="benchmark")
    rels = []
    for i in range(n):
        perturbed_copy(model.path, paths.output / f"s{i}", seed=100 + i)
        rels.append(f"output/s{i}")
    return paths, model, rels


def grade_all(task_name: str, grader: str, n: int, work: Path) -> dict[str, Any]:
    import httpx

    from agent2rl.grading.evaluator import grading_overhead_s
    from agent2rl.grading.ledger import Ledger
    from agent2rl.grading.service import start_service

    paths, model, rels = build_run(work / f"{task_name}-{grader}", task_name, n)
    token = secrets.token_urlsafe(16)
    handle = start_service(
        paths,
        token,
        eval_timeout_s=600,
        max_bytes=64 * 2**20,
        base_model_dir=model.path,
        options={"grader": grader},
    )
    rows: list[dict[str, Any]] = []
    try:
        auth = {"Authorization": f"Bearer {token}"}
        with httpx.Client(base_url=handle.url, headers=auth, timeout=600) as http:
            for rel in rels:
                t0 = time.perf_counter()
                answer = http.post("/submit", json={"model_path": rel}).json()
                wall = time.perf_counter() - t0
                assert answer["status"] == "graded", answer
                rows.append({"id": answer["submission_id"], "wall_s": wall})
    finally:
        handle.stop()
    with Ledger(paths.ledger) as ledger:
        subs = {s.id: s for s in ledger.submissions()}
    for row in rows:
        s = subs[row["id"]]
        row.update(
            score=s.score,
            timings=s.timings,
            overhead_s=grading_overhead_s(s.timings),
            items=(paths.root / s.items_path).read_text(),
        )
    return {"rows": rows}


def med(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter
    )
    ap.add_argument("--tasks", nargs="+", default=["arith-lite"])
    ap.add_argument("--submissions", type=int, default=4)
    ap.add_argument("--out", type=Path, default=Path("docs/figures/data/grading_cold_warm.json"))
    args = ap.parse_args()
    if args.submissions < 2:
        ap.error("--submissions must be at least 2 (the first warm one starts the worker)")
    if "AGENT2RL_HOME" not in os.environ:
        os.environ["AGENT2RL_HOME"] = tempfile.mkdtemp(prefix="agent2rl-bench-")
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    work = Path(tempfile.mkdtemp(prefix="grading-cold-warm-"))
    print(machine())
    results: dict[str, Any] = {}
    try:
        for task in args.tasks:
            per: dict[str, Any] = {}
            for grader in ("cold", "warm"):
                per[grader] = grade_all(task, grader, args.submissions, work)
            same = [
                c["items"] == w["items"]
                for c, w in zip(per["cold"]["rows"], per["warm"]["rows"], strict=True)
            ]
            out: dict[str, Any] = {"identical_items": all(same)}
            for grader in ("cold", "warm"):
                rows = per[grader]["rows"]
                later = rows[1:]
                t = [r["timings"] for r in later]
                out[grader] = {
                    "first": {k: rows[0][k] for k in ("wall_s", "overhead_s", "timings")},
                    "median_wall_s": med([r["wall_s"] for r in later]),
                    "median_overhead_s": med([r["overhead_s"] for r in later]),
                    "median": {
                        k: med([float(x[k]) for x in t if isinstance(x.get(k), int | float)])
                        for k in (
                            "queue_wait_s",
                            "staging_s",
                            "process_start_s",
                            "setup_s",
                            "lock_wait_s",
                            "load_s",
                            "generate_s",
                            "score_s",
                            "eval_s",
                        )
                    },
                    "loads": [r["timings"].get("load") for r in rows],
                    "scores": [r["score"] for r in rows],
                }
            c, w = out["cold"]["median_overhead_s"], out["warm"]["median_overhead_s"]
            out["overhead_ratio_cold_over_warm"] = c / w if c and w else None
            results[task] = out
            cw, ww = out["cold"]["median_wall_s"], out["warm"]["median_wall_s"]
            print(
                f"{task}: overhead cold {c:.2f}s, warm {w:.2f}s (x{c / w:.1f}); submit-to-score "
                f"cold {cw:.2f}s, warm {ww:.2f}s; identical per-item results: {all(same)}"
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    data = {
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        "commit": subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip(),
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": machine(),
        "submissions": args.submissions,
        "results": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(data, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
