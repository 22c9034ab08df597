"""The ``agent2rl`` command line (Typer + rich).

User errors print one line (``error: ...``) and exit with status 2, never a traceback.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from agent2rl.errors import UserError
from agent2rl.formatting import format_duration, format_number
from agent2rl.settings import parse_duration, parse_size

if TYPE_CHECKING:  # the run machinery is imported only when a command needs it (fast --help)
    from agent2rl.orchestration.request import RunRequest

console = Console()
err_console = Console(stderr=True)

DEMO_TASK, DEMO_AGENT, DEMO_MODEL, DEMO_BUDGET = "arith-lite", "reference-grpo", "tiny", "4m"


def _user_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except UserError as err:
            err_console.print(f"[red]error:[/] {err}", highlight=False, soft_wrap=True)
            raise typer.Exit(2) from None
        except KeyboardInterrupt as err:
            err_console.print("[red]interrupted[/]")
            # 128 + the signal, as a shell reports it: SIGINT 130, SIGTERM 143, SIGHUP 129
            raise typer.Exit(128 + getattr(err, "signum", 2)) from None

    return wrapper


class _App(typer.Typer):
    """A Typer app whose every command goes through :func:`_user_errors`."""

    def command(self, *args: Any, **kwargs: Any) -> Callable[[Callable[..., Any]], Any]:
        register = super().command(*args, **kwargs)
        return lambda fn: register(_user_errors(fn))


app = _App(
    add_completion=False,
    no_args_is_help=True,
    help="agent2rl: benchmark LLM coding agents on RL post-training.",
)


#: a score in a table or a summary line: 2 decimals, "-" for none
_fmt = functools.partial(format_number, missing="-")


def _execute(req: RunRequest) -> None:
    """Run ``req``, print its headline numbers; exit 1 if the harness itself failed."""
    from agent2rl.orchestration.run import execute_run
    from agent2rl.orchestration.services import ServiceNotReady

    try:
        outcome = execute_run(req, console)
    except ServiceNotReady:
        # An infrastructure failure the run has printed and recorded (run.json, the report):
        # no traceback after it.
        raise typer.Exit(1) from None
    m = outcome.metrics
    console.print()
    console.print(f"[bold]run finished[/]: status={outcome.status}")
    if m is not None:  # None: the report could not be written (already said why)
        ci = m.improvement_ci95
        ci_txt = f" (95% CI {ci[0]:+.2f} .. {ci[1]:+.2f})" if ci else ""
        console.print(
            f"baseline {_fmt(m.baseline)} -> best {_fmt(m.best_score)}  improvement "
            f"{_fmt(m.improvement, signed=True)}{ci_txt}"
        )
        console.print(f"submissions {m.submissions} (valid {m.valid_submissions})")
    console.print(f"report: {outcome.run_dir / 'report' / 'report.html'}")
    if outcome.status == "harness_error":
        raise typer.Exit(1)


# The flags `run` shares with `eval` and `demo`, declared once.
_TASK = typer.Option(..., "--task", "-t", help="Task name (see `agent2rl tasks`).")
_RUNS_DIR = typer.Option(Path("runs"), "--runs-dir", help="Where run directories go.")
_SANDBOX = typer.Option("auto", "--sandbox", help="auto | bwrap | none.")
_BACKEND = typer.Option(
    "auto", "--backend", help="Grading backend: auto (vllm if CUDA+vllm) | vllm | transformers."
)
_DTYPE = typer.Option("auto", "--dtype", help="auto | float32 | bfloat16 | float16.")
_MAX_MODEL_LEN = typer.Option(
    None, "--max-model-len", help="vLLM: context length (default: the model's)."
)
_TENSOR_PARALLEL_SIZE = typer.Option(
    1, "--tensor-parallel-size", help="vLLM: GPUs one model is split over."
)
_TASK_OPT = typer.Option(
    [], "--task-opt", help="Task option NAME=VALUE, repeatable (see `agent2rl tasks TASK`)."
)
_PROTOCOL = typer.Option(
    "auto",
    "--protocol",
    help="How the grader decodes: auto (reference on the full tasks, agent2rl on the lite "
    "ones) | reference (the paper's per-model table for the base model, seeded per item) | "
    "agent2rl (greedy). See docs/paper-fidelity.md.",
)


@app.command()
def run(
    task: str = _TASK,
    agent: str = typer.Option(
        ..., "--agent", "-a", help="Agent name (see `agent2rl agents`) or a spec .toml file."
    ),
    model: str = typer.Option(
        "tiny", "--model", "-m", help="'tiny', a local HF model directory, or a hub id."
    ),
    budget: str = typer.Option("30m", "--budget", "-b", help="Time budget: 90s, 30m, 12h."),
    runs_dir: Path = _RUNS_DIR,
    seed: int = typer.Option(0, "--seed", help="Seed recorded with the run."),
    sandbox: str = _SANDBOX,
    backend: str = _BACKEND,
    dtype: str = _DTYPE,
    gpu_memory_utilization: float | None = typer.Option(
        None,
        "--gpu-memory-utilization",
        help="vLLM: fraction of a GPU for grading (default 0.85 on the grader's own GPU, "
        "0.30 on a GPU shared with the agent).",
    ),
    max_model_len: int | None = _MAX_MODEL_LEN,
    tensor_parallel_size: int = _TENSOR_PARALLEL_SIZE,
    grader_gpus: str | None = typer.Option(
        None,
        "--grader-gpus",
        help="GPUs of the grader: nvidia-smi indices (0,1 or 4-7) or none (default: the last "
        "GPU when there are several, else shared with the agent).",
    ),
    agent_gpus: str | None = typer.Option(
        None, "--agent-gpus", help="GPUs of the agent, as --grader-gpus (default: the others)."
    ),
    task_opt: list[str] = _TASK_OPT,
    driver: str | None = typer.Option(
        None, "--driver", help="Driver LLM of an LLM agent, e.g. claude-sonnet-4-5, gpt-5."
    ),
    driver_base_url: str | None = typer.Option(
        None, "--driver-base-url", help="OpenAI-compatible server for an openai/<model> driver."
    ),
    mode: str = typer.Option(
        "free", "--mode", help="Operating mode of an LLM agent: free|sft-only|rl-oriented|multi."
    ),
    token_budget: int | None = typer.Option(
        None, "--token-budget", help="Max input+output tokens of the driver LLM for the run."
    ),
    allow_provider_tools: bool = typer.Option(
        False,
        "--allow-provider-tools",
        help="Let the driver LLM's provider-side tools (web search, URL fetch, MCP) through "
        "the metering proxy, each use recorded; refused by default (they reach the web past "
        "the run's deny lists). The run's identity records it.",
    ),
    protocol: str = _PROTOCOL,
    instructions: str = typer.Option(
        "neutral",
        "--instructions",
        help="The agent's instructions.md: neutral | reference (the paper's reference: "
        "RL post-training framing, a required summary.md shown in the report).",
    ),
    memory: str | None = typer.Option(
        None, "--memory", help="Memory cap of the agent's processes, e.g. 16G (default 75% of RAM)."
    ),
    max_pids: int | None = typer.Option(
        None, "--max-procs", help="Cap on the agent's processes and threads (default 4096)."
    ),
    disk_quota: str | None = typer.Option(
        None, "--disk-quota", help="Workspace disk quota, e.g. 50G (default half the free space)."
    ),
    network: str = typer.Option(
        "auto", "--network", help="auto | host | services (only the run's services, egress proxy)."
    ),
    allow_host: list[str] = typer.Option(
        [],
        "--allow-host",
        help="HOST[:PORT] or *.SUFFIX the egress proxy allows under --network services, "
        "repeatable; replaces the default list (package indexes, model hubs); 'none': no egress.",
    ),
    feedback: str = typer.Option(
        "private",
        "--feedback",
        help="private (the paper's: /submit answers the private-split score, the result is the "
        "best) | validation (MLE-bench's: /submit answers the validation-split score; at the end "
        "the submission marked final, else the best on validation, is graded on the private "
        "split).",
    ),
) -> None:
    """Run one agent on one task within a budget, then write its report."""
    from agent2rl.agents import get_agent
    from agent2rl.orchestration.request import RunRequest

    # The flags named as the request's fields go in as they are; the rest are parsed.
    given = dict(locals())  # out here: a comprehension has locals of its own
    flags = {k: v for k, v in given.items() if k in RunRequest.model_fields}
    req = RunRequest(**{
        **flags,
        "budget_s": parse_duration(budget),
        "task_options": _parse_task_opts(task_opt),
        "memory": parse_size(memory) if memory else None,
        "disk_quota": parse_size(disk_quota) if disk_quota else None,
        "egress_allow": _parse_allow_hosts(allow_host),
    })  # fmt: skip
    req = _apply_gpu_layout(req, grader_gpus, agent_gpus)
    spec = get_agent(agent)
    if spec.experimental:  # not yet shown to work: one warning line, the run goes ahead
        err_console.print(
            f"[yellow]warning:[/] agent {spec.name} is experimental ({spec.experimental_note})",
            highlight=False,
            soft_wrap=True,  # one line, however narrow the terminal
        )
    _execute(req)


def _apply_gpu_layout(
    req: RunRequest, grader_gpus: str | None, agent_gpus: str | None
) -> RunRequest:
    """``req`` under the run's GPU layout (:mod:`agent2rl.devices`): the grader's cards and
    vLLM share (the user's ``--gpu-memory-utilization`` wins, also on a shared card), the
    agent's cards and the memory its instructions allow. A machine without a GPU (and no
    flag) leaves ``req`` as it is."""
    from agent2rl.devices import list_gpus, plan_layout

    gpus = list_gpus()
    if not gpus and grader_gpus is None and agent_gpus is None:
        return req
    utilization = req.gpu_memory_utilization
    dedicated = utilization if utilization is not None else 0.85
    layout = plan_layout(gpus, grader_gpus, agent_gpus, req.tensor_parallel_size, dedicated)
    update: dict[str, Any] = {}
    if utilization is None and layout.grader_memory_fraction:
        update["gpu_memory_utilization"] = layout.grader_memory_fraction
    elif utilization is None and layout.grader_memory_fraction == 0.0 and req.backend == "auto":
        update["backend"] = "transformers"
    # The grading service, its evaluation workers and the baseline's inherit this process's
    # environment; the agent's is built from scratch, so its cards go in through extra_env.
    os.environ.update(layout.grader_env())
    update["extra_env"] = {**req.extra_env, **layout.agent_env()}
    update["gpu_note"] = layout.instructions()
    console.print(layout.summary(), highlight=False, soft_wrap=True)
    for note in layout.notes:
        console.print(f"note: {note}", highlight=False, soft_wrap=True)
    return req.model_copy(update=update)


def _parse_allow_hosts(hosts: list[str]) -> tuple[str, ...] | None:
    """``--allow-host`` values: None (the default list) when none are given, () for ``none``."""
    if not hosts:
        return None
    if hosts == ["none"]:
        return ()
    if "none" in hosts:
        raise UserError("--allow-host none cannot be combined with hosts: give one or the other")
    return tuple(hosts)


def _parse_task_opts(pairs: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name.strip():
            raise UserError(f"bad --task-opt {pair!r}: write NAME=VALUE, e.g. max_new_tokens=256")
        out[name.strip()] = value.strip()
    return out


#: what each step of the demo took on a loaded 2-core VM without a GPU (load average 10): seconds
_DEMO_STEP_S = {"baseline": 45.0, "finalize": 30.0}
#: the first demo on a machine also builds the tiny model and the task data
_DEMO_FIRST_S = 40.0


def _demo_first_time() -> bool:
    from agent2rl.settings import load_settings

    return not any(load_settings().model_store.glob("tiny-v*/config.json"))


@app.command()
def demo(
    runs_dir: Path = _RUNS_DIR,
    budget: str = typer.Option(DEMO_BUDGET, "--budget", help="Time budget of the demo run."),
    sandbox: str = _SANDBOX,
) -> None:
    """The embedded default: reference-grpo on arith-lite with the tiny model (~5 min)."""
    from agent2rl.orchestration.request import RunRequest

    budget_s = parse_duration(budget)
    console.print(
        f"[bold]agent2rl demo[/]: {DEMO_AGENT} on {DEMO_TASK} with the {DEMO_MODEL} "
        f"model, budget {format_duration(budget_s)}"
    )
    first = _demo_first_time()  # the plan first: each step with how long it takes
    steps = [
        (
            "build the tiny model and the arith-lite data" if first else "load the tiny model",
            f"~{_DEMO_FIRST_S:.0f}s (first run only)" if first else "a few seconds",
        ),
        (
            "grade the base model on the held-out items (the baseline, cached after)",
            f"~{_DEMO_STEP_S['baseline']:.0f}s",
        ),
        (
            f"{DEMO_AGENT} trains (SFT warm-up, then GRPO) and submits; each submission graded",
            f"{format_duration(budget_s)} (the budget)",
        ),
        ("settle the last grading, write the report", f"~{_DEMO_STEP_S['finalize']:.0f}s"),
    ]
    for i, (what, how_long) in enumerate(steps, 1):
        console.print(f"  {i}. {what}: {how_long}", highlight=False, soft_wrap=True)
    total = budget_s + sum(_DEMO_STEP_S.values()) + (_DEMO_FIRST_S if first else 0)
    console.print(f"  expected in all: about {format_duration(10 * round(total / 10))}")
    _execute(RunRequest(task=DEMO_TASK, agent=DEMO_AGENT, model=DEMO_MODEL, budget_s=budget_s,
                        runs_dir=runs_dir, sandbox=sandbox))  # fmt: skip


@app.command("eval")
def eval_(
    task: str = _TASK,
    model: str = typer.Option(
        ..., "--model", "-m", help="'tiny', a local HF model directory, or a hub id."
    ),
    split: str = typer.Option(
        "private", "--split", help="private (what runs are scored on) | validation | public."
    ),
    limit: int | None = typer.Option(
        None, "--limit", help="Grade only the first N items (a quick check; default all)."
    ),
    runs_dir: Path = typer.Option(
        Path("runs"), "--runs-dir", help="Results go to RUNS_DIR/evals/<id>/ unless --out."
    ),
    out: Path | None = typer.Option(None, "--out", help="Directory for the results (new)."),
    backend: str = _BACKEND,
    dtype: str = _DTYPE,
    gpu_memory_utilization: float = typer.Option(
        0.85, "--gpu-memory-utilization", help="vLLM: fraction of GPU memory for grading."
    ),
    max_model_len: int | None = _MAX_MODEL_LEN,
    tensor_parallel_size: int = _TENSOR_PARALLEL_SIZE,
    task_opt: list[str] = _TASK_OPT,
    timeout: str | None = typer.Option(
        None, "--timeout", help="Kill the evaluation after this long (default: the task's)."
    ),
    protocol: str = _PROTOCOL,
) -> None:
    """Grade a model on a task without an agent, through the grader's own code path: prints
    the score with its 95% interval and writes per-item results (items.jsonl)."""
    from agent2rl.orchestration.evaluate import EvalRequest, evaluate_model
    from agent2rl.orchestration.request import backend_config

    req = EvalRequest(
        task=task,
        model=model,
        split=split,
        limit=limit,
        backend=backend_config(
            backend, dtype, protocol, gpu_memory_utilization, max_model_len, tensor_parallel_size
        ),  # fmt: skip
        task_options=_parse_task_opts(task_opt),
        runs_dir=runs_dir,
        out=out,
        timeout_s=parse_duration(timeout) if timeout else None,
    )
    with console.status("evaluating") as status:
        rep = evaluate_model(req, lambda msg: (console.print(msg), status.update(msg)))
    ci = f" (95% CI {rep.ci95[0]:.2f} .. {rep.ci95[1]:.2f})" if rep.ci95 else ""
    console.print(
        f"[bold]{rep.task}[/] {rep.model} on the {rep.split} split: score {rep.score:.4f}{ci}, "
        f"{rep.n_items} items in {format_duration(rep.seconds)} ({rep.backend})",
        highlight=False,
        soft_wrap=True,
    )
    console.print(f"items: {rep.out / 'items.jsonl'}", highlight=False, soft_wrap=True)


@app.command()
def doctor(runs_dir: Path = _RUNS_DIR) -> None:
    """Check this machine: bubblewrap, network namespace, cgroups, GPU, vLLM, LLM provider keys
    (names only) and free disk, and say what each missing piece costs. Exits 0 (nothing is
    required for the lite tasks); the agents' CLIs are `agent2rl agents doctor`."""
    from agent2rl.doctor import run_checks

    table = Table("check", "status", "found", "without it / fix")
    table.columns[-1].overflow = "fold"  # the install command must be copyable whole
    colour = {"ok": "green", "warn": "yellow", "missing": "red"}
    for c in run_checks(runs_dir):
        # escaped: a cost names extras like agent2rl[gpu], which rich would read as markup
        table.add_row(
            c.name, f"[{colour[c.status]}]{c.status}[/]", escape(c.detail), escape(c.cost or "-")
        )
    console.print(table)


