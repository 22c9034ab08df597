"""One run, end to end: resolve, prepare, workspace, baseline, grading, agent, finalize.

:func:`execute_run` is the whole lifecycle (``agent2rl run`` is a thin wrapper around it).
Everything a user can get wrong is checked before the run directory is created, so a bad
flag leaves nothing behind. Whatever happens after that (the agent crashes, the deadline
hits, Ctrl-C, a harness bug), the agent's processes are killed, an in-flight evaluation is
allowed to finish (bounded), the grading service is stopped and a report is written.
"""

from __future__ import annotations

import glob
import os
import secrets
import shutil
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from rich.console import Console

from agent2rl.agents.drivers import Driver, driver_for, real_key
from agent2rl.agents.events import read_agent_log
from agent2rl.agents.launch import build_launch
from agent2rl.agents.metering import (
    DEFAULT_ANTHROPIC_BASE_URL,
    DEFAULT_GEMINI_BASE_URL,
    DEFAULT_OPENAI_BASE_URL,
    MeteringProxy,
    start_metering_proxy,
)
from agent2rl.agents.modes import detect_methods, get_mode, mode_contradictions, render_prompt
from agent2rl.agents.spec import DEFAULT_PROMPT, AgentSpec, get_agent, install_files
from agent2rl.analysis import compute_metrics, record_run, write_report
from agent2rl.child_process import ServiceHandle
from agent2rl.envs.app import RolloutLimits
from agent2rl.envs.service import start_env_service
from agent2rl.errors import UserError
from agent2rl.grading.ledger import Ledger
from agent2rl.grading.service import start_service
from agent2rl.inference.backend import BackendConfig
from agent2rl.models.resolve import ModelRef, resolve_model
from agent2rl.orchestration.agent_process import AgentProcess
from agent2rl.orchestration.baseline import measure_baseline, record_baseline
from agent2rl.orchestration.status import StatusLine
from agent2rl.recording import CodeRecorder, PeriodicSnapshotter, ResourceSampler
from agent2rl.rundir import RunInfo, RunPaths, write_json_atomic
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
    driver_base_url: str | None = None
    mode: str = "free"
    token_budget: int | None = None
    grace_s: float = 10.0
    snapshot_interval_s: float = 60.0
    sample_interval_s: float = 5.0
    max_submission_bytes: int | None = None
    rollout_limits: RolloutLimits = field(default_factory=RolloutLimits)
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
    llm = _resolve_llm(req, spec)
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
        driver=llm[0].name if llm else None,
        mode=req.mode if llm else None,
        token_budget=req.token_budget if llm else None,
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
    rollout: ServiceHandle | None = None
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
        env_vars: dict[str, str] = {}
        if task.interactive:
            env_token = secrets.token_urlsafe(32)
            with console.status("starting the rollout service"):
                rollout = start_env_service(paths, env_token, req.rollout_limits)
            env_vars = {"ENV_SERVER_URL": rollout.url, "ENV_TOKEN": env_token}
        _run_agent(
            req,
            task,
            spec,
            model,
            paths,
            info,
            service,
            token,
            sandbox,
            ledger,
            console,
            llm,
            env_vars,
        )
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
        for child in (rollout, service):
            if child is not None:
                child.stop()
        if info.ended_at is None:
            info.ended_at = time.time()
        info.save(paths)
        metrics = _finalize(paths, runs_dir, console)
    return RunOutcome(paths.root, info.status, metrics)


def _resolve_llm(req: RunRequest, spec: AgentSpec) -> tuple[Driver, str] | None:
    """(driver, real key) for an LLM agent, None for one without an LLM; every mistake
    (unknown driver or mode, a missing key, a driver for an agent without LLM) is a
    :class:`UserError` here, before anything is written."""
    get_mode(req.mode)
    if req.token_budget is not None and req.token_budget <= 0:
        raise UserError(f"--token-budget {req.token_budget} must be a positive token count")
    if not spec.uses_llm:
        if req.driver or req.driver_base_url:
            raise UserError(f"agent {spec.name} uses no LLM: drop --driver")
        return None
    driver = driver_for(spec, req.driver, req.driver_base_url)
    return driver, real_key(driver)


