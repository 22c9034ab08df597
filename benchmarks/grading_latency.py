"""Interactive grading latency: the step-synchronous episode solver against the chunked one
it replaced, side by side in one run, on the same submission and games.

    python benchmarks/grading_latency.py [--tasks alfworld-lite webshop-lite deepsearch-lite]
        [--model tiny] [--repeats 1] [--old-rev becbe44] [--limit N]
        [--out docs/figures/data/grading_latency.json]

For each task, one backend (the submission, the tiny model by default) grades the private
split twice per repeat, the order alternating between repeats so that drift in a shared
machine's load falls on both sides:

- ``chunked``: ``EpisodeSolver`` as of ``--old-rev`` (``git show REV:src/agent2rl/solvers/
  episode.py``, loaded from a temp dir): 16 games at a time, each chunk played to its end
  before the next opens (``env_batch=16``, ``batch_size=64``);
- ``step-sync``: the task's own solver now (every game open at once up to ``env_batch``,
  one batched ``generate`` call per step over the episodes still running).

A grading is the solve plus the task's scorer (the same for both); the figures are medians
over repeats. The per-item traces (actions, won, reward, steps) of the two solvers are
compared, and the new solver's split of its time (generation, environments) is reported.
JSON goes to ``--out`` with the command, commit, date and machine.

Cold vs warm (issue #28 item 4, submission to score through a grader that already holds
the task and the base model loaded): :func:`warm_latency` is the hook the warm grader fills;
until it exists the JSON's ``cold_vs_warm`` says so.

Uses a private AGENT2RL_HOME (a temp dir) unless one is set, so the task data is generated
there on a first run (alfworld-lite: several minutes).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from spine import machine  # the machine line every benchmark prints

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_TASKS = ("alfworld-lite", "webshop-lite", "deepsearch-lite")
#: the last commit with the chunked solver (16 games per chunk)
OLD_REV = "becbe44"


def git(*args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout.strip()


def load_chunked_solver(rev: str, work: Path) -> Any:
    """``EpisodeSolver`` as it was at ``rev`` (a module of its own, importing today's
    agent2rl for everything else)."""
    path = work / "episode_chunked.py"
    path.write_text(git("show", f"{rev}:src/agent2rl/solvers/episode.py"))
    spec = importlib.util.spec_from_file_location("episode_chunked", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module.EpisodeSolver


def trace_key(output: Any) -> tuple:
    t = output.trace
    return (tuple(t["actions"]), t["won"], round(float(t["reward"]), 9), t["steps"])


def grade(task: Any, prepared: Any, backend: Any, solver: Any, samples: list) -> dict[str, Any]:
    """One grading (solve + score) of ``samples`` with ``solver``: its times and outputs."""
    cpu = cpu_seconds()
    started = time.perf_counter()
    outputs = solver.solve(backend, samples)
    solved = time.perf_counter()
    items = task.scorer(prepared).score(samples, outputs)
    done = time.perf_counter()
    cpu = cpu_seconds() - cpu
    score = sum(i.score for i in items) / len(items)
    timings = getattr(solver, "timings", None)
    return {
        "seconds": done - started,
        "solve_s": solved - started,
        "score_s": done - solved,
        "cpu_s": cpu,
        "score": score,
        "outputs": outputs,
        "timings": timings.to_dict() if timings is not None else None,
    }


def cpu_seconds() -> float:
    """CPU time of this process and its finished children (the environment workers): on a
    shared machine it moves far less with other load than wall time does."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def warm_latency(task_name: str, model_dir: Path) -> dict[str, Any] | None:
    """Submission-to-score latency, cold (a fresh grading process: load the task, the model,
    grade) vs warm (a grader holding both), for ``task_name`` (arith-lite, alfworld-lite,
    webshop-lite, deepsearch-lite, humaneval in issue #28 item 4). The hook for the warm
    grader: None until it exists."""
    return None


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter
    )
    ap.add_argument("--tasks", nargs="+", default=list(DEFAULT_TASKS))
    ap.add_argument("--model", default="tiny", help="tiny, or a local model directory")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--old-rev", default=OLD_REV, help="the commit whose chunked solver to run")
    ap.add_argument(
        "--in-process",
        action="store_true",
        help="also run the new solver with a pooled task's games in this process",
    )
    ap.add_argument("--limit", type=int, default=None, help="grade the first N games only")
    ap.add_argument("--out", type=Path, default=Path("docs/figures/data/grading_latency.json"))
    args = ap.parse_args()
    command = " ".join(["python", *sys.argv])

    if "AGENT2RL_HOME" not in os.environ:
        os.environ["AGENT2RL_HOME"] = tempfile.mkdtemp(prefix="grading-latency-home-")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    # as the grader's evaluation child has it (grading/evaluator.py): torch's default spinning
    # OpenMP threads slow a loaded small machine by an order of magnitude
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    import torch

    from agent2rl.inference import load_backend
    from agent2rl.models import resolve_model
    from agent2rl.settings import load_settings
    from agent2rl.tasks import get_task, prepare_task

    settings = load_settings()
    model_dir = (
        resolve_model("tiny", settings.model_store).path
        if args.model == "tiny"
        else Path(args.model).resolve()
    )
    print(machine(), f"torch {torch.__version__}, {torch.get_num_threads()} threads", flush=True)
    work = Path(tempfile.mkdtemp(prefix="grading-latency-"))
    Chunked = load_chunked_solver(args.old_rev, work)
    results: dict[str, Any] = {}
    for name in args.tasks:
        task = get_task(name, {})
        started = time.time()
        prepared = prepare_task(task, settings.task_store)
        print(f"{name}: data ready in {time.time() - started:.1f}s", flush=True)
        samples = task.samples(prepared, "private", args.limit)
        new = task.solver(prepared, "private")
        plain = task.environment(prepared, "private")  # games in this process
        old = Chunked(plain, new.protocol, env_batch=16, batch_size=new.batch_size)
        order = [("chunked", old), ("step-sync", new)]
        if args.in_process and type(new.source) is not type(plain):
            # the task plays its games in worker processes: also without them
            order.append(("step-sync-in-process", dataclasses.replace(new, source=plain)))
        backend = load_backend(model_dir, "transformers")
        runs: dict[str, list[dict[str, Any]]] = {label: [] for label, _ in order}
        try:
            for r in range(args.repeats):
                for label, solver in order if r % 2 == 0 else order[::-1]:
                    runs[label].append(grade(task, prepared, backend, solver, samples))
                    g = runs[label][-1]
                    print(
                        f"  repeat {r + 1} {label:>9}: {g['seconds']:.1f}s "
                        f"(solve {g['solve_s']:.1f}s, score {g['score_s']:.1f}s; "
                        f"cpu {g['cpu_s']:.1f}s), load {os.getloadavg()[0]:.1f}, "
                        f"score {g['score']:.3f}",
                        flush=True,
                    )
        finally:
            backend.close()
        old_keys = [trace_key(o) for o in runs["chunked"][0]["outputs"]]
        differ = []  # "variant:game" whose trace is not the chunked solver's
        for label in runs:
            keys = [trace_key(o) for o in runs[label][0]["outputs"]]
            pairs = zip(samples, old_keys, keys, strict=True)
            differ += [f"{label}:{s.id}" for s, a, b in pairs if a != b]
        t_old = statistics.median(g["seconds"] for g in runs["chunked"])
        t_new = statistics.median(g["seconds"] for g in runs["step-sync"])
        timings = runs["step-sync"][-1]["timings"]
        results[name] = {
            "games": len(samples),
            "max_steps": new.protocol.max_steps,
            "max_new_tokens": new.protocol.max_new_tokens,
            "chunked_s": round(t_old, 2),
            "step_sync_s": round(t_new, 2),
            "speedup": round(t_old / t_new, 2),
            "chunked_runs_s": [round(g["seconds"], 2) for g in runs["chunked"]],
            "step_sync_runs_s": [round(g["seconds"], 2) for g in runs["step-sync"]],
            "score_s": round(statistics.median(g["score_s"] for g in runs["step-sync"]), 2),
            "step_sync_timings": {
                k: round(v, 2) if isinstance(v, float) else v for k, v in timings.items()
            },
            "variants_s": {
                k: round(statistics.median(g["seconds"] for g in v), 2) for k, v in runs.items()
            },
            "variants_cpu_s": {
                k: round(statistics.median(g["cpu_s"] for g in v), 2) for k, v in runs.items()
            },
            "env_workers": getattr(new.source, "parallelism", 1),
            "scores": {k: v[0]["score"] for k, v in runs.items()},
            "items_identical": not differ,
            "items_differing": differ,
        }
        if len(runs) > 2:
            print(f"  medians: {results[name]['variants_s']}")
        print(
            f"{name}: {len(samples)} games, chunked {t_old:.1f}s, step-sync {t_new:.1f}s, "
            f"{t_old / t_new:.2f}x; generation {timings['generate_s']:.1f}s in "
            f"{timings['generate_calls']} calls (mean batch "
            f"{timings['prompts'] / max(1, timings['generate_calls']):.1f}), environments "
            f"{timings['env_s']:.1f}s; per-item traces identical: {not differ}",
            flush=True,
        )
    cold_warm = {t: warm_latency(t, model_dir) for t in args.tasks}
    data = {
        "benchmark": "grading_latency",
        "command": command,
        "commit": git("rev-parse", "HEAD"),
        "worktree_dirty": bool(git("status", "--porcelain", "--untracked-files=no")),
        "old_solver_rev": git("rev-parse", args.old_rev),
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": machine(),
        "torch_threads": torch.get_num_threads(),
        "load_average": os.getloadavg(),
        "model": args.model,
        "repeats": args.repeats,
        "tasks": results,
        "cold_vs_warm": (
            cold_warm
            if any(v is not None for v in cold_warm.values())
            else "not measured: needs the warm grader (issue #28 item 4); see warm_latency()"
        ),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(data, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