@app.command()
def tasks(
    name: str | None = typer.Argument(
        None, help="A task: show its options (--task-opt NAME=VALUE), types, defaults, help."
    ),
) -> None:
    """List the tasks with their level and description; with a TASK, its options."""
    from agent2rl.tasks import get_task, task_names
    from agent2rl.tasks.registry import TASKS

    if name is not None:  # the table is generated from the task's options dataclass
        cls = TASKS[name]
        opts = Table("option", "type", "default", "what it sets", title=f"{name}: --task-opt")
        for s in cls.Options.specs():
            choices = f" One of: {', '.join(s.choices)}." if s.choices else ""
            opts.add_row(s.name, s.type.__name__, s.default_text(), escape(s.help) + choices)
        console.print(opts if cls.Options.specs() else f"task {name} has no options")
        return
    table = Table("task", "level", "version", "description", "options (--task-opt)")
    for name in task_names():
        t = get_task(name)
        opts = ", ".join(f"{k}={v}" for k, v in t.options.items()) or "-"
        table.add_row(t.name, f"L{t.level}", t.version, t.summary, opts)
    console.print(table)


data_app = _App(
    no_args_is_help=True, help="Task data: import official files offline, generate lite games."
)
app.add_typer(data_app, name="data")


@data_app.command("import")
def data_import(
    task: str = typer.Argument(..., help="Task whose data to import (e.g. gsm8k)."),
    path: Path = typer.Argument(..., help="Folder holding the task's official data files."),
) -> None:
    """Import a task's official data files on a machine without network."""
    from agent2rl.settings import load_settings
    from agent2rl.tasks import get_task, task_root

    t = get_task(task)
    console.print(t.import_data(path, task_root(t, load_settings().task_store)), soft_wrap=True)


