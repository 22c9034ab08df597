"""Interactive grading latency: the step-synchronous episode solver against the chunked one
it replaced, side by side in one run, on the same submission and games.

    python benchmarks/grading_latency.py --part solvers
    python benchmarks/grading_latency.py --part cold-warm

write ``docs/figures/data/grading_latency.json`` and ``grading_cold_warm.json``, the figures
as published (``--part all``: both, one after the other); with ``.venv-vllm``'s Python,
``python benchmarks/grading_latency.py --part cold-warm --tasks arith-lite alfworld-lite
--backends transformers vllm --cold-warm-out docs/figures/data/grading_cold_warm_vllm_cpu.json``
writes the vLLM file. Options: ``[--part solvers|cold-warm|all] [--tasks ...] [--model tiny]
[--repeats 3] [--old-rev becbe44] [--limit N] [--out PATH] [--submissions 4]
[--cold-warm-out PATH] [--backends auto | transformers vllm] [--allow-dirty] [--quick]``.
Both parts grade the tasks' private (graded) split: split ``graded``. Each file is written
through ``benchmarks/provenance.py`` (command, commit, date, machine, load, repeats, split).

``--quick``: solvers on deepsearch-lite's first 2 games, one repeat; cold-warm on arith-lite,
2 submissions per grader (one counted sample). ``--tasks`` is overridden; the file is marked
quick and is no figure (about a minute per part on 2 cores; with vLLM, a few).

``--part solvers`` (the default), tasks alfworld-lite webshop-lite deepsearch-lite, 3
repeats:
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

A grading is the solve plus the task's scorer (the same for all); every variant's seconds
and CPU seconds are summaries over the repeats (median and range from 3, the samples below),
and the speed-up is the per-repeat ratio of the chunked solver's time over today's
(``provenance.ratio``). The per-item traces (actions, won, reward, steps) of every variant
are compared with the chunked ones, and the new solver's split of its time (generation,
environments, last repeat) is reported. ``summary`` is one record per task for the tables.

``--part cold-warm`` (issue #28 item 4): submission-to-score latency through the real
grading service, one process per submission (``--grader cold``) against the warm grader (one
long-lived worker that keeps the task and the model loaded and reloads each submission's
weights), side by side on the same submissions, for every task of ``--tasks`` (default:
arith-lite alfworld-lite deepsearch-lite), ``--submissions`` 4. For each task and grader a
fresh run directory (workspace, baseline, running clock:
:mod:`agent2rl.orchestration.scratch_run`) and service, both services up together;
``--submissions`` distinct perturbed copies of ``--model`` (the tiny model by default;
``benchmarks/shaped_model.py`` makes a larger one offline) are submitted one after another,
each to both graders in turn (the order alternating), so that drift falls on both. Per
submission: the client's submit-to-score wall time and the ledger's ``timings`` (queue,
staging, process start, task setup, device wait, load, generation, scoring). Overhead is
everything but generation, scoring and waits behind other evaluations
(:func:`agent2rl.grading.evaluator.grading_overhead_s`). The first submission is not
counted (the first warm one also starts the worker: reported on its own), so the defaults
give 3 samples: summaries (median and range from 3) over the later submissions, and the
cold/warm ratios per submission, with the load average beside each task. The two graders'
per-item results are compared. ``summary`` is one record per task (and backend) for the
tables. JSON goes to ``--cold-warm-out``, rewritten after each task (a run stopped part-way
keeps what it measured).

Uses a private AGENT2RL_HOME (a temp dir) unless one is set, so the task data is generated
there on a first run (alfworld-lite: several minutes).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib.util
import os
import resource
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import provenance

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_TASKS = ("alfworld-lite", "webshop-lite", "deepsearch-lite")
#: --part cold-warm's tasks unless --tasks names others (issue #28 item 4)
COLD_WARM_TASKS = ("arith-lite", "alfworld-lite", "deepsearch-lite")
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


def grade_pair(
    task_name: str,
    n: int,
    work: Path,
    model_spec: str = "tiny",
    backend: str = "auto",
) -> dict[str, list[dict[str, Any]]]:
    """The cold and the warm grader, each in its own run directory and service, both up
    together: each of the ``n`` submissions goes to both in turn (the order alternating),
    one at a time. Returns each grader's rows (wall time, score, timings, overhead, items)."""
    import httpx

    from agent2rl.grading.evaluator import grading_overhead_s
    from agent2rl.grading.ledger import Ledger
    from agent2rl.grading.service import start_service

    graders = ("cold", "warm")
    runs = {
        g: build_run(work / f"{task_name}-{backend}-{g}", task_name, n, model_spec, backend)
        for g in graders
    }
    rows: dict[str, list[dict[str, Any]]] = {g: [] for g in graders}
    with contextlib.ExitStack() as stack:
        clients = {}
        for g, (paths, model, _) in runs.items():
            weights = (model.path / "model.safetensors").stat().st_size
            token = secrets.token_urlsafe(16)
            handle = start_service(
                paths,
                token,
                eval_timeout_s=600,
                max_bytes=2 * weights + 64 * 2**20,  # a submission may be the base model's size
                base_model_dir=model.path,
                options={"grader": g},
            )
            stack.callback(handle.stop)
            clients[g] = stack.enter_context(
                httpx.Client(
                    base_url=handle.url, headers={"Authorization": f"Bearer {token}"}, timeout=600
                )
            )
        for i in range(n):
            for g in graders if i % 2 == 0 else graders[::-1]:
                rel = runs[g][2][i]
                t0 = time.perf_counter()
                answer = clients[g].post("/submit", json={"model_path": rel}).json()
                wall = time.perf_counter() - t0
                assert answer.get("status") == "graded", answer
                rows[g].append({"id": answer["submission_id"], "wall_s": wall})
    for g, (paths, _, _) in runs.items():
        with Ledger(paths.ledger) as ledger:
            subs = {s.id: s for s in ledger.submissions()}
        for row in rows[g]:
            s = subs[row["id"]]
            row.update(
                score=s.score,
                timings=s.timings,
                overhead_s=grading_overhead_s(s.timings),
                items=(paths.root / s.items_path).read_text(),
            )
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter
    )
    ap.add_argument(
        "--tasks",
        nargs="+",
        default=None,
        help=f"default: {' '.join(DEFAULT_TASKS)} (solvers), {' '.join(COLD_WARM_TASKS)} "
        "(cold-warm)",
    )
    ap.add_argument("--model", default="tiny", help="tiny, or a local model directory")
    ap.add_argument("--repeats", type=int, default=3, help="solvers: gradings per variant")
    ap.add_argument("--old-rev", default=OLD_REV, help="the commit whose chunked solver to run")
    ap.add_argument(
        "--in-process",
        action="store_true",
        help="also run the new solver with a pooled task's games in this process",
    )
    ap.add_argument("--limit", type=int, default=None, help="grade the first N games only")
    ap.add_argument("--part", choices=("solvers", "cold-warm", "all"), default="solvers")
    ap.add_argument(
        "--submissions",
        type=int,
        default=4,
        help="cold-warm: per task and grader (the first is not counted)",
    )
    ap.add_argument(
        "--cold-warm-out", type=Path, default=provenance.DATA / "grading_cold_warm.json"
    )
    ap.add_argument(
        "--backends",
        nargs="+",
        default=["auto"],
        choices=("auto", "transformers", "vllm"),
        help="cold-warm: grade with each in turn (vllm: run this with .venv-vllm's python)",
    )
    provenance.add_arguments(ap, "grading_latency")
    args = ap.parse_args()
    if args.quick:
        args.repeats, args.limit, args.submissions = 1, 2, 2
    if args.part != "solvers" and args.submissions < 2:
        ap.error("--submissions must be at least 2 (the first warm one starts the worker)")
    if args.model != "tiny" and not (Path(args.model) / "config.json").is_file():
        ap.error(f"--model {args.model}: no config.json there; give tiny or a model directory")
    # one recorder per file, both before anything is measured (each refuses a dirty checkout)
    recorders = {}
    if args.part in ("solvers", "all"):
        recorders["solvers"] = provenance.Recorder(args)
    if args.part in ("cold-warm", "all"):
        cw = argparse.Namespace(**{**vars(args), "out": args.cold_warm_out})
        recorders["cold-warm"] = provenance.Recorder(cw)

    if "AGENT2RL_HOME" not in os.environ:
        os.environ["AGENT2RL_HOME"] = tempfile.mkdtemp(prefix="grading-latency-home-")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    # as the grader's evaluation child has it (grading/evaluator.py): torch's default spinning
    # OpenMP threads slow a loaded small machine by an order of magnitude
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    if args.part in ("cold-warm", "all"):
        tasks = ["arith-lite"] if args.quick else args.tasks or list(COLD_WARM_TASKS)
        cold_warm(
            tasks,
            args.submissions,
            recorders["cold-warm"],
            args.model,
            args.backends,
        )
    if args.part == "cold-warm":
        return 0
    if args.quick:
        args.tasks = ["deepsearch-lite"]
    return solvers(args, recorders["solvers"])


