"""The ``agent2rl`` command line (Typer + rich).

User errors print one line (``error: ...``) and exit with status 2, never a traceback.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from agent2rl.errors import UserError
from agent2rl.settings import format_duration, parse_duration

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="agent2rl: benchmark LLM coding agents on RL post-training.",
)
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
        except KeyboardInterrupt:
            err_console.print("[red]interrupted[/]")
            raise typer.Exit(130) from None

    return wrapper


def _print_outcome(outcome: Any) -> None:
    m = outcome.metrics
    report = outcome.run_dir / "report" / "report.html"
    console.print()
    console.print(f"[bold]run finished[/]: status={outcome.status}")
    if m:
        base, best, imp = m.get("baseline"), m.get("best_score"), m.get("improvement")
        ci = m.get("improvement_ci95")
        ci_txt = f" (95% CI {ci[0]:+.2f} .. {ci[1]:+.2f})" if ci else ""
        console.print(
            f"baseline {_fmt(base)} -> best {_fmt(best)}  improvement "
            f"{_fmt(imp, signed=True)}{ci_txt}"
        )
        console.print(
            f"submissions {m.get('submissions', 0)} (valid {m.get('valid_submissions', 0)})"
        )
    console.print(f"report: {report}")


def _fmt(x: float | None, signed: bool = False) -> str:
    if x is None:
        return "-"
    return f"{x:+.2f}" if signed else f"{x:.2f}"


def _execute(req: Any) -> None:
    """Run ``req``, print its headline numbers; exit 1 if the harness itself failed."""
    from agent2rl.orchestration.run import execute_run

    outcome = execute_run(req, console)
    _print_outcome(outcome)
    if outcome.status == "harness_error":
        raise typer.Exit(1)


@app.command()
@_user_errors
def run(
    task: str = typer.Option(..., "--task", "-t", help="Task name (see `agent2rl tasks`)."),
    agent: str = typer.Option(
        ..., "--agent", "-a", help="Agent name (see `agent2rl agents`) or a spec .toml file."
    ),
    model: str = typer.Option(
        "tiny", "--model", "-m", help="'tiny', a local HF model directory, or a hub id."
    ),
    budget: str = typer.Option("30m", "--budget", "-b", help="Time budget: 90s, 30m, 12h."),
    runs_dir: Path = typer.Option(Path("runs"), "--runs-dir", help="Where run directories go."),
    seed: int = typer.Option(0, "--seed", help="Seed recorded with the run."),
    sandbox: str = typer.Option("auto", "--sandbox", help="auto | bwrap | none."),
    backend: str = typer.Option(
        "auto", "--backend", help="Grading backend: auto (vllm if CUDA+vllm) | vllm | transformers."
    ),
    dtype: str = typer.Option("auto", "--dtype", help="auto | float32 | bfloat16 | float16."),
    gpu_memory_utilization: float = typer.Option(
        0.85, "--gpu-memory-utilization", help="vLLM: fraction of GPU memory for grading."
    ),
    max_model_len: int | None = typer.Option(
        None, "--max-model-len", help="vLLM: context length (default: the model's)."
    ),
    tensor_parallel_size: int = typer.Option(
        1, "--tensor-parallel-size", help="vLLM: GPUs one model is split over."
    ),
    task_opt: list[str] = typer.Option(
        [], "--task-opt", help="Task option NAME=VALUE, repeatable (see `agent2rl tasks`)."
    ),
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
) -> None:
    """Run one agent on one task within a budget, then write its report."""
    from agent2rl.inference import BackendConfig
    from agent2rl.orchestration.run import RunRequest

    req = RunRequest(
        task=task,
        agent=agent,
        model=model,
        budget_s=parse_duration(budget),
        runs_dir=runs_dir,
        seed=seed,
        sandbox=sandbox,
        backend=BackendConfig(
            kind=backend,
            dtype=dtype,
            gpu_memory_utilization=gpu_memory_utilization,
            max_model_len=max_model_len,
            tensor_parallel_size=tensor_parallel_size,
        ),
        task_options=_parse_task_opts(task_opt),
        driver=driver,
        driver_base_url=driver_base_url,
        mode=mode,
        token_budget=token_budget,
    )
    _execute(req)


def _parse_task_opts(pairs: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name.strip():
            raise UserError(f"bad --task-opt {pair!r}: write NAME=VALUE, e.g. max_new_tokens=256")
        out[name.strip()] = value.strip()
    return out


@app.command()
@_user_errors
def demo(
    runs_dir: Path = typer.Option(Path("runs"), "--runs-dir", help="Where run directories go."),
    budget: str = typer.Option(DEMO_BUDGET, "--budget", help="Time budget of the demo run."),
    sandbox: str = typer.Option("auto", "--sandbox", help="auto | bwrap | none."),
) -> None:
    """The embedded default: reference-grpo on arith-lite with the tiny model (~5 min)."""
    from agent2rl.orchestration.run import RunRequest

    console.print(
        f"[bold]agent2rl demo[/]: {DEMO_AGENT} on {DEMO_TASK} with the {DEMO_MODEL} "
        f"model, budget {format_duration(parse_duration(budget))}"
    )
    req = RunRequest(
        task=DEMO_TASK,
        agent=DEMO_AGENT,
        model=DEMO_MODEL,
        budget_s=parse_duration(budget),
        runs_dir=runs_dir,
        sandbox=sandbox,
    )
    _execute(req)


@app.command()
def tasks() -> None:
    """List the tasks with their level and description."""
    from agent2rl.tasks import get_task, task_names

    table = Table("task", "level", "version", "description", "options (--task-opt)")
    for name in task_names():
        t = get_task(name)
        opts = ", ".join(f"{k}={v}" for k, v in t.options.items()) or "-"
        table.add_row(t.name, f"L{t.level}", t.version, t.summary, opts)
    console.print(table)


data_app = typer.Typer(
    no_args_is_help=True, help="Task data: import official files offline, generate lite games."
)
app.add_typer(data_app, name="data")


@data_app.command("import")
@_user_errors
def data_import(
    task: str = typer.Argument(..., help="Task whose data to import (e.g. gsm8k)."),
    path: Path = typer.Argument(..., help="Folder holding the task's official data files."),
) -> None:
    """Import a task's official data files on a machine without network."""
    from agent2rl.settings import load_settings
    from agent2rl.tasks import get_task, task_root

    t = get_task(task)
    console.print(t.import_data(path, task_root(t, load_settings().task_store)), soft_wrap=True)