@data_app.command("make")
def data_make(
    task: str = typer.Argument(..., help="A generated task (e.g. alfworld-lite)."),
    out: Path = typer.Option(..., "--out", help="Folder to write the items into (new)."),
    n: int = typer.Option(60, "--n", help="How many items."),
    seed: int = typer.Option(0, "--seed", help="Seed: the same seed gives the same items."),
) -> None:
    """Generate a lite task's items from a seed for use elsewhere (e.g. alfworld-lite: games
    in ALFWorld's on-disk format, solvable by alfworld's expert, with walkthroughs.jsonl)."""
    from agent2rl.tasks import get_task

    t = get_task(task)
    with console.status(f"generating {n} items of {task}"):
        summary = t.make_data(out, n, seed)
    console.print(summary, soft_wrap=True)


agents_app = typer.Typer(
    invoke_without_command=True, help="The built-in agents and whether each is ready here."
)
app.add_typer(agents_app, name="agents")


@agents_app.callback()
def agents(ctx: typer.Context) -> None:
    """List the built-in agents with installed/configured status ("ready": yes, no, or the
    note of an agent not yet shown to work, ``experimental: ...``)."""
    if ctx.invoked_subcommand is not None:
        return
    from agent2rl.agents import AGENTS
    from agent2rl.agents.doctor import doctor

    table = Table("agent", "kind", "ready", "default driver", "description")
    rows = {r.agent: r for r in doctor(versions=False)}
    for spec in AGENTS.values():
        row = rows[spec.name]  # doctor() checks every built-in spec
        ready = row.readiness() + ("" if row.ok else " (see `agent2rl agents doctor`)")
        table.add_row(spec.name, spec.kind, ready, spec.default_driver or "-", spec.description)
    console.print(table)


