"""One run, end to end: resolve, prepare, workspace, baseline, grading, agent, finalize.

:func:`execute_run` is the whole lifecycle (``agent2rl run`` is a thin wrapper around it).
Everything a user can get wrong is checked before the run directory is created, so a bad
flag leaves nothing behind. Whatever happens after that (the agent crashes, the deadline
hits, Ctrl-C, a harness bug), the agent's processes are killed, an in-flight evaluation is
allowed to finish (bounded), the grading service is stopped and a report is written.
"""

from __future__ import annotations

import glob
import secrets
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from rich.console import Console

from agent2rl.agents.spec import AgentSpec, get_agent, install_files
from agent2rl.analysis import compute_metrics, record_run, write_report
from agent2rl.errors import UserError
from agent2rl.grading.ledger import Ledger
from agent2rl.grading.service import ServiceHandle, start_service
from agent2rl.inference.backend import BackendConfig
from agent2rl.models.resolve import ModelRef, resolve_model
from agent2rl.orchestration.agent_process import AgentProcess
from agent2rl.orchestration.baseline import measure_baseline, record_baseline
from agent2rl.orchestration.status import StatusLine
from agent2rl.recording import CodeRecorder, PeriodicSnapshotter, ResourceSampler
from agent2rl.rundir import RunInfo, RunPaths
from agent2rl.settings import format_duration, load_settings
from agent2rl.tasks import Task, get_task, prepare_task
from agent2rl.workspace import agent_env, build_workspace, write_instructions
from agent2rl.workspace.sandbox import (
    SandboxSpec,
    bwrap_argv,
    bwrap_available,
    gpu_devices,
    python_ro_binds,
)

SANDBOX_MODES = ("auto", "bwrap", "none")


@dataclass
class RunRequest:
    """What ``agent2rl run`` asks for. Timing knobs exist for tests and slow machines."""

    task: str
    agent: str
    model: str
    budget_s: float
    runs_dir: Path = Path("runs")
    seed: int = 0
    sandbox: str = "auto"
    backend: BackendConfig = field(default_factory=BackendConfig)
    task_options: dict[str, str] = field(default_factory=dict)
    driver: str | None = None
    grace_s: float = 10.0
    snapshot_interval_s: float = 60.0
    sample_interval_s: float = 5.0
    max_submission_bytes: int | None = None
    extra_env: dict[str, str] = field(default_factory=dict)


@dataclass
class RunOutcome:
    run_dir: Path
    status: str
    metrics: dict


def resolve_sandbox(mode: str) -> str:
    """``auto`` -> ``bwrap`` when bubblewrap works here, else ``none``."""
    if mode not in SANDBOX_MODES:
        raise UserError(f"bad --sandbox {mode!r}: use auto, bwrap or none")
    if mode == "auto":
        return "bwrap" if bwrap_available() else "none"
    if mode == "bwrap" and not bwrap_available():
        raise UserError(
            "--sandbox bwrap: bubblewrap is not installed or cannot create "
            "namespaces here; install it (apt-get install bubblewrap) or use "
            "--sandbox none"
        )
    return mode


def new_run_id(task: str, agent: str) -> str:
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    return f"{stamp}-{task}-{agent}-{secrets.token_hex(2)}"


def execute_run(req: RunRequest, console: Console | None = None) -> RunOutcome:
    """Run one benchmark run and return where it went and its metrics."""
    console = console or Console(stderr=True)
    settings = load_settings()
    # Everything a user can get wrong fails here, before anything is written.
    task = get_task(req.task, req.task_options)
    spec = get_agent(req.agent)
    sandbox = resolve_sandbox(req.sandbox)
    req.backend.validate()
    with console.status(f"resolving model {req.model}"):
        model = resolve_model(req.model, settings.model_store)
    runs_dir = req.runs_dir.expanduser().resolve()
    runs_dir.mkdir(parents=True, exist_ok=True)

    prepared = prepare_task(task, settings.task_store)
    paths = RunPaths(runs_dir / new_run_id(task.name, spec.name))
    paths.root.mkdir(parents=True)
    info = RunInfo(
        run_id=paths.root.name,
        task=task.name,
        task_version=task.version,
        level=task.level,
        agent=spec.name,
        model=req.model,
        budget_s=req.budget_s,
        seed=req.seed,
        sandbox=sandbox,
        created_at=time.time(),
        driver=req.driver,
        model_path=str(model.path),
        task_options=task.opts,
        backend=req.backend.to_dict(),
    )
    info.save(paths)
    console.print(
        f"[bold]run[/] {info.run_id}  task={task.name} agent={spec.name} "
        f"model={req.model} budget={format_duration(req.budget_s)} sandbox={sandbox}"
    )
    build_workspace(paths, task, prepared, model)
    install_files(spec, paths.code)

    service: ServiceHandle | None = None
    try:
        with console.status("measuring the baseline (before the budget starts)"):
            baseline = measure_baseline(task, model, settings, paths, req.backend)
        ledger = Ledger(paths.ledger)
        record_baseline(ledger, task, model, baseline)
        info.eval_hash = baseline["eval_hash"]
        console.print(
            f"baseline: {baseline['score']:.2f} on {baseline['n_items']} items"
            f"{' (cached)' if baseline['cached'] else ''}"
        )
        token = secrets.token_urlsafe(32)
        max_bytes = req.max_submission_bytes or _default_max_bytes(model)
        service = start_service(
            paths,
            token,
            eval_timeout_s=task.eval_timeout_s,
            max_bytes=max_bytes,
            base_model_dir=model.path,
        )
        _run_agent(req, task, spec, model, paths, info, service, token, sandbox, ledger, console)
    except KeyboardInterrupt:
        info.status, info.error = "interrupted", "interrupted by the user"
        raise
    except UserError:
        info.status = "harness_error"
        raise
    except Exception as err:
        info.status, info.error = "harness_error", f"{type(err).__name__}: {err}"
        raise
    finally:
        if service is not None:
            service.stop()
        if info.ended_at is None:
            info.ended_at = time.time()
        info.save(paths)
        metrics = _finalize(paths, runs_dir, console)
    return RunOutcome(paths.root, info.status, metrics)


