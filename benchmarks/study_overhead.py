"""What a study adds per run: a run inside `agent2rl study run` against the same run started
alone with `agent2rl run`.

    python benchmarks/study_overhead.py [--runs 4] [--budget 30s] [--agent noop]

The run is arith-lite with the tiny model and, by default, an agent that exits at once (its
cost is the harness's own: resolving, the cached baseline, the grading service, the report),
so the overhead is not hidden in a budget. Steps, each a real subprocess of the CLI:

1. one warm-up run (builds the tiny model, the task data and the cached baseline);
2. ``--runs`` runs alone, one after the other: the mean wall time of one ``agent2rl run``;
3. a study of the same ``--runs`` runs at ``--max-concurrent 1`` (local Ray started and shut
   down inside it): its wall time.

Prints the alone mean, the study's wall time, the overhead per run
``(study - runs * alone) / runs`` (Ray's start and stop shared over the runs) and the same
without Ray's start and stop (the steady-state cost per run). Target: under 5 s per run.
Uses a private AGENT2RL_HOME (a temp dir) unless one is set.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

AGENTS = {
    "noop": '["{python}", "-c", "print(\'nothing to do\')"]',
}


def cli(*args: str) -> tuple[float, str]:
    start = time.time()
    done = subprocess.run(
        [sys.executable, "-m", "agent2rl.cli", *args], capture_output=True, text=True
    )
    took = time.time() - start
    if done.returncode != 0:
        raise SystemExit(f"agent2rl {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")
    return took, done.stdout


def ray_start_stop() -> float:
    """Wall time of starting and stopping a private local Ray as the study does."""
    code = (
        "import time, ray; t = time.time(); "
        "from agent2rl.study.executor import _start_ray; _start_ray(None); ray.shutdown(); "
        "print(time.time() - t)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=4)
    ap.add_argument("--budget", default="30s")
    ap.add_argument("--agent", default="noop", help="noop, or any --agent value")
    args = ap.parse_args()
    os.environ.setdefault("AGENT2RL_HOME", tempfile.mkdtemp(prefix="a2r-bench-home-"))
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    work = Path(tempfile.mkdtemp(prefix="a2r-study-bench-"))
    agent = args.agent
    if agent in AGENTS:
        spec = work / f"{agent}.toml"
        spec.write_text(
            f'name = "{agent}"\ndescription = "benchmark agent"\ncommand = {AGENTS[agent]}\n'
        )
        agent = str(spec)
    run_args = ["--task", "arith-lite", "--agent", agent, "--model", "tiny"]
    run_args += ["--budget", args.budget, "--sandbox", "none"]

    print(
        f"machine: {platform.node()} ({os.cpu_count()} cores), python {platform.python_version()}"
    )
    warm, _ = cli("run", *run_args, "--runs-dir", str(work / "warm"))
    print(f"warm-up run (model, task data, baseline): {warm:.1f} s")

    alone = [cli("run", *run_args, "--runs-dir", str(work / "alone"))[0] for _ in range(args.runs)]
    mean_alone = statistics.mean(alone)
    print(f"agent2rl run alone: {mean_alone:.1f} s per run (n={args.runs}, "
          f"min {min(alone):.1f}, max {max(alone):.1f})")  # fmt: skip

    study_file = work / "study.toml"
    study_file.write_text(
        f'name = "overhead"\ntasks = ["arith-lite"]\nagents = ["{agent}"]\n'
        f'repeats = {args.runs}\nbudget = "{args.budget}"\nsandbox = "none"\n'
    )
    took, _ = cli("study", "run", str(study_file), "--out", str(work / "study"),
                  "--max-concurrent", "1")  # fmt: skip
    ray = ray_start_stop()
    per_run = (took - args.runs * mean_alone) / args.runs
    print(f"agent2rl study run ({args.runs} runs, one at a time): {took:.1f} s")
    print(f"local Ray start + stop: {ray:.1f} s")
    print(f"study overhead per run: {per_run:+.1f} s (Ray's start and stop shared over "
          f"{args.runs} runs)")  # fmt: skip
    print(f"study overhead per run without Ray's start and stop: "
          f"{(took - ray - args.runs * mean_alone) / args.runs:+.1f} s (target < 5 s)")  # fmt: skip


if __name__ == "__main__":
    main()