@agents_app.command("doctor")
def agents_doctor() -> None:
    """For each agent: ready (or experimental, and why), installed (and version), its
    driver's key, and the install command."""
    from agent2rl.agents.doctor import DOCTOR_COLUMNS, doctor

    table = Table(*DOCTOR_COLUMNS)
    table.columns[-1].overflow = "fold"  # the install command must be copyable whole
    for row in doctor():
        table.add_row(*row.cells())
    console.print(table)


@app.command()
def report(run_dir: Path = typer.Argument(..., help="A run directory (runs/<run_id>).")) -> None:
    """Re-generate a run's report from its run directory.

    A run whose harness died (SIGKILL, a crash) without closing it is first marked
    ``interrupted``, and its submissions still in flight failed (the harness's fault). A run
    of ``--feedback validation`` whose end-of-run grade on the private split was not done
    (interrupted, or its harness died) is graded first.
    """
    from agent2rl.analysis import record_run, write_report
    from agent2rl.orchestration.recover import close_dead_run, complete_final_grade
    from agent2rl.rundir import LIVE_RUN_STATUSES, RunInfo, RunPaths

    paths = RunPaths(run_dir.expanduser().resolve())
    if not paths.run_json.is_file():
        raise UserError(f"{run_dir} is not a run directory (no run.json): pass runs/<run_id>")
    if note := close_dead_run(paths):
        err_console.print(note, highlight=False, soft_wrap=True)
    elif (status := RunInfo.load(paths).status) in LIVE_RUN_STATUSES:
        err_console.print(f"note: the run is still {status}; this report is of the run so far")
    if graded := complete_final_grade(paths):  # --feedback validation: the private-split grade
        err_console.print(graded, highlight=False, soft_wrap=True)
    record_run(paths.root.parent, paths.root, write_report(paths))
    console.print(f"report: {paths.report / 'report.html'}")


