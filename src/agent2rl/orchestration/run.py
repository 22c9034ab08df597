"""One run, end to end: :func:`execute_run`, in four stages sharing one
:class:`~agent2rl.orchestration.context.RunContext`: :func:`resolve_run`,
:func:`_start_grading`, :func:`_run_agent` and :func:`_finalize`.

Whatever happens after stage 1 (the agent crashes, the deadline or a cap hits, Ctrl-C,
SIGTERM, SIGHUP, a harness bug, a service that does not become ready), the agent's processes
are killed, an in-flight evaluation may finish (bounded; not when interrupted), and every
service, started on the run's :class:`~agent2rl.orchestration.services.RunServices`, is
stopped in reverse order before the report is written. A SIGKILL: see :func:`execute_run`.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import tempfile
import threading
import time
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

from rich.console import Console

from agent2rl.agents import reference_setup
from agent2rl.agents.doctor import cli_version_record
from agent2rl.agents.drivers import driver_for, real_key
from agent2rl.agents.launch import build_launch
from agent2rl.agents.logs import read_agent_log
from agent2rl.agents.methods import detect_methods, mode_contradictions
from agent2rl.agents.prompt import render_prompt
from agent2rl.agents.spec import DEFAULT_PROMPT, AgentSpec, get_agent, install_files
from agent2rl.analysis import RunMetrics, record_run, write_report
from agent2rl.errors import UserError
from agent2rl.files import write_json_atomic, write_text_atomic
from agent2rl.formatting import format_duration
from agent2rl.grading.final import check_feedback, finish_feedback
from agent2rl.grading.ledger import Ledger
from agent2rl.grading.service import start_service, tell_clock, wait_for_in_flight
from agent2rl.integrity import check_run
from agent2rl.integrity.contamination import record_check_failure
from agent2rl.metering import PROVIDERS, MeteringProxy, Upstream, start_metering_proxy
from agent2rl.models.resolve import ModelRef, resolve_model
from agent2rl.orchestration.agent_process import AgentProcess
from agent2rl.orchestration.baseline import measure_baseline, record_baseline
from agent2rl.orchestration.context import LlmAccess, RunContext, RunOutcome
from agent2rl.orchestration.guard import RunGuard
from agent2rl.orchestration.infra import infrastructure_failure
from agent2rl.orchestration.recover import fail_in_flight, harness_record
from agent2rl.orchestration.request import RunRequest, grading_backend
from agent2rl.orchestration.rollout_service import start_rollout_service
from agent2rl.orchestration.services import (
    GuardService,
    Launched,
    Named,
    RunServices,
    ServiceNotReady,
)
from agent2rl.orchestration.status import StatusLine
from agent2rl.orchestration.watchdog import Watchdog
from agent2rl.recording import CodeRecorder, PeriodicSnapshotter, ResourceSampler
from agent2rl.rundir import FINISHED_RUN_STATUSES, RunInfo, RunPaths, RunStatus
from agent2rl.sandbox import (
    DEFAULT_ALLOWLIST,
    Allowlist,
    Cgroup,
    DenyList,
    ResourceCaps,
    SandboxSpec,
    ServiceBridge,
    agent_sandbox,
    agent_user,
    bwrap_argv,
    bwrap_available,
    confine,
    file_digests,
    hand_over,
    identity_files,
    machine_caps,
    network_isolation_available,
    network_record,
    probe,
    set_nproc_limit,
    start_egress_proxy,
    start_name_proxies,
)
from agent2rl.settings import load_settings
from agent2rl.tasks import get_task, prepare_task, private_paths
from agent2rl.viewer_link import run_page_url
from agent2rl.workspace import agent_env, build_workspace, write_instructions

#: bwrap's own install hint, printed once when a run falls back to no sandbox
BWRAP_HINT = "install bubblewrap for the agent sandbox: apt-get install bubblewrap"


def resolve_sandbox(mode: str) -> str:
    """``auto`` -> ``bwrap`` when bubblewrap works here, else ``none``."""
    if mode == "auto":
        return "bwrap" if bwrap_available() else "none"
    if mode == "bwrap" and not bwrap_available():
        raise UserError(
            "--sandbox bwrap: bubblewrap is not installed or cannot create "
            "namespaces here; install it (apt-get install bubblewrap) or use "
            "--sandbox none"
        )
    return mode


def resolve_network(mode: str, sandbox: str) -> str:
    """``auto`` -> ``services`` under bubblewrap where it can make a network namespace, else
    ``host``; ``services`` needs both (a :class:`UserError` otherwise)."""
    isolable = sandbox == "bwrap" and network_isolation_available()
    if mode == "auto":
        return "services" if isolable else "host"
    if mode == "services" and not isolable:
        raise UserError(
            "--network services needs the bwrap sandbox with network namespaces; "
            "use --sandbox bwrap (apt-get install bubblewrap) or --network host"
        )
    return mode


def default_caps(req: RunRequest, runs_dir: Path) -> ResourceCaps:
    """The agent's caps: the request's, else :func:`~agent2rl.sandbox.limits.machine_caps` of
    the request's ``machine_share`` of this machine (a study's run on a node it shares)."""
    base = machine_caps(runs_dir, req.machine_share)
    return ResourceCaps(
        memory_bytes=req.memory or base.memory_bytes,
        max_pids=req.max_pids or base.max_pids,
        disk_bytes=req.disk_quota or base.disk_bytes,
        max_files=req.max_files or base.max_files,
    )


def new_run_id(task: str, agent: str) -> str:
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    return f"{stamp}-{task}-{agent}-{secrets.token_hex(2)}"


def resolve_run(req: RunRequest, console: Console) -> RunContext:
    """Stage 1: check and resolve the request, then create the run directory and its
    workspace. Every :class:`UserError` a request can cause is raised before the directory
    exists."""
    settings = load_settings()
    task = get_task(req.task, req.task_options)
    spec = get_agent(req.agent)
    sandbox = resolve_sandbox(req.sandbox)
    network = resolve_network(req.network, sandbox)
    try:
        Allowlist(_egress_allow(req))
    except ValueError as err:
        raise UserError(f"bad --allow-host: {err}") from None
    requested = req.backend_config().validate()
    llm = _resolve_llm(req, spec)
    with console.status(f"resolving model {req.model}"):
        model = resolve_model(req.model, settings.model_store)
    runs_dir = req.runs_dir.expanduser().resolve()
    runs_dir.mkdir(parents=True, exist_ok=True)
    caps = default_caps(req, runs_dir)
    backend = grading_backend(requested, task, req.model, model.path)

    prepared = prepare_task(task, settings.task_store)
    check_feedback(req.feedback, task.name, prepared)
    paths = RunPaths(runs_dir / new_run_id(task.name, spec.name))
    user = agent_user(paths.root.name) if sandbox == "bwrap" else None
    info = RunInfo(
        run_id=paths.root.name, task=task.name, task_version=task.version, level=task.level,
        agent=spec.name, model=req.model, budget_s=req.budget_s, seed=req.seed,
        sandbox=sandbox, created_at=time.time(), driver=llm.driver.name if llm else None,
        mode=req.mode if llm else None, token_budget=req.token_budget if llm else None,
        provider_tools=bool(llm) and (req.allow_provider_tools or spec.provider_tools),
        model_path=str(model.path), task_options=task.opts, backend=backend.to_dict(),
        agent_uid=user.uid if user else os.geteuid(), network=network, caps=caps.to_dict(),
        cap_mechanism=probe(), harness=harness_record(), feedback=req.feedback,
    )  # fmt: skip
    ctx = RunContext(
        req, settings, console, task, prepared, spec, model, backend, sandbox, network, caps,
        llm, paths, info, user,
    )  # fmt: skip
    # The agent's files are copied out before the run directory exists: a missing one is the
    # user's mistake and must leave nothing behind.
    with tempfile.TemporaryDirectory(prefix="agent2rl-agent-files-") as staged:
        install_files(spec, Path(staged))
        paths.root.mkdir(parents=True)
        try:
            info.save(paths)
            build_workspace(paths, task, prepared, model)
            for f in Path(staged).iterdir():
                shutil.copyfile(f, paths.code / f.name)
        except BaseException:
            # Whatever stops the run before it starts (a workspace that cannot be built,
            # Ctrl-C, SIGTERM) leaves no half-made run directory: nothing could report on it.
            _remove_tree(paths.root)
            raise
    console.print(
        f"[bold]run[/] {info.run_id}  task={task.name} agent={spec.name} "
        f"model={req.model} budget={format_duration(req.budget_s)} sandbox={sandbox}"
    )
    if sandbox == "none":
        console.print(f"sandbox=none: the agent is not isolated ({BWRAP_HINT})")
    if info.provider_tools:
        console.print(
            "provider tools allowed: the driver's provider may search and fetch the web for "
            "the agent (each use recorded in record/provider_tools.jsonl)"
        )
    return ctx


def _remove_tree(root: Path) -> None:
    """Remove ``root`` whole, its read-only parts (the workspace's data/) included."""
    for dirpath, _dirs, _files in os.walk(root):
        os.chmod(dirpath, 0o700)
    shutil.rmtree(root, ignore_errors=True)


class RunInterrupted(KeyboardInterrupt):
    """SIGTERM or SIGHUP, turned into what Ctrl-C raises: the run stops its agent and its
    services and writes its report, exactly as on Ctrl-C. ``signum`` is the signal."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class _StopSignals:
    """While a run is set up and supervised, the first SIGINT, SIGTERM or SIGHUP raises
    :class:`RunInterrupted` in the main thread (``timeout``, ``docker stop``, a preemption, a
    closed terminal end the run as Ctrl-C does). Later ones, and any during the stop path
    (:meth:`stopping`), are noted on stderr and ignored: the stop path is never cut short.

    A signal ignored at the start (``nohup``) stays ignored; outside the main thread nothing
    is installed. The previous handlers come back on exit."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

    def __init__(self) -> None:
        self.received: int | None = None
        self._stopping = False
        self._old: dict[int, Any] = {}

    def __enter__(self) -> _StopSignals:
        if threading.current_thread() is threading.main_thread():
            for sig in self.SIGNALS:
                # An ignored signal stays ignored: `nohup agent2rl run` must survive the
                # terminal's hangup, a background job the shell's SIGINT.
                if signal.getsignal(sig) != signal.SIG_IGN:
                    self._old[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._old.items():
            signal.signal(sig, handler)

    def stopping(self) -> None:
        """From now on the run is stopping: signals no longer interrupt it."""
        self._stopping = True

    def _handle(self, signum: int, frame: object) -> None:
        if self._stopping or self.received is not None:
            # async-signal-safe: no rich, no locks
            os.write(
                2,
                b"agent2rl: already stopping (the agent, the services, then the report); "
                b"kill -9 abandons the report (`agent2rl report RUN_DIR` writes it later)\n",
            )
            return
        self.received = signum
        self._stopping = True
        raise RunInterrupted(signum)


def execute_run(req: RunRequest, console: Console | None = None) -> RunOutcome:
    """Run one benchmark run; returns where it went and its metrics.

    SIGINT, SIGTERM and SIGHUP (main thread) end the run ``interrupted``: agent and services
    stopped, report and results row written, then :class:`RunInterrupted` raised. After a
    SIGKILL the run's guard (:mod:`~agent2rl.orchestration.guard`) kills what the run started
    and ``agent2rl report`` closes the run (:mod:`~agent2rl.orchestration.recover`).
    """
    console = console or Console(stderr=True)
    with _StopSignals() as signals:
        ctx = resolve_run(req, console)
        return _execute(ctx, signals)


def _execute(ctx: RunContext, signals: _StopSignals) -> RunOutcome:
    info, paths = ctx.info, ctx.paths
    closed: list[RunMetrics | None] = []  # what the run's report step wrote
    services = RunServices(lambda line: ctx.console.print(f"[red]{line}[/]", highlight=False))
    try:
        # Registered first, so it runs last: once every service is down, the run's end.
        services.callback("closing the run (in-flight submissions, report)",
                          _close_run, ctx, closed)  # fmt: skip
        # The guard first of the services (stopped last): every process started from now on
        # (services, evaluation workers) inherits the mark by which it finds them if this
        # process is SIGKILLed.
        guard = services.start(GuardService(paths.root, paths.root / "guard.log")).guard
        assert guard is not None
        _start_grading(ctx, services)
        _run_agent(ctx, guard, services)
    except ServiceNotReady as err:
        info.status, info.error = RunStatus.HARNESS_ERROR, str(err)
        ctx.console.print(f"[red]{err}[/]", highlight=False)
        raise
    except KeyboardInterrupt as err:  # Ctrl-C, or a RunInterrupted signal
        by = err if isinstance(err, RunInterrupted) else "the user"
        info.status, info.error = RunStatus.INTERRUPTED, f"interrupted by {by}"
        raise
    except UserError:
        info.status = RunStatus.HARNESS_ERROR
        raise
    except Exception as err:
        info.status, info.error = RunStatus.HARNESS_ERROR, f"{type(err).__name__}: {err}"
        raise
    finally:
        signals.stopping()
        # Every service started, last first, then the run's close (registered first).
        services.close()
    return RunOutcome(paths.root, info.status, closed[0] if closed else None)


def _stop_timeout(ctx: RunContext) -> float:
    """Seconds a stopping service gets to finish a request: interrupted, nobody waits for an
    evaluation in flight (its row is failed by :func:`_close_run`)."""
    return 2.0 if ctx.info.status == RunStatus.INTERRUPTED else 10.0


def _close_run(ctx: RunContext, closed: list[RunMetrics | None]) -> None:
    """The run's last step, once every service is stopped: fail what the grading service had
    not finished (it never will), save ``run.json``, write the report (its metrics appended
    to ``closed``)."""
    info, paths = ctx.info, ctx.paths
    try:
        fail_in_flight(paths.ledger, f"still being graded when the run ended ({info.status})")
    except Exception as err:  # the report is still written; the row stays in flight
        ctx.console.print(f"[red]could not close the in-flight submissions: {err}[/]")
    finish_feedback(ctx.paths, info.status, ctx.console.print)
    info.ended_at = info.ended_at or time.time()
    info.save(paths)
    closed.append(_finalize(ctx))
    if info.status == RunStatus.INTERRUPTED:
        ctx.console.print(f"run interrupted; report: {paths.report / 'report.html'}")


def _resolve_llm(req: RunRequest, spec: AgentSpec) -> LlmAccess | None:
    """The driver and real key of an LLM agent, None for one without an LLM; every mistake
    (unknown driver, a missing key, a driver for an agent without LLM) is a
    :class:`UserError` here, before anything is written."""
    if not spec.uses_llm:
        if req.driver or req.driver_base_url:
            raise UserError(f"agent {spec.name} uses no LLM: drop --driver")
        if req.allow_provider_tools:
            raise UserError(f"agent {spec.name} uses no LLM: drop --allow-provider-tools")
        return None
    driver = driver_for(spec, req.driver, req.driver_base_url)
    return LlmAccess(driver, real_key(driver))


def _start_grading(ctx: RunContext, services: RunServices) -> None:
    """Stage 2: the baseline (cached, before the budget starts), then the services."""
    with ctx.console.status("measuring the baseline (before the budget starts)"):
        baseline = measure_baseline(ctx.task, ctx.model, ctx.settings, ctx.paths, ctx.backend)
    ledger = ctx.started.ledger = Ledger(ctx.paths.ledger)
    record_baseline(ledger, ctx.task, ctx.model, baseline)
    # how every graded item was decoded, and how many samples it got (--protocol)
    ledger.set_meta("decoding", ctx.backend.decoding_settings().to_dict())
    if ctx.info.feedback == "validation":  # what the agent's validation scores compare with
        with ctx.console.status("measuring the baseline on the validation split"):
            validation = measure_baseline(
                ctx.task, ctx.model, ctx.settings, ctx.paths, ctx.backend, split="validation"
            )
        ledger.set_meta("validation_baseline", validation)
    ctx.info.eval_hash = baseline["eval_hash"]
    ctx.console.print(
        f"baseline: {baseline['score']:.2f} on {baseline['n_items']} items"
        f"{' (cached)' if baseline['cached'] else ''}"
    )
    if url := run_page_url(ctx.paths.root):  # an `agent2rl view` serving this run's directory
        ctx.console.print(f"view: {url}")
    ctx.started.grading_token = secrets.token_urlsafe(32)
    ctx.started.grading = services.launch(
        "grading service",
        lambda: start_service(
            ctx.paths,
            ctx.started.grading_token,
            eval_timeout_s=ctx.task.eval_timeout_s,
            max_bytes=ctx.req.max_submission_bytes or _default_max_bytes(ctx.model),
            base_model_dir=ctx.model.path,
        ),
        lambda service: service.stop(timeout=_stop_timeout(ctx)),
    )
    if ctx.task.interactive:
        env_token = secrets.token_urlsafe(32)
        with ctx.console.status("starting the rollout service"):
            ctx.started.rollout = services.launch(
                "rollout service",
                lambda: start_rollout_service(ctx.paths, env_token, ctx.req.rollout_limits),
                lambda service: service.stop(timeout=_stop_timeout(ctx)),
            )
        ctx.started.env_vars = {"ENV_SERVER_URL": ctx.started.rollout.url, "ENV_TOKEN": env_token}


def _start_proxy(ctx: RunContext, llm: LlmAccess) -> MeteringProxy:
    """The run's metering proxy, holding the only copy of the real key (for the driver's
    provider only). Each upstream is the driver's server, else the host's ``*_BASE_URL``
    gateway (``OPENAI``, ``ANTHROPIC``, ``GOOGLE_GEMINI``), else the provider's endpoint."""
    upstreams = {name: Upstream(p.host_base_url()) for name, p in PROVIDERS.items()}
    own = llm.driver.base_url or upstreams[llm.driver.api].base_url
    upstreams[llm.driver.api] = Upstream(own, llm.key)
    # Only the driver's model, and not with the task's judge prompt: the agent's key must not
    # reach its task's judge.
    return start_metering_proxy(
        ctx.paths.llm_usage,
        upstreams=upstreams,
        max_total_tokens=ctx.req.token_budget,
        allowed_models=(llm.driver.model,),
        denied_prompts=ctx.task.denied_llm_prompts(),
        # Web search and URL fetches run by the provider pass the run's deny lists: off
        # unless the run allows them (and then recorded).
        allow_provider_tools=ctx.info.provider_tools,
        # The agent holds its grading token: were it pasted into a prompt, the transcript
        # (which the viewer and the export show) must not keep it.
        redact=(ctx.started.grading_token,),
    )


def _default_max_bytes(model: ModelRef) -> int:
    weights = sum(f.stat().st_size for f in model.path.glob("*.safetensors"))
    # Room for an fp32 save of a bf16 base model plus tokenizer files, and no more.
    return 4 * weights + 256 * 2**20


def _run_agent(ctx: RunContext, guard: RunGuard, services: RunServices) -> None:
    """Stage 3: start the clock, write what the agent reads, launch and supervise it (the
    agent's processes made known to the run's ``guard``), its services on ``services``."""
    req, info, paths = ctx.req, ctx.info, ctx.paths
    assert ctx.started.grading is not None
    info.start = time.time()
    info.deadline = req.deadline(info.start)
    info.status = RunStatus.RUNNING
    info.save(paths)
    grading, token = ctx.started.grading, ctx.started.grading_token
    tell_clock(grading, token, info.start, info.deadline)  # once: never polled
    write_instructions(paths, info, grading.url, token,
                       rollout=bool(ctx.started.env_vars), style=req.instructions)  # fmt: skip
    if req.gpu_note:  # the GPU layout (agent2rl.devices): what GPU memory the agent may use
        instructions = paths.workspace / "instructions.md"
        write_text_atomic(instructions, instructions.read_text() + req.gpu_note)
    env = agent_env(paths, info, ctx.model, grading.url, token)
    env.update(ctx.started.env_vars)
    prompt_file = paths.workspace / "prompt.md"
    # The spec's own template when it has one; else the full prompt (listing, data sample).
    template = None if ctx.spec.prompt_template == DEFAULT_PROMPT else ctx.spec.prompt_template
    prompt = render_prompt(paths.workspace, req.mode, req.budget_s, template)
    # --instructions reference: the reference's own prompt, AGENTS.md, timer.sh and agent
    # environment for the CLIs its start scripts launch (agents.reference_setup)
    reference = req.instructions == "reference" and reference_setup.applies(ctx.spec.name)
    if reference:
        prompt = reference_setup.prepare(ctx.spec.name, paths.workspace, env, req.budget_s)
    write_text_atomic(prompt_file, prompt)
    # Registered before the metering proxy, so it reads the agent's usage once the proxy
    # has stopped (every request it relayed written down).
    services.callback("reading the agent's log", _record_agent_view, ctx)
    llm = ctx.llm
    proxy = ctx.started.metering = (
        services.launch("metering proxy", lambda: _start_proxy(ctx, llm), MeteringProxy.stop)
        if llm
        else None
    )
    launch = build_launch(
        ctx.spec,
        workspace=paths.workspace,
        prompt=prompt,
        prompt_file=prompt_file,
        driver=llm.driver if llm else None,
        proxy_url=proxy.url if proxy else None,
        proxy_key=proxy.key if proxy else None,
        real_key=llm.key if llm else "",
    )
    launch.write_files()
    env.update(launch.env)
    env.update(req.extra_env)
    argv = reference_setup.with_timeout(launch.argv, req.budget_s) if reference else launch.argv
    _supervise(ctx, argv, env, guard, services)


def _record_agent_view(ctx: RunContext) -> None:
    """The agent's own log (events, token counts) and whether its methods match its mode,
    into ``record/agent.json``. Never fails the run; nothing for a run whose agent did not
    end on its own (interrupted, a harness failure)."""
    paths, info = ctx.paths, ctx.info
    if info.status not in FINISHED_RUN_STATUSES:
        return
    try:
        log = read_agent_log(ctx.spec, paths.agent_log, paths.workspace)
        view: dict = {"log_format": ctx.spec.log_format, "log": log.summary()}
        if ctx.spec.binary:  # the CLI version that ran, and whether it was a tested one
            view["log"]["cli"] = cli_version_record(ctx.spec)
        if info.mode:
            methods = detect_methods(paths.code)
            view["methods"] = sorted(methods)
            view["mode_flags"] = mode_contradictions(
                info.mode, methods, interactive=ctx.task.interactive
            )
        write_json_atomic(paths.agent_json, view)
        _classify_agent_error(ctx, view["log"].get("last_error") or "")
    except Exception as err:  # the report is still written without it
        write_json_atomic(paths.agent_json, {"error": f"{type(err).__name__}: {err}"})


def _classify_agent_error(ctx: RunContext, cli_said: str) -> None:
    """An ``agent_error`` that came from the run's infrastructure (the provider refused the
    key, the CLI could not start) says so in the run's error, with the CLI's own words: the
    report then tells it apart from an agent that ran and failed (studies retry it)."""
    info = ctx.info
    if info.status != RunStatus.AGENT_ERROR or info.error:
        return
    info.save(ctx.paths)  # infrastructure_failure reads run.json
    if why := infrastructure_failure(ctx.paths.root):
        said = f"; the CLI said: {cli_said[:300]}" if cli_said and cli_said[:100] not in why else ""
        info.error = f"infrastructure failure: {why}{said}"
        info.save(ctx.paths)


def _launch(
    ctx: RunContext, command: list[str], env: dict[str, str], services: RunServices
) -> AgentProcess:
    """The agent's process, not started: under bubblewrap (as its own user when the harness
    is root) or plain; its preexec joins the run's cgroup (else, with a user of its own, sets
    its process limit). The cgroup and the ``--network services`` parts go on ``services``."""
    paths = ctx.paths
    cgroup = ctx.started.cgroup = services.start(
        Launched(
            "agent's cgroup",
            lambda: Cgroup.create(f"agent2rl-{paths.root.name}", ctx.caps),
            Cgroup.remove,
        )
    ).handle
    pids = ctx.caps.max_pids

    def preexec() -> None:
        if cgroup is not None:
            cgroup.join()
        elif ctx.user is not None and pids is not None:
            set_nproc_limit(pids)

    agent = AgentProcess(command, env, paths.workspace, paths.agent_log, preexec)
    if ctx.sandbox == "bwrap":
        identity = None
        if ctx.user is not None:
            writable = [paths.workspace, paths.code, paths.output]
            writable += [p for p in paths.workspace.iterdir() if p.name[0] == "." or p.is_file()]
            hand_over(ctx.user, writable)
            identity = identity_files(ctx.user, Path(env["HOME"]), paths.sandbox)
        spec = agent_sandbox(
            paths.workspace,
            [paths.data, paths.base_model.parent],
            ctx.model.path,
            agent.env,
            command,
            hide=private_paths(),
            user=ctx.user,
            identity=identity,
            programs=[ctx.spec.binary] if ctx.spec.binary else None,  # a pipeline's own CLI
        )
        if ctx.network == "services":
            spec, command = _confine(ctx, spec, command, services)
        agent.argv = bwrap_argv(spec, command)
    return agent


def _confine(
    ctx: RunContext, spec: SandboxSpec, command: list[str], services: RunServices
) -> tuple[SandboxSpec, list[str]]:
    """Under ``--network services``: start the egress proxy and the package index and model
    hub proxies (unless nothing is allowed) and the bridge into the agent's network
    namespace on ``services``, and confine ``spec`` and ``command``."""
    paths, allow = ctx.paths, _egress_allow(ctx.req)
    if allow:
        ctx.started.egress = services.launch(
            "egress proxy",
            lambda: start_egress_proxy(
                allow,
                paths.egress_log,
                ready_file=paths.sandbox / "egress.json",
                stdout_log=paths.sandbox / "egress.log",
            ),
            lambda service: service.stop(),
        )
        # The package index and the model hub, by name: logged, the task's deny list refused.
        hashes = [h for f in ctx.task.denied_files() if f.is_file() for h in file_digests(f)]
        deny = DenyList(ctx.task.denied_packages, ctx.task.denied_hub_repos, tuple(hashes))
        ctx.started.names = services.launch(
            "package index and model hub proxies",
            lambda: start_name_proxies(paths.record, paths.sandbox, deny),
            lambda proxies: proxies.stop(),
        )
    bridge = ServiceBridge(paths.sandbox / "net", ctx.started.ports().values())
    ctx.started.bridge = services.start(Named("service bridge", bridge)).part
    egress_port = ctx.started.egress.port if ctx.started.egress else None
    spec, command = confine(spec, ctx.started.bridge, command, egress_port=egress_port)
    names_env = ctx.started.names.env() if ctx.started.names else {}
    return replace(spec, env={**spec.env, **names_env}), command


def _egress_allow(req: RunRequest) -> tuple[str, ...]:
    return DEFAULT_ALLOWLIST if req.egress_allow is None else req.egress_allow


def _record_network(ctx: RunContext) -> None:
    """Record what the agent's network was (a step of the run's stop order: after the
    bridge and the proxies, which outlive the agent, stopped)."""
    record = network_record(
        ctx.network,  # resolved: services or host
        ctx.started.ports(),
        allowlist=_egress_allow(ctx.req) if ctx.network == "services" else (),
        egress_log=ctx.paths.egress_log if ctx.started.egress is not None else None,
    )
    write_json_atomic(ctx.paths.network_json, record)


def _supervise(
    ctx: RunContext, command: list[str], env: dict[str, str], guard: RunGuard, services: RunServices
) -> None:
    """Start the agent, record it, stop it at the deadline or at a cap, settle in-flight
    grading. Its marker, cgroup and the processes the sampler sees are told to ``guard``; the
    agent and what watches it are started on ``services``."""
    req, info, paths, console = ctx.req, ctx.info, ctx.paths, ctx.console
    assert ctx.started.ledger is not None
    services.callback("recording the agent's network", _record_network, ctx)
    agent = _launch(ctx, command, env, services)
    recorder = CodeRecorder(paths.code_git, paths.workspace)
    recorder.snapshot("start")
    # Stopped after the agent: its final snapshot is of what the agent left.
    services.start(
        Named("code snapshotter", PeriodicSnapshotter(recorder, interval_s=req.snapshot_interval_s))
    )
    guard.watch_mark(agent.mark)
    if ctx.started.cgroup is not None:
        guard.watch_cgroup(ctx.started.cgroup.dirs.values())
    seen: list[ResourceSampler] = []  # the sampler once it runs: the processes it saw

    def stop_agent(agent: AgentProcess) -> None:
        if agent.poll() is None:
            agent.terminate_tree(seen[0].alive_seen() if seen else (), grace_s=1.0)

    services.launch("agent", lambda: _start_agent(ctx, agent, command), stop_agent)
    guard.watch_pids([agent.pid])
    sampler = ResourceSampler(agent.pid, paths.resources, interval_s=req.sample_interval_s)
    seen.append(services.start(Named("resource sampler", sampler)).part)
    watchdog = Watchdog(
        paths.workspace,
        (paths.data, paths.base_model.parent),
        ctx.caps,
        ctx.started.cgroup,
        agent.pid,
        on_breach=lambda kind, detail: None,  # the loop below polls watchdog.breach
        interval_s=req.watchdog_interval_s,
    )
    services.start(Named("watchdog", watchdog))
    with StatusLine(console, info, ctx.started.ledger) as status:
        told = 0.0  # when the guard was last told the sampler's processes
        while agent.poll() is None and time.time() < info.deadline and watchdog.breach is None:
            status.update()
            if time.time() - told >= req.sample_interval_s:
                guard.watch_pids(p.pid for p in sampler.alive_seen())
                told = time.time()
            time.sleep(0.5)
        info.ended_at = time.time()
        code = agent.poll()
        # The kernel may have OOM-killed the agent between two checks.
        if watchdog.breach is None and code is not None and watchdog.check() == RunStatus.OOM:
            watchdog.breach = RunStatus.OOM
        if watchdog.breach is not None:
            info.status, info.error = watchdog.breach, watchdog.detail
            console.print(f"stopping the agent: {watchdog.detail}")
        elif code is None:
            info.status = RunStatus.DEADLINE
            console.print("deadline reached: stopping the agent")
        else:
            info.agent_exit_code = code
            info.status = RunStatus.COMPLETED if code == 0 else RunStatus.AGENT_ERROR
        if killed := agent.terminate_tree(sampler.alive_seen(), grace_s=req.grace_s):
            console.print(f"killed {killed} agent process(es) that ignored SIGTERM")
        # Each queued evaluation gets its own time: a run ends with every accepted
        # submission graded, or failed with the reason (close_unfinished, after the stop).
        wait_for_in_flight(
            ctx.started.ledger,
            ctx.task.eval_timeout_s + 30,
            lambda n: status.update(note=f"grading {n} in-flight submission(s)"),
        )
    if info.agent_exit_code is None:
        info.agent_exit_code = agent.poll()


def _start_agent(ctx: RunContext, agent: AgentProcess, command: list[str]) -> AgentProcess:
    """Start ``agent``; a command that cannot be executed is the user's :class:`UserError`."""
    try:
        agent.start()
    except OSError as err:
        raise UserError(f"cannot start agent {ctx.spec.name} ({command[0]}): {err}") from None
    return agent


def _finalize(ctx: RunContext) -> RunMetrics | None:
    """Stage 4: the contamination check (the agent is gone: its workspace no longer changes),
    then the run's metrics once, its report and its results row."""
    if ctx.info.start is not None:
        try:
            with ctx.console.status("checking the workspace for private items"):
                found = check_run(ctx.paths, ctx.task, ctx.prepared)
            if found.flagged:
                ctx.console.print(
                    f"[red]contamination:[/] {found.matched_items} private item(s) found in the "
                    "workspace or the egress log (see the report; the score is unchanged)"
                )
            if found.unchecked:
                ctx.console.print(
                    "[red]the contamination check could not read everything (run unchecked,"
                    f" counted as flagged):[/] {'; '.join(found.unchecked_reasons[:3])}"
                )
        except Exception as err:  # fail closed: the run is unchecked, never clean
            record_check_failure(ctx.paths, ctx.task.name, err)
            ctx.console.print(f"[red]the contamination check failed (run unchecked): {err}[/]")
    try:
        metrics = write_report(ctx.paths)
        record_run(ctx.paths.root.parent, ctx.paths.root, metrics)
    except Exception as err:  # a report bug must not hide the run's own outcome
        ctx.console.print(f"[red]could not write the report: {err}[/]")
        return None
    return metrics