@data_app.command("make-alfworld-lite")
@_user_errors
def data_make_alfworld_lite(
    out: Path = typer.Option(..., "--out", help="Folder to write the games into (new)."),
    n: int = typer.Option(60, "--n", help="How many games (task types cycle through all six)."),
    seed: int = typer.Option(0, "--seed", help="Seed: the same seed gives the same games."),
) -> None:
    """Generate ALFWorld-format lite games (traj_data.json, initial_state.pddl, game.tw-pddl
    per game, plus walkthroughs.jsonl), solvable by alfworld's expert, from a seed."""
    from agent2rl.tasks.alfworld import generate_lite_split
    from agent2rl.tasks.prompt_format import write_jsonl

    if n < 1:
        raise UserError(f"--n {n}: generate at least one game")
    if out.exists() and any(out.iterdir()):
        raise UserError(f"{out} is not empty: choose a new folder for the games")
    with console.status(f"generating {n} games"):
        rows, _ = generate_lite_split(out / "games", seed, n, set())
    write_jsonl(out / "walkthroughs.jsonl", rows)
    console.print(f"{n} games in {out / 'games'}, walkthroughs in {out / 'walkthroughs.jsonl'}")


agents_app = typer.Typer(
    invoke_without_command=True, help="The built-in agents and whether each is ready here."
)
app.add_typer(agents_app, name="agents")