@app.command()
def compare(
    runs_dir: Path = _RUNS_DIR,
    task: str | None = typer.Option(None, "--task", help="Only runs of this task."),
    eval_hash: str | None = typer.Option(
        None, "--eval-hash", help="Only runs graded under these evaluation settings."
    ),
    raw: bool = typer.Option(
        False, "--raw", help="Count flagged runs in the means as graded, not as their base model."
    ),
) -> None:
    """Compare finished runs: one row per run, then means per (task, agent, driver).

    Refuses to put side by side runs of one task graded under different evaluation settings.
    A flagged run counts in the means as its base model (improvement 0) unless --raw.
    """
    from agent2rl.analysis import list_runs
    from agent2rl.analysis.dashboard.compare import aggregate, integrity_note
    from agent2rl.analysis.dashboard.runset import isolation_label

    rows = list_runs(runs_dir.expanduser())
    if not rows:
        raise UserError(f"no finished runs recorded in {runs_dir}: run `agent2rl run` first")
    rows = [r for r in rows if task in (None, r["task"]) and eval_hash in (None, r["eval_hash"])]
    if not rows:
        raise UserError("no run matches --task/--eval-hash: see `agent2rl compare` without them")
    groups = aggregate(rows, raw=raw)  # raises when the rows are not comparable
    table = Table(
        "run", "task", "agent", "baseline", "best",
        "improvement [95% CI]", "noise", "LLM tokens", "integrity",
    )  # fmt: skip
    for r in rows:
        lo, hi = r["ci_lo"], r["ci_hi"]
        ci = f" [{lo:+.2f}, {hi:+.2f}]" if lo is not None and hi is not None else ""
        noise = {None: "-", 0: "beyond", 1: "within"}[r["within_noise"]]
        iso = isolation_label(r.get("sandbox"), r.get("network"), r.get("provider_tools"))
        table.add_row(
            r["run_id"],
            r["task"],
            (r["agent"] or "")
            + (f" ({r['driver']})" if r["driver"] else "")
            + (f", {r['mode']}" if r["mode"] else "")
            + _kept_apart(r.get("feedback"), iso),
            _fmt(r["baseline"]),
            _fmt(r["best"]),
            _fmt(r["improvement"], signed=True) + ci,
            noise,
            f"{r['total_tokens']:,}" if r["total_tokens"] is not None else "-",
            integrity_note(r),  # flags only: the scores above are as graded
        )
    console.print(table)
    summary = Table(
        "task", "agent", "driver", "runs",
        "mean best", "mean improvement", "beyond noise", "flagged",
    )  # fmt: skip
    for g in groups:
        summary.add_row(
            g["task"] or "-",
            (g["agent"] or "-") + _kept_apart(g["feedback"], g["isolation"]),
            g["driver"] or "-",
            str(g["runs"]),
            _fmt(g["mean_best"]),
            _fmt(g["mean_improvement"], signed=True),
            str(g["beyond_noise"]),
            str(g["flagged"]),
        )
    console.print(summary)
    console.print(
        "best: selected over every graded submission (optimistic); (feedback: validation): "
        "the one submission graded on the private split, selected on validation scores (never "
        "pooled with the others); (sandbox: none), (network: host): the agent ran unconfined "
        "(kept apart from sandboxed runs); flagged runs count in the"
        + (" means as graded (--raw)" if raw else " means as their base model (--raw: as graded)")
    )