def _default_max_bytes(model: ModelRef) -> int:
    weights = sum(f.stat().st_size for f in model.path.glob("*.safetensors"))
    # Room for an fp32 save of a bf16 base model plus tokenizer files, and no more.
    return 4 * weights + 256 * 2**20


def _run_agent(
    req: RunRequest,
    task: Task,
    spec: AgentSpec,
    model: ModelRef,
    paths: RunPaths,
    info: RunInfo,
    service: ServiceHandle,
    token: str,
    sandbox: str,
    ledger: Ledger,
    console: Console,
) -> None:
    info.start = time.time()
    info.deadline = info.start + req.budget_s
    info.status = "running"
    info.save(paths)
    write_instructions(paths, info, service.url, token)
    env = agent_env(paths, info, model, service.url, token)
    prompt_file = paths.workspace / "prompt.md"
    prompt = _render_prompt(spec, paths, info)
    prompt_file.write_text(prompt)
    env.update(spec.render_env(paths.workspace, prompt, prompt_file))
    env.update(req.extra_env)
    command = spec.render_command(paths.workspace, prompt, prompt_file)

    agent = AgentProcess(command, env, paths.workspace, paths.agent_log)
    if sandbox == "bwrap":
        agent.argv = bwrap_argv(_sandbox_spec(paths, model, agent.env), command)
    recorder = CodeRecorder(paths.code_git, paths.workspace)
    recorder.snapshot("start")
    snapshotter = PeriodicSnapshotter(recorder, interval_s=req.snapshot_interval_s)
    try:
        agent.start()
    except OSError as err:
        raise UserError(f"cannot start agent {spec.name} ({command[0]}): {err}") from None
    sampler = ResourceSampler(agent.pid, paths.resources, interval_s=req.sample_interval_s)
    sampler.start()
    snapshotter.start()
    status = StatusLine(console, info, ledger)
    try:
        with status:
            while agent.poll() is None and time.time() < info.deadline:
                status.update()
                time.sleep(0.5)
            info.ended_at = time.time()
            code = agent.poll()
            if code is None:
                info.status = "deadline"
                console.print("deadline reached: stopping the agent")
            else:
                info.agent_exit_code = code
                info.status = "completed" if code == 0 else "agent_error"
            killed = agent.terminate_tree(sampler.alive_seen(), grace_s=req.grace_s)
            if killed:
                console.print(f"killed {killed} agent process(es) that ignored SIGTERM")
            _settle_in_flight(ledger, task.eval_timeout_s + 30, status)
    finally:
        if agent.poll() is None:
            agent.terminate_tree(sampler.alive_seen(), grace_s=1.0)
        sampler.stop()
        snapshotter.stop()
    if info.agent_exit_code is None:
        info.agent_exit_code = agent.poll()


def _settle_in_flight(ledger: Ledger, timeout_s: float, status: StatusLine) -> None:
    """Wait for evaluations that were running at the deadline: they still count."""
    end = time.time() + timeout_s
    while ledger.in_flight() and time.time() < end:
        status.update(note="grading an in-flight submission")
        time.sleep(0.5)


def _sandbox_spec(paths: RunPaths, model: ModelRef, env: dict[str, str]) -> SandboxSpec:
    import agent2rl

    pkg = Path(agent2rl.__file__).resolve().parent
    # The harness's own source (task generators, grader) is not the agent's to read.
    hide = [pkg, *map(Path, glob.glob(str(pkg.parent / "agent2rl-*.dist-info")))]
    return SandboxSpec(
        workspace=paths.workspace,
        ro_binds=[*python_ro_binds(), model.path.resolve()],
        ro_inside=[paths.data, paths.base_model.parent],
        hide=hide,
        env=env,
        devices=gpu_devices(),
    )


def _render_prompt(spec: AgentSpec, paths: RunPaths, info: RunInfo) -> str:
    ws = paths.workspace
    return spec.prompt_template.format(
        description=(ws / "description.md").read_text(),
        instructions=(ws / "instructions.md").read_text(),
        time_left=format_duration(info.budget_s),
        workspace=str(ws),
    )


def _finalize(paths: RunPaths, runs_dir: Path, console: Console) -> dict:
    try:
        write_report(paths)
        metrics = compute_metrics(paths)
        record_run(runs_dir, paths.root, metrics)
    except Exception as err:  # a report bug must not hide the run's own outcome
        console.print(f"[red]could not write the report: {err}[/]")
        return {}
    return metrics


__all__ = ["RunOutcome", "RunRequest", "execute_run", "resolve_sandbox"]