@agents_app.callback()
def agents(ctx: typer.Context) -> None:
    """List the built-in agents with installed/configured status."""
    if ctx.invoked_subcommand is not None:
        return
    from agent2rl.agents.doctor import doctor

    table = Table("agent", "kind", "ready", "default driver", "description")
    specs = {r.agent: r for r in doctor(versions=False)}
    from agent2rl.agents import builtin_specs

    for spec in builtin_specs().values():
        row = specs.get(spec.name)
        ready = "yes" if row is None or row.ok else "no (see `agent2rl agents doctor`)"
        table.add_row(spec.name, spec.kind, ready, spec.default_driver or "-", spec.description)
    console.print(table)


@agents_app.command("doctor")
def agents_doctor() -> None:
    """For each agent: installed (and version), its driver's key, and the install command."""
    from agent2rl.agents.doctor import DOCTOR_COLUMNS, doctor

    table = Table(*DOCTOR_COLUMNS)
    table.columns[-1].overflow = "fold"  # the install command must be copyable whole
    for row in doctor():
        table.add_row(*row.cells())
    console.print(table)


@app.command()
@_user_errors
def report(run_dir: Path = typer.Argument(..., help="A run directory (runs/<run_id>).")) -> None:
    """Re-generate a run's report from its run directory."""
    from agent2rl.analysis import compute_metrics, record_run, write_report
    from agent2rl.rundir import RunPaths

    paths = RunPaths(run_dir.expanduser().resolve())
    if not paths.run_json.is_file():
        raise UserError(f"{run_dir} is not a run directory (no run.json): pass runs/<run_id>")
    out = write_report(paths)
    record_run(paths.root.parent, paths.root, compute_metrics(paths))
    console.print(f"report: {out / 'report.html'}")


@app.command()
@_user_errors
def compare(
    runs_dir: Path = typer.Option(Path("runs"), "--runs-dir", help="Where run directories go."),
    task: str | None = typer.Option(None, "--task", help="Only runs of this task."),
    eval_hash: str | None = typer.Option(
        None, "--eval-hash", help="Only runs graded under these evaluation settings."
    ),
) -> None:
    """Compare finished runs: one row per run, then means per (task, agent, driver).

    Refuses to put side by side runs of one task graded under different evaluation settings.
    """
    from agent2rl.analysis import list_runs
    from agent2rl.analysis.compare import aggregate

    rows = list_runs(runs_dir.expanduser())
    if not rows:
        raise UserError(f"no finished runs recorded in {runs_dir}: run `agent2rl run` first")
    rows = [r for r in rows if task is None or r["task"] == task]
    rows = [r for r in rows if eval_hash is None or r.get("eval_hash") == eval_hash]
    if not rows:
        raise UserError("no run matches --task/--eval-hash: see `agent2rl compare` without them")
    groups = aggregate(rows)  # raises when the rows are not comparable
    table = Table(
        "run", "task", "agent", "baseline", "best", "improvement [95% CI]", "noise", "LLM tokens"
    )
    for r in rows:
        ci = f" [{r['ci_lo']:+.2f}, {r['ci_hi']:+.2f}]" if r.get("ci_lo") is not None else ""
        noise = {None: "-", 0: "beyond", 1: "within"}[r.get("within_noise")]
        table.add_row(
            r["run_id"],
            r["task"],
            r["agent"]
            + (f" ({r['driver']})" if r.get("driver") else "")
            + (f", {r['mode']}" if r.get("mode") else ""),
            _fmt(r.get("baseline")),
            _fmt(r.get("best")),
            _fmt(r.get("improvement"), signed=True) + ci,
            noise,
            f"{r['total_tokens']:,}" if r.get("total_tokens") is not None else "-",
        )
    console.print(table)
    summary = Table(
        "task", "agent", "driver", "runs", "mean best", "mean improvement", "beyond noise"
    )
    for g in groups:
        summary.add_row(
            g["task"],
            g["agent"],
            g["driver"] or "-",
            str(g["runs"]),
            _fmt(g["mean_best"]),
            _fmt(g["mean_improvement"], signed=True),
            str(g["beyond_noise"]),
        )
    console.print(summary)


def main() -> None:  # pragma: no cover - console entry point
    app()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