def _kept_apart(feedback: str | None, isolation: str | None) -> str:
    """The label suffix of what `compare` never pools with other runs."""
    return (" (feedback: validation)" if feedback == "validation" else "") + (
        f" ({isolation})" if isolation else ""
    )


study_app = _App(
    no_args_is_help=True,
    help="Studies: a matrix of runs (tasks x agents x drivers x modes x models x repeats) on Ray.",
)
app.add_typer(study_app, name="study")


@study_app.command("run")
def study_run(
    spec: Path = typer.Argument(..., help="The study file (TOML)."),
    out: Path = typer.Option(
        ..., "--out", help="The study directory (created; resumed if it exists)."
    ),
    address: str | None = typer.Option(
        None, "--address", help="A Ray cluster to submit to (default: RAY_ADDRESS, else local Ray)."
    ),
    max_concurrent: int | None = typer.Option(
        None,
        "--max-concurrent",
        help="At most this many runs at once (default: as resources allow).",
    ),
    retries: int = typer.Option(
        1, "--retries", help="Times a run that failed in the harness is retried in this call."
    ),
) -> None:
    """Run a study (or resume it: finished runs are kept, the rest run again)."""
    from agent2rl.study import StudyOptions, run_study
    from agent2rl.study.progress import make_reporter

    opts = StudyOptions(out=out, address=address, max_concurrent=max_concurrent, retries=retries)
    result = run_study(spec, opts, lambda tally: make_reporter(tally, console))
    if result.interrupted:
        raise typer.Exit(130)
    if result.failed_keys:
        raise typer.Exit(1)


