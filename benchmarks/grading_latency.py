"""Interactive grading latency: the step-synchronous episode solver against the chunked one
it replaced, side by side in one run, on the same submission and games.

    python benchmarks/grading_latency.py [--part solvers|cold-warm|all]
        [--tasks alfworld-lite webshop-lite deepsearch-lite] [--model tiny] [--repeats 1]
        [--old-rev becbe44] [--limit N] [--out docs/figures/data/grading_latency.json]
        [--submissions 2] [--cold-warm-out docs/figures/data/grading_cold_warm.json]
        [--backends auto | transformers vllm]

``--part solvers`` (the default with ``--out``):
For each task, the submission (the tiny model by default) grades the private split once per
variant per repeat, the order alternating between repeats so that drift in a shared
machine's load falls on every side:

- ``chunked``: grading as it was when issue #28 was filed: ``EpisodeSolver`` as of
  ``--old-rev`` (``git show REV:src/agent2rl/solvers/episode.py``, loaded from a temp dir):
  16 games at a time, each chunk played to its end before the next opens (``env_batch=16``,
  ``batch_size=64``), on the transformers backend with its dynamic key/value cache, and
  (alfworld-lite) TextWorld's grammar, logic strings and PDDL parsed at every call
  (:func:`as_filed`);
- ``step-sync-dynamic-cache``: the task's own solver (every game open at once up to
  ``max_open``, one batched ``generate`` call per step over the episodes still running) on
  that same dynamic-cache backend (its games as today's);
- ``step-sync-all-threads``: the task's solver on today's backend (on CPU a preallocated,
  static key/value cache), every decoding step on all of torch's threads (:func:`all_threads`);
- ``step-sync``: the same with the backend's decode thread policy (on CPU a step too small
  to split runs on one thread): today's grading by a cold grader;
- ``step-sync-kept-workers`` (tasks that play their games in worker processes): the same
  from a warm grader's task (``Task.keep_environments``), whose workers, started and filled
  by one untimed grading first, serve every repeat: a warm grader's grading after its first.

The first three decode on all threads, as grading did before that policy.

A grading is the solve plus the task's scorer (the same for all); the figures are medians
over repeats. The per-item traces (actions, won, reward, steps) of every variant are
compared with the chunked ones, and the new solver's split of its time (generation,
environments) is reported.
JSON goes to ``--out`` with the command, commit, date and machine.

``--part cold-warm`` (issue #28 item 4): submission-to-score latency through the real
grading service, one process per submission (``--grader cold``) against the warm grader (one
long-lived worker that keeps the task and the model loaded and reloads each submission's
weights), side by side on the same submissions, for every task of ``--tasks`` (default: the
lite tasks and humaneval). For each task and grader a fresh run directory (workspace,
baseline, running clock: :mod:`agent2rl.orchestration.scratch_run`) and service;
``--submissions`` distinct perturbed copies of ``--model`` (the tiny model by default;
``benchmarks/shaped_model.py`` makes a larger one offline) are submitted one after another,
the cold and warm runs of a task back to back. Per submission: the client's submit-to-score
wall time and the ledger's ``timings`` (queue, staging, process start, task setup, device
wait, load, generation, scoring). Overhead is everything but generation,
scoring and waits behind other evaluations
(:func:`agent2rl.grading.evaluator.grading_overhead_s`); medians are over the submissions
after the first (the first warm one also starts the worker, reported on its own), with the
load average beside each task. The two graders' per-item results are compared. JSON goes to
``--cold-warm-out``, rewritten after each task.

Uses a private AGENT2RL_HOME (a temp dir) unless one is set, so the task data is generated
there on a first run (alfworld-lite: several minutes).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib.util
import json
import os
import resource
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from spine import machine, write_figures  # the machine line and JSON header of every benchmark

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_TASKS = ("alfworld-lite", "webshop-lite", "deepsearch-lite")
#: --part cold-warm's tasks unless --tasks names others (issue #28 item 4)
COLD_WARM_TASKS = ("arith-lite", "alfworld-lite", "webshop-lite", "deepsearch-lite", "humaneval")
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
    live = getattr(solver.source, "pids", [])  # a kept pool's workers, running throughout
    cpu = cpu_seconds(live)
    started = time.perf_counter()
    outputs = solver.solve(backend, samples)
    solved = time.perf_counter()
    items = task.scorer(prepared).score(samples, outputs)
    done = time.perf_counter()
    cpu = cpu_seconds(live) - cpu
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


@contextlib.contextmanager
def as_filed(on: bool) -> Iterator[None]:
    """With ``on``: TextWorld's grammar and logic strings parsed and each game's PDDL
    translated at every call, as when issue #28 was filed
    (``agent2rl.tasks.alfworld.games.cache_textworld_parses`` undone in this process, where
    the chunked solver plays its games)."""
    try:
        import fast_downward
        import textworld.logic
        from textworld.envs.pddl import textgen
    except ImportError:
        on = False
    names: list[tuple[Any, str]] = []  # (module, the name of its cached function)
    if on:
        names = [
            (textgen, "_parse_and_convert"),
            (textworld.logic, "_parse_and_convert"),
            (fast_downward, "pddl2sas"),
        ]
    undo = [(m, a, getattr(m, a)) for m, a in names if hasattr(getattr(m, a), "uncached")]
    for m, a, c in undo:
        setattr(m, a, c.uncached)
    try:
        yield
    finally:
        for m, a, c in undo:
            setattr(m, a, c)


@contextlib.contextmanager
def all_threads(on: bool) -> Iterator[None]:
    """With ``on``: the transformers backend decodes on all of torch's threads, as before its
    decode thread policy (``DECODE_SPLIT_MIN_FLOPS`` 0: no step is too small to split)."""
    from agent2rl.inference import transformers_backend

    before = transformers_backend.DECODE_SPLIT_MIN_FLOPS
    if on:
        transformers_backend.DECODE_SPLIT_MIN_FLOPS = 0
    try:
        yield
    finally:
        transformers_backend.DECODE_SPLIT_MIN_FLOPS = before


def cpu_seconds(live: Sequence[int] = ()) -> float:
    """CPU time of this process, its finished children (a cold grading's environment
    workers) and the running processes ``live`` (a kept pool's workers): on a shared machine
    it moves far less with other load than wall time does."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    total = own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime
    for pid in live:
        with contextlib.suppress(OSError):  # /proc/PID/stat: utime and stime, in clock ticks
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def build_run(
    root: Path, task_name: str, n: int, model_spec: str, backend: str = "auto"
) -> tuple[Any, Any, list[str]]:
    """A run directory as the orchestrator makes one
    (:func:`agent2rl.orchestration.scratch_run.make_run`) on the base model ``model_spec``
    (``tiny`` or a local directory), with ``n`` perturbed copies of it in its workspace's
    output/ (the same ``n`` for every run: seeded), graded with ``backend`` (float32, as the
    lite track grades on a CPU)."""
    from agent2rl.inference.backend import BackendConfig
    from agent2rl.models import resolve_model
    from agent2rl.orchestration.scratch_run import make_run, perturbed_copy
    from agent2rl.rundir import RunInfo
    from agent2rl.settings import load_settings
    from agent2rl.tasks import get_task, prepare_task

    settings = load_settings()
    model = resolve_model(model_spec, settings.model_store)
    task = get_task(task_name)
    prepared = prepare_task(task, settings.task_store)
    paths = make_run(root, task, prepared, model, budget_s=3600.0, agent="benchmark")
    if backend != "auto":
        info = RunInfo.load(paths)
        info.backend = BackendConfig(kind=backend, dtype="float32").to_dict()
        info.save(paths)
    rels = []
    for i in range(n):
        perturbed_copy(model.path, paths.output / f"s{i}", seed=100 + i)
        rels.append(f"output/s{i}")
    return paths, model, rels


def grade_all(
    task_name: str,
    grader: str,
    n: int,
    work: Path,
    model_spec: str = "tiny",
    backend: str = "auto",
) -> dict[str, Any]:
    import httpx

    from agent2rl.grading.evaluator import grading_overhead_s
    from agent2rl.grading.ledger import Ledger
    from agent2rl.grading.service import start_service

    root = work / f"{task_name}-{backend}-{grader}"
    paths, model, rels = build_run(root, task_name, n, model_spec, backend)
    weights = (model.path / "model.safetensors").stat().st_size
    token = secrets.token_urlsafe(16)
    handle = start_service(
        paths,
        token,
        eval_timeout_s=600,
        max_bytes=2 * weights + 64 * 2**20,  # a submission may be the base model's size
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
                assert answer.get("status") == "graded", answer
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
    ap.add_argument("--part", choices=("solvers", "cold-warm", "all"), default="solvers")
    ap.add_argument("--submissions", type=int, default=2, help="cold-warm: per task and grader")
    ap.add_argument(
        "--cold-warm-out", type=Path, default=Path("docs/figures/data/grading_cold_warm.json")
    )
    ap.add_argument(
        "--backends",
        nargs="+",
        default=["auto"],
        choices=("auto", "transformers", "vllm"),
        help="cold-warm: grade with each in turn (vllm: run this with .venv-vllm's python)",
    )
    args = ap.parse_args()
    if args.part != "solvers" and args.submissions < 2:
        ap.error("--submissions must be at least 2 (the first warm one starts the worker)")
    if args.model != "tiny" and not (Path(args.model) / "config.json").is_file():
        ap.error(f"--model {args.model}: no config.json there; give tiny or a model directory")
    command = " ".join(["python", *sys.argv])

    if "AGENT2RL_HOME" not in os.environ:
        os.environ["AGENT2RL_HOME"] = tempfile.mkdtemp(prefix="grading-latency-home-")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    # as the grader's evaluation child has it (grading/evaluator.py): torch's default spinning
    # OpenMP threads slow a loaded small machine by an order of magnitude
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    if args.part in ("cold-warm", "all"):
        tasks = args.tasks if "--tasks" in sys.argv else list(COLD_WARM_TASKS)
        cold_warm(tasks, args.submissions, args.cold_warm_out, args.model, args.backends)
    if args.part == "cold-warm":
        return 0
    return solvers(args, command)


def solvers(args: argparse.Namespace, command: str) -> int:
    """The chunked against the step-synchronous episode solver (the module docstring)."""
    import torch

    from agent2rl.inference import load_backend
    from agent2rl.inference.transformers_backend import TransformersBackend
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
        backend = load_backend(model_dir, "transformers")
        # the backend as it was when issue #28 was filed: a dynamic key/value cache
        dynamic = TransformersBackend(model_dir, kv_cache="dynamic")
        order = [
            ("chunked", old, dynamic),
            ("step-sync-dynamic-cache", new, dynamic),
            ("step-sync-all-threads", new, backend),
            ("step-sync", new, backend),
        ]
        if args.in_process and type(new.source) is not type(plain):
            # the task plays its games in worker processes: also without them
            order.append(("step-sync-in-process", dataclasses.replace(new, source=plain), backend))
        # a warm grader's task keeps its game workers between evaluations: played once
        # (untimed) first, as the warm grader has for every submission after its first
        warm_task = get_task(name, {})
        warm_task.keep_environments = True
        kept = warm_task.solver(prepared, "private")
        if getattr(kept.source, "persistent", False):
            order.append(("step-sync-kept-workers", kept, backend))
        runs: dict[str, list[dict[str, Any]]] = {label: [] for label, _, _ in order}
        try:
            if "step-sync-kept-workers" in runs:
                kept.solve(backend, samples)
            for r in range(args.repeats):
                for label, solver, b in order if r % 2 == 0 else order[::-1]:
                    with (
                        as_filed(label == "chunked"),
                        all_threads(label not in ("step-sync", "step-sync-kept-workers")),
                    ):
                        runs[label].append(grade(task, prepared, b, solver, samples))
                    g = runs[label][-1]
                    print(
                        f"  repeat {r + 1} {label:>9}: {g['seconds']:.1f}s "
                        f"(solve {g['solve_s']:.1f}s, score {g['score_s']:.1f}s; "
                        f"cpu {g['cpu_s']:.1f}s), load {os.getloadavg()[0]:.1f}, "
                        f"score {g['score']:.3f}",
                        flush=True,
                    )
        finally:
            warm_task.close()
            backend.close()
            dynamic.close()
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
            "step_sync_dynamic_cache_s": round(
                statistics.median(g["seconds"] for g in runs["step-sync-dynamic-cache"]), 2
            ),
            "step_sync_all_threads_s": round(
                statistics.median(g["seconds"] for g in runs["step-sync-all-threads"]), 2
            ),
            "step_sync_s": round(t_new, 2),
            "step_sync_kept_workers_s": (
                round(statistics.median(g["seconds"] for g in runs["step-sync-kept-workers"]), 2)
                if "step-sync-kept-workers" in runs
                else None
            ),
            "speedup": round(t_old / t_new, 2),
            "speedup_cpu": round(
                statistics.median(g["cpu_s"] for g in runs["chunked"])
                / statistics.median(g["cpu_s"] for g in runs["step-sync"]),
                2,
            ),
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
        "cold_vs_warm": "see --part cold-warm (grading_cold_warm.json)",
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(data, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


TIMING_KEYS = (
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


def grader_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """One grader's figures for a task: its first submission's on their own, medians over
    the later ones (the first warm one also starts the worker), and those samples."""
    later = rows[1:]
    t = [r["timings"] for r in later]
    return {
        "first": {k: rows[0][k] for k in ("wall_s", "overhead_s", "timings")},
        "wall_s": [r["wall_s"] for r in later],
        "median_wall_s": med([r["wall_s"] for r in later]),
        "median_overhead_s": med([r["overhead_s"] for r in later]),
        "median": {
            k: med([float(x[k]) for x in t if isinstance(x.get(k), int | float)])
            for k in TIMING_KEYS
        },
        "loads": [r["timings"].get("load") for r in rows],
        "scores": [r["score"] for r in rows],
    }


def cold_warm(
    tasks: list[str],
    submissions: int,
    out_path: Path,
    model_spec: str = "tiny",
    backends: Sequence[str] = ("auto",),
) -> None:
    """``--part cold-warm`` (the module docstring): cold then warm per task, for each of
    ``backends`` in turn. The JSON is rewritten after each grader of each task, and with the
    task's ``error`` when one fails or the run is interrupted, so that a run stopped part-way
    keeps what it measured. With two backends each task also gets their warm graders
    compared (``warm_wall_ratio``: the first backend's median over the second's, and whether
    their per-item results are identical)."""
    work = Path(tempfile.mkdtemp(prefix="grading-cold-warm-"))
    print(machine(), flush=True)
    results: dict[str, Any] = {}

    def write() -> None:
        data = {
            "model": model_spec,
            "submissions": submissions,
            "backends": list(backends),
            "summary": cold_warm_summary(results),
            "results": results,
        }
        write_figures(out_path, data)

    try:
        for task in tasks:
            warm_rows: dict[str, list[dict[str, Any]]] = {}
            for backend in backends:
                key = task if list(backends) == ["auto"] else f"{task}/{backend}"
                warm = cold_warm_task(
                    task, backend, submissions, work, model_spec, write, results, key
                )
                if warm is not None:
                    warm_rows[backend] = warm
            if len(warm_rows) == 2:
                (a, ra), (b, rb) = warm_rows.items()
                wa = med([r["wall_s"] for r in ra[1:]])
                wb = med([r["wall_s"] for r in rb[1:]])
                pairs = list(zip(ra, rb, strict=True))
                results[f"{task}/warm {a} over {b}"] = {
                    "warm_wall_ratio": wa / wb if wa and wb else None,
                    "identical_items": [x["items"] == y["items"] for x, y in pairs],
                    "same_scores": [x["score"] == y["score"] for x, y in pairs],
                }
                write()
                print(f"{task}: warm {a} {wa:.2f}s against warm {b} {wb:.2f}s", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def cold_warm_summary(results: dict[str, Any]) -> list[dict[str, Any]]:
    """One flat record per task (and backend) that finished: the medians of submit-to-score
    and overhead over the submissions after the first (their samples beside them), the
    ratios and whether the graders' per-item results were identical; for the docs' tables."""
    out = []
    for key, r in results.items():
        if "cold" not in r or "warm" not in r:
            continue
        out.append(
            {
                "task": key,
                "cold_wall_s": r["cold"]["median_wall_s"],
                "warm_wall_s": r["warm"]["median_wall_s"],
                "cold_overhead_s": r["cold"]["median_overhead_s"],
                "warm_overhead_s": r["warm"]["median_overhead_s"],
                "wall_ratio": r.get("wall_ratio_cold_over_warm"),
                "overhead_ratio": r.get("overhead_ratio_cold_over_warm"),
                "warm_first_wall_s": r["warm"]["first"]["wall_s"],
                "samples": len(r["warm"]["scores"]) - 1,
                "identical_items": r.get("identical_items"),
            }
        )
    return out


def cold_warm_task(
    task: str,
    backend: str,
    submissions: int,
    work: Path,
    model_spec: str,
    write: Any,
    results: dict[str, Any],
    key: str,
) -> list[dict[str, Any]] | None:
    """One task's cold and warm graders on ``backend`` into ``results[key]``; returns the
    warm grader's rows (None when it failed)."""
    load_before = os.getloadavg()
    out: dict[str, Any] = {"load_average_before": load_before, "backend": backend}
    results[key] = out
    rows: dict[str, list[dict[str, Any]]] = {}
    try:
        for grader in ("cold", "warm"):
            graded = grade_all(task, grader, submissions, work, model_spec, backend)
            rows[grader] = graded["rows"]
            out[grader] = grader_summary(rows[grader])
            write()
    except (Exception, KeyboardInterrupt) as err:  # one task's failure ends its row
        out["error"] = f"{type(err).__name__}: {err}"[:500]
        write()
        print(f"{key}: failed: {out['error']}", flush=True)
        if isinstance(err, KeyboardInterrupt):
            raise
        return None
    same = [c["items"] == w["items"] for c, w in zip(rows["cold"], rows["warm"], strict=True)]
    out["identical_items"] = all(same)
    out["load_average_after"] = os.getloadavg()
    c, w = out["cold"]["median_overhead_s"], out["warm"]["median_overhead_s"]
    out["overhead_ratio_cold_over_warm"] = c / w if c and w else None
    cw, ww = out["cold"]["median_wall_s"], out["warm"]["median_wall_s"]
    out["wall_ratio_cold_over_warm"] = cw / ww if cw and ww else None
    write()
    print(
        f"{key}: overhead cold {c:.2f}s, warm {w:.2f}s (x{c / w:.1f}); submit-to-score "
        f"cold {cw:.2f}s, warm {ww:.2f}s; identical per-item results: {all(same)}; "
        f"load {load_before[0]:.1f} -> {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    return rows["warm"]


if __name__ == "__main__":
    sys.exit(main())
