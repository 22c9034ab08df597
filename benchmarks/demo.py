"""The demo's figures: ``agent2rl demo`` (reference-grpo on arith-lite with the tiny model, a
4-minute budget) run ``--repeats`` times in a row, each into a fresh runs directory, scored
on the graded split (the task's private items) as every run is.

    python benchmarks/demo.py [--repeats 3] [--budget 4m]

One private ``AGENT2RL_HOME`` serves every repeat (unless one is set). Before the first timed
run, an untimed ``agent2rl demo --budget 1s`` builds the tiny model and the task data there
and caches the baseline (``preparation_s``), so each repeat times what a second
``make demo`` does; each run says whether its baseline came from the cache
(``baseline_cached``). Per run: the baseline, the best and final scores, the improvement with
its 95% interval, the graded submissions, the wall time and the score of every submission
(also as ``submissions`` records, for a chart); then the best, the improvement and the wall
time summarized over the runs, and ``median_run``: the run whose best is the median (the
lower middle one for an even count), with the plan ``agent2rl demo`` printed first and the
lines it printed at its end, verbatim (the report's path as the user's would read), which
the README shows (``benchmarks/readme.py``).

``--quick``: one run with a 20-second budget (too short for a submission: it checks that
the command runs and writes the file).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import provenance


def demo(runs: Path, budget: str) -> tuple[list[str], float]:
    """``agent2rl demo`` into ``runs``: (the lines it printed, its wall seconds). Raises
    SystemExit with its output when it fails."""
    cmd = [sys.executable, "-m", "agent2rl.cli", "demo", "--runs-dir", str(runs)]
    started = time.time()
    out = subprocess.run(
        [*cmd, "--budget", budget],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "200"},
    )
    wall = time.time() - started
    if out.returncode != 0:
        raise SystemExit(f"agent2rl demo failed ({out.returncode}):\n{out.stdout}\n{out.stderr}")
    return out.stdout.splitlines(), wall


def one_run(runs: Path, budget: str) -> dict[str, Any]:
    """One ``agent2rl demo`` into ``runs`` (empty); its figures, the plan it printed first
    and its last printed lines."""
    lines, wall = demo(runs, budget)
    (run_dir,) = [p for p in runs.iterdir() if (p / "run.json").is_file()]
    m = json.loads((run_dir / "report" / "metrics.json").read_text())
    first = next(i for i, line in enumerate(lines) if line.startswith("agent2rl demo:"))
    last = next(i for i, line in enumerate(lines) if line.lstrip().startswith("expected in all"))
    plan = lines[first : last + 1]
    tail = lines[next(i for i, line in enumerate(lines) if line.startswith("run finished")) :]
    # the report's path is this machine's: the README shows it as the user's would read
    headline = [
        "report: runs/<run_id>/report/report.html" if line.startswith("report: ") else line
        for line in tail
    ]
    points = m.get("trajectory") or []
    return {
        "baseline": m.get("baseline"),
        "baseline_cached": any(
            line.startswith("baseline: ") and line.endswith("(cached)") for line in lines
        ),
        "best": m.get("best_score"),
        "final_score": m.get("final_score"),
        "improvement": m.get("improvement"),
        "improvement_ci95": m.get("improvement_ci95"),
        "graded_submissions": sum(1 for p in points if p.get("status") == "graded"),
        "wall_s": round(wall, 1),
        "scores": [p.get("score") for p in points],
        "plan": plan,
        "headline": headline,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--budget", default="4m", help="each run's (the demo's default)")
    provenance.add_arguments(ap, "demo")
    args = ap.parse_args()
    if args.quick:
        args.repeats, args.budget = 1, "20s"
    rec = provenance.Recorder(args)
    os.environ.setdefault("AGENT2RL_HOME", tempfile.mkdtemp(prefix="agent2rl-demo-home-"))
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="agent2rl-demo-runs-") as tmp:
        # not timed: the model, the task data and the cached baseline (what a first
        # `make demo` adds), by the demo itself so that the baseline's cache key is its own
        _, prepared_s = demo(Path(tmp) / "preparation", "1s")
        print(f"prepared (model, data, baseline) in {prepared_s:.0f}s", flush=True)
        for i in range(args.repeats):
            run = one_run(Path(tmp) / f"runs-{i + 1}", args.budget)
            runs.append({"run": i + 1, **run})
            print(f"run {i + 1}: best {run['best']} in {run['wall_s']:.0f}s", flush=True)
    ranked = sorted(runs, key=lambda r: (r["best"] is None, r["best"] or 0.0))
    median = ranked[(len(ranked) - 1) // 2]
    numbers = {
        k: [r[k] for r in runs if r[k] is not None] for k in ("best", "improvement", "wall_s")
    }
    rec.write(
        {
            "task": "arith-lite",
            "agent": "reference-grpo",
            "model": "tiny",
            "budget": args.budget,
            "preparation_s": round(prepared_s, 1),
            "summary": {k: provenance.summarize(v, 2) for k, v in numbers.items()},
            "runs": [{k: v for k, v in r.items() if k not in ("plan", "headline")} for r in runs],
            "submissions": [
                {"run": r["run"], "submission": j + 1, "score": s}
                for r in runs
                for j, s in enumerate(r["scores"])
            ],
            "median_run": {k: median[k] for k in ("run", "plan", "headline")},
        },
        repeats=args.repeats,
        split="graded",
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