@study_app.command("status")
def study_status(study_dir: Path = typer.Argument(..., help="A study directory.")) -> None:
    """Each run slot of a study: its status, attempts, run and headline numbers."""
    from agent2rl.study import read_state

    meta, slots, attempts = read_state(study_dir.expanduser())
    counts = Counter(s.status for s in slots)
    console.print(
        f"[bold]study[/] {meta.get('name')}: {len(slots)} runs; "
        + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())),
        highlight=False,
    )
    table = Table("slot", "status", "attempts", "run", "run status", "best", "improvement")
    for s in slots:
        best = improvement = "-"
        if s.run_dir and s.status == "finished":
            from agent2rl.analysis import RunMetrics

            with contextlib.suppress(OSError, ValueError):
                m = RunMetrics.read(Path(s.run_dir) / "report" / "metrics.json")
                best, improvement = _fmt(m.best_score), _fmt(m.improvement, signed=True)
        row = (s.label, s.status, str(s.attempts), s.run_id or "-", s.run_status or "-")
        table.add_row(*row, best, improvement)
    console.print(table)


@study_app.command("export")
def study_export(
    study_dir: Path = typer.Argument(..., help="A study directory (or a plain runs directory)."),
    out: Path | None = typer.Option(None, "--out", help="Where to write (default DIR/export)."),
) -> None:
    """The study's runs and submissions as CSV and Parquet (pandas-friendly)."""
    from agent2rl.study.export import export

    for name, path in export(study_dir, out).items():
        console.print(f"{name}: {path}", highlight=False, soft_wrap=True)