def _start_proxy(paths: RunPaths, driver: Driver, key: str, budget: int | None) -> MeteringProxy:
    """The run's metering proxy, holding the only copy of the real key. Its upstream is the
    driver's server, or the host's ``OPENAI_BASE_URL``/``ANTHROPIC_BASE_URL``/
    ``GOOGLE_GEMINI_BASE_URL`` (a gateway),
    or the provider's own endpoint."""
    openai_url = driver.base_url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_OPENAI_BASE_URL
    anthropic_url = os.environ.get("ANTHROPIC_BASE_URL") or DEFAULT_ANTHROPIC_BASE_URL
    gemini_url = os.environ.get("GOOGLE_GEMINI_BASE_URL") or DEFAULT_GEMINI_BASE_URL
    return start_metering_proxy(
        paths.llm_usage,
        openai_api_key=key if driver.api == "openai" else "",
        anthropic_api_key=key if driver.api == "anthropic" else "",
        gemini_api_key=key if driver.api == "gemini" else "",
        openai_base_url=openai_url,
        anthropic_base_url=anthropic_url,
        gemini_base_url=gemini_url,
        max_total_tokens=budget,
    )


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
    llm: tuple[Driver, str] | None = None,
    env_vars: dict[str, str] | None = None,
) -> None:
    """Start the clock and run the agent. ``env_vars``: the rollout service's URL and token
    for an interactive task (added to the agent's environment and instructions)."""
    info.start = time.time()
    info.deadline = info.start + req.budget_s
    info.status = "running"
    info.save(paths)
    write_instructions(paths, info, service.url, token, rollout=bool(env_vars))
    env = agent_env(paths, info, model, service.url, token)
    env.update(env_vars or {})
    prompt_file = paths.workspace / "prompt.md"
    # The spec's own template when it has one; else the full prompt (listing, data sample).
    template = None if spec.prompt_template == DEFAULT_PROMPT else spec.prompt_template
    prompt = render_prompt(paths.workspace, req.mode, req.budget_s, template)
    prompt_file.write_text(prompt)
    proxy = _start_proxy(paths, llm[0], llm[1], req.token_budget) if llm else None
    try:
        launch = build_launch(
            spec,
            workspace=paths.workspace,
            prompt=prompt,
            prompt_file=prompt_file,
            driver=llm[0] if llm else None,
            proxy_url=proxy.url if proxy else None,
            proxy_key=proxy.key if proxy else None,
            real_key=llm[1] if llm else "",
        )
        launch.write_files()
        env.update(launch.env)
        env.update(req.extra_env)
        _supervise(req, task, spec, model, paths, info, sandbox, ledger, console, launch.argv, env)
    finally:
        if proxy is not None:
            proxy.stop()
    _record_agent_view(spec, paths, info, task)


def _record_agent_view(spec: AgentSpec, paths: RunPaths, info: RunInfo, task: Task) -> None:
    """What the agent's own log says (events, its token counts) and whether its methods
    match its mode, into ``record/agent.json`` for the report. Never fails the run."""
    try:
        log = read_agent_log(spec, paths.agent_log, paths.workspace)
        view: dict = {"log_format": spec.log_format, "log": log.summary()}
        if info.mode:
            methods = detect_methods(paths.code)
            view["methods"] = sorted(methods)
            view["mode_flags"] = mode_contradictions(
                info.mode, methods, interactive=task.level == 3
            )
        write_json_atomic(paths.record / "agent.json", view)
    except Exception as err:  # the report is still written without it
        write_json_atomic(paths.record / "agent.json", {"error": f"{type(err).__name__}: {err}"})


def _supervise(
    req: RunRequest,
    task: Task,
    spec: AgentSpec,
    model: ModelRef,
    paths: RunPaths,
    info: RunInfo,
    sandbox: str,
    ledger: Ledger,
    console: Console,
    command: list[str],
    env: dict[str, str],
) -> None:
    """Start the agent, record it, stop it at the deadline, settle in-flight grading."""
    agent = AgentProcess(command, env, paths.workspace, paths.agent_log)
    if sandbox == "bwrap":
        agent.argv = bwrap_argv(_sandbox_spec(paths, model, agent.env, command), command)
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


def _sandbox_spec(
    paths: RunPaths, model: ModelRef, env: dict[str, str], command: list[str]
) -> SandboxSpec:
    import agent2rl

    pkg = Path(agent2rl.__file__).resolve().parent
    # The harness's own source (task generators, grader) is not the agent's to read.
    hide = [pkg, *map(Path, glob.glob(str(pkg.parent / "agent2rl-*.dist-info")))]
    return SandboxSpec(
        workspace=paths.workspace,
        ro_binds=[*python_ro_binds(), model.path.resolve(), *_program_binds(command[0], env)],
        ro_inside=[paths.data, paths.base_model.parent],
        hide=hide,
        env=env,
        devices=gpu_devices(),
    )


def _program_binds(program: str, env: dict[str, str]) -> list[Path]:
    """Read-only binds that make an agent CLI installed outside the system dirs (a user's npm
    prefix, ``~/.local``) runnable in the sandbox: the folder of its executable and, for a
    symlinked one (npm), of the package it points into."""
    exe = shutil.which(program, path=env.get("PATH"))
    if exe is None:
        return []
    out = []
    for p in (Path(exe).parent, Path(exe).resolve().parent.parent):
        if not any(p.is_relative_to(d) for d in ("/usr", "/bin", "/lib", "/sbin", "/etc")):
            out.append(p)
    return [p for p in dict.fromkeys(out) if p.is_dir() and not _too_broad(p)]


def _too_broad(p: Path) -> bool:
    """True for paths a bind must never expose whole (the filesystem root, a home dir)."""
    return p == Path("/") or p == Path.home() or p.parent == Path("/home")


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