def solvers(args: argparse.Namespace, rec: provenance.Recorder) -> int:
    """The chunked against the step-synchronous episode solver (the module docstring)."""

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
    print(provenance.machine(), flush=True)
    work = Path(tempfile.mkdtemp(prefix="grading-latency-"))
    Chunked = load_chunked_solver(args.old_rev, work)
    results: dict[str, Any] = {}
    for name in args.tasks or DEFAULT_TASKS:
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
        loads: list[float] = []
        try:
            if "step-sync-kept-workers" in runs:
                kept.solve(backend, samples)
            for r in range(args.repeats):
                loads.append(round(os.getloadavg()[0], 2))
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
        timings = runs["step-sync"][-1]["timings"]
        secs = {k: [g["seconds"] for g in v] for k, v in runs.items()}
        cpu = {k: [g["cpu_s"] for g in v] for k, v in runs.items()}
        results[name] = {
            "games": len(samples),
            "max_steps": new.protocol.max_steps,
            "max_new_tokens": new.protocol.max_new_tokens,
            "env_workers": getattr(new.source, "parallelism", 1),
            "load_average_per_repeat": loads,
            "variants_s": {k: provenance.summarize(v, 2) for k, v in secs.items()},
            "variants_cpu_s": {k: provenance.summarize(v, 2) for k, v in cpu.items()},
            "score_s": provenance.summarize([g["score_s"] for g in runs["step-sync"]], 2),
            # per repeat: the chunked solver's time over today's, both in the same repeat
            "speedup": provenance.ratio(secs["chunked"], secs["step-sync"]),
            "speedup_cpu": provenance.ratio(cpu["chunked"], cpu["step-sync"]),
            "step_sync_timings_last_repeat": {
                k: round(v, 2) if isinstance(v, float) else v for k, v in timings.items()
            },
            "scores": {k: v[0]["score"] for k, v in runs.items()},
            "items_identical": not differ,
            "items_differing": differ,
        }
        v = results[name]["variants_s"]
        print(f"  seconds: {v}", flush=True)
        print(
            f"{name}: {len(samples)} games, speed-up chunked over step-sync "
            f"{results[name]['speedup']}; generation {timings['generate_s']:.1f}s in "
            f"{timings['generate_calls']} calls (mean batch "
            f"{timings['prompts'] / max(1, timings['generate_calls']):.1f}), environments "
            f"{timings['env_s']:.1f}s; per-item traces identical: {not differ}",
            flush=True,
        )
    summary = [
        {
            "task": name,
            "games": r["games"],
            **{
                f"{label.replace('-', '_')}_s": r["variants_s"].get(label)
                for label in (
                    "chunked",
                    "step-sync-dynamic-cache",
                    "step-sync-all-threads",
                    "step-sync",
                    "step-sync-kept-workers",
                )
            },
            "speedup": r["speedup"],
            "items_identical": r["items_identical"],
        }
        for name, r in results.items()
    ]
    rec.write(
        {
            "model": args.model,
            "old_solver_rev": git("rev-parse", args.old_rev),
            "limit": args.limit,
            "summary": summary,
            "tasks": results,
            "cold_vs_warm": "see --part cold-warm (grading_cold_warm.json)",
        },
        repeats=args.repeats,
        split="graded",
    )
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
    """One grader's figures for a task: its first submission's on their own, summaries over
    the later ones (the first warm one also starts the worker)."""
    later = rows[1:]
    t = [r["timings"] or {} for r in later]
    return {
        "first": {k: rows[0][k] for k in ("wall_s", "overhead_s", "timings")},
        "wall_s": provenance.summarize([r["wall_s"] for r in later]),
        "overhead_s": provenance.summarize(
            [r["overhead_s"] for r in later if r["overhead_s"] is not None]
        ),
        "timings": {
            k: provenance.summarize([float(x[k]) for x in t if isinstance(x.get(k), int | float)])
            for k in TIMING_KEYS
        },
        "loads": [(r["timings"] or {}).get("load") for r in rows],
        "scores": [r["score"] for r in rows],
    }