@app.command()
def dashboard(
    runs_dir: Path = typer.Argument(..., help="A study directory or a plain runs directory."),
    raw: bool = typer.Option(
        False, "--raw", help="Count flagged runs as graded, not as their base model."
    ),
) -> None:
    """Write DIR/dashboard.html: leaderboard, pass@k, heatmap, curves, trajectories, routes,
    failures and summaries, one self-contained offline page linking to every run's report.

    Summaries are written by an LLM when AGENT2RL_SUMMARY_BASE_URL and AGENT2RL_SUMMARY_MODEL
    name an OpenAI-compatible endpoint (metered and cached under DIR/summaries/), else by rules.
    """
    from agent2rl.analysis.dashboard.page import write_dashboard
    from agent2rl.analysis.dashboard.summary import SummaryEndpoint, summarize
    from agent2rl.study.runs import load_runs

    root = runs_dir.expanduser().resolve()
    runs, overview = load_runs(root)
    endpoint = SummaryEndpoint.from_env()
    with console.status(
        f"summarising {len(runs)} runs" + (f" with {endpoint.model}" if endpoint else "")
    ):
        summaries = summarize(
            runs,
            endpoint,
            cache_dir=root / "summaries" / "cache",
            usage_path=root / "summaries" / "llm_usage.jsonl",
        )
    path = write_dashboard(root, runs, overview, summaries, raw=raw)
    console.print(f"dashboard: {path}", highlight=False, soft_wrap=True)


@app.command()
def view(
    runs_dir: Path = typer.Argument(
        Path("runs"), help="A runs directory, a study directory, or a directory of them."
    ),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to bind."),
    port: int = typer.Option(8765, "--port", help="Port to listen on (0: a free one)."),
    token: str | None = typer.Option(
        None,
        "--token",
        help="Required on every request, loopback too (default: a random one, in the URL printed).",
    ),
) -> None:
    """Serve a live, read-only web view of runs and studies (timeline, charts, search).

    Every request needs the viewer's token (printed in its URL): an agent running on the
    host's network shares its loopback, and must not read other runs."""
    from agent2rl.viewer.serve import check_access, serve_viewer

    root = runs_dir.expanduser()
    if not root.is_dir():
        raise UserError(
            f"{root} is not a directory: pass a runs directory (agent2rl run --runs-dir)"
        )
    token = check_access(host, token)

    def ready(url: str) -> None:
        console.print(f"viewer: {url}  (Ctrl-C to stop)", highlight=False, soft_wrap=True)

    with contextlib.suppress(KeyboardInterrupt):
        serve_viewer(root, host=host, port=port, token=token, on_ready=ready)


@app.command()
def export(
    path: Path = typer.Argument(
        ..., help="A run directory, a study directory or a runs directory."
    ),
    out: Path = typer.Option(
        Path("trajectories"), "--out", help="Directory for the trajectory files (created)."
    ),
) -> None:
    """Write each run's trajectory in Harbor's ATIF format (docs/export.md)."""
    from agent2rl.viewer.export import ATIF_VERSION, export_trajectories

    files = export_trajectories(path, out.expanduser())
    console.print(
        f"{len(files)} trajectories ({ATIF_VERSION}) in {out}", highlight=False, soft_wrap=True
    )


if __name__ == "__main__":  # pragma: no cover - `python -m agent2rl.cli`
    app()