def paired(a: list[dict[str, Any]], b: list[dict[str, Any]], key: str) -> dict[str, Any] | None:
    """Per submission after the first: ``a``'s ``key`` over ``b``'s (a ratio summary), over
    the submissions where both have it; None when none has."""
    pairs = [
        (x[key], y[key])
        for x, y in zip(a[1:], b[1:], strict=True)
        if x[key] is not None and y[key] and y[key] > 0
    ]
    if not pairs:
        return None
    return provenance.ratio([x for x, _ in pairs], [y for _, y in pairs])


def cold_warm(
    tasks: list[str],
    submissions: int,
    rec: provenance.Recorder,
    model_spec: str = "tiny",
    backends: Sequence[str] = ("auto",),
) -> None:
    """``--part cold-warm`` (the module docstring): cold and warm per task, for each of
    ``backends`` in turn. The file is rewritten after each task, and with the task's
    ``error`` when one fails or the run is interrupted, so that a run stopped part-way keeps
    what it measured. With two backends each task also gets their warm graders compared
    (``warm_backends_compared``: the first backend's submit-to-score over the second's, per
    submission, and whether their per-item results are identical)."""
    work = Path(tempfile.mkdtemp(prefix="grading-cold-warm-"))
    print(provenance.machine(), flush=True)
    results: dict[str, Any] = {}
    compared: list[dict[str, Any]] = []

    def write() -> None:
        data = {
            "model": model_spec,
            "submissions": submissions,
            "backends": list(backends),
            "summary": cold_warm_summary(results),
            "warm_backends_compared": compared,
            "results": results,
        }
        rec.write(data, repeats=submissions - 1, split="graded")

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
                pairs = list(zip(ra, rb, strict=True))
                compared.append(
                    {
                        "task": task,
                        "warm": f"{a} over {b}",
                        "ratio": paired(ra, rb, "wall_s"),
                        "identical_items": all(x["items"] == y["items"] for x, y in pairs),
                        "same_scores": all(x["score"] == y["score"] for x, y in pairs),
                    }
                )
                write()
                print(f"{task}: warm {a} over warm {b}: {compared[-1]['ratio']}", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def cold_warm_summary(results: dict[str, Any]) -> list[dict[str, Any]]:
    """One flat record per task (and backend) that finished, for the docs' tables: the
    summaries of submit-to-score and overhead over the submissions after the first, the
    per-submission ratios, the first warm submission (it also starts the worker) and whether
    the graders' per-item results were identical."""
    out = []
    for key, r in results.items():
        if "cold" not in r or "warm" not in r:
            continue
        out.append(
            {
                "task": key.split("/")[0],
                "backend": r["backend"],
                "cold_s": r["cold"]["wall_s"],
                "warm_s": r["warm"]["wall_s"],
                "ratio": r.get("wall_ratio_cold_over_warm"),
                "cold_overhead_s": r["cold"]["overhead_s"],
                "warm_overhead_s": r["warm"]["overhead_s"],
                "overhead_ratio": r.get("overhead_ratio_cold_over_warm"),
                "warm_first_s": provenance.summarize([r["warm"]["first"]["wall_s"]]),
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
    load_before = [round(x, 2) for x in os.getloadavg()]
    out: dict[str, Any] = {"backend": backend, "load_average_before": load_before}
    results[key] = out
    try:
        rows = grade_pair(task, submissions, work, model_spec, backend)
    except (Exception, KeyboardInterrupt) as err:  # one task's failure ends its row
        out["error"] = f"{type(err).__name__}: {err}"[:500]
        write()
        print(f"{key}: failed: {out['error']}", flush=True)
        if isinstance(err, KeyboardInterrupt):
            raise
        return None
    out["cold"] = grader_summary(rows["cold"])
    out["warm"] = grader_summary(rows["warm"])
    same = [c["items"] == w["items"] for c, w in zip(rows["cold"], rows["warm"], strict=True)]
    out["identical_items"] = all(same)
    out["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    out["overhead_ratio_cold_over_warm"] = paired(rows["cold"], rows["warm"], "overhead_s")
    out["wall_ratio_cold_over_warm"] = paired(rows["cold"], rows["warm"], "wall_s")
    write()
    print(
        f"{key}: submit-to-score cold {out['cold']['wall_s']}, warm {out['warm']['wall_s']}, "
        f"ratio {out['wall_ratio_cold_over_warm']}; overhead ratio "
        f"{out['overhead_ratio_cold_over_warm']}; identical per-item results: {all(same)}; "
        f"load {load_before[0]:.1f} -> {out['load_average_after'][0]:.1f}",
        flush=True,
    )
    return rows["warm"]


if __name__ == "__main__":
    sys.exit(main())
