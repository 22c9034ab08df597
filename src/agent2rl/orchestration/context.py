"""What one run is: the request, and the context every stage of the run shares.

:class:`RunRequest` is what ``agent2rl run`` asks for. :class:`RunContext` holds what the
stages resolved from it (task, agent, model, sandbox, caps...) and handles to what they
started (the grading service, the rollout service, the ledger), so that each stage takes one
argument instead of a dozen; starting and stopping those is the work of
:class:`~agent2rl.orchestration.services.RunServices`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console

from agent2rl.agents.drivers import Driver
from agent2rl.agents.spec import AgentSpec
from agent2rl.analysis import RunMetrics
from agent2rl.child_process import ServiceHandle
from agent2rl.dataset import PreparedTask
from agent2rl.grading.ledger import Ledger
from agent2rl.inference.backend import BackendConfig
from agent2rl.metering import MeteringProxy
from agent2rl.models.resolve import ModelRef
from agent2rl.rollout import RolloutLimits
from agent2rl.rundir import RunInfo, RunPaths
from agent2rl.sandbox import AgentUser, Cgroup, NameProxies, ResourceCaps, ServiceBridge
from agent2rl.settings import Settings
from agent2rl.tasks import Task

SANDBOX_MODES = ("auto", "bwrap", "none")
NETWORK_MODES = ("auto", "host", "services")


@dataclass
class RunRequest:
    """What ``agent2rl run`` asks for. Timing knobs exist for tests and slow machines.

    ``memory``, ``max_pids``, ``disk_quota`` and ``max_files`` cap the agent (None: the defaults of
    :func:`~agent2rl.orchestration.run.default_caps`); ``network`` is ``host`` (the host's
    network), ``services`` (only the run's own services, and an allowlisted egress proxy) or
    ``auto`` (``services`` under bubblewrap where it can make a network namespace, else
    ``host``); ``egress_allow`` are the hosts the egress proxy lets a ``services`` agent reach
    (None: :data:`~agent2rl.sandbox.egress.DEFAULT_ALLOWLIST`; empty: no egress at all).
    """

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
    #: the agent's instructions.md: neutral, or reference (agent2rl.workspace.instructions)
    instructions: str = "neutral"
    token_budget: int | None = None
    #: let the LLM provider's own tools (web search, URL fetches) through the metering proxy,
    #: each use recorded (``--allow-provider-tools``; an agent spec with ``provider_tools``
    #: turns it on too)
    allow_provider_tools: bool = False
    memory: int | None = None
    max_pids: int | None = None
    disk_quota: int | None = None
    max_files: int | None = None
    network: str = "auto"
    egress_allow: tuple[str, ...] | None = None
    grace_s: float = 10.0
    snapshot_interval_s: float = 60.0
    sample_interval_s: float = 5.0
    watchdog_interval_s: float = 2.0
    max_submission_bytes: int | None = None
    rollout_limits: RolloutLimits = field(default_factory=RolloutLimits)
    extra_env: dict[str, str] = field(default_factory=dict)
    #: appended to the agent's instructions.md: its GPUs and the memory it may use on them
    gpu_note: str | None = None
    #: the grading protocol: ``private`` (the paper's) or ``validation`` (scores on the
    #: validation split, one submission graded on the private split at the end:
    #: agent2rl.grading.final)
    feedback: str = "private"


@dataclass
class RunOutcome:
    run_dir: Path
    status: str
    metrics: RunMetrics | None
    """None when the report could not be written."""


@dataclass
class LlmAccess:
    """An LLM agent's driver and the real key only the metering proxy will hold."""

    driver: Driver
    key: str


@dataclass
class RunContext:
    """One run's resolved parts and started services (see the module docstring).

    Filled in order: everything up to ``llm`` before the run directory exists (a bad request
    writes nothing); ``paths``, ``info`` and ``user`` with it; ``ledger``, ``grading``,
    ``grading_token`` and the rollout service's ``env_vars`` once the baseline is measured and
    the services run; ``cgroup`` when the agent is launched.
    """

    req: RunRequest
    settings: Settings
    console: Console
    task: Task
    prepared: PreparedTask
    spec: AgentSpec
    model: ModelRef
    backend: BackendConfig
    sandbox: str
    network: str
    caps: ResourceCaps
    llm: LlmAccess | None
    paths: RunPaths
    info: RunInfo
    user: AgentUser | None = None
    cgroup: Cgroup | None = None
    ledger: Ledger | None = None
    grading: ServiceHandle | None = None
    grading_token: str = ""
    rollout: ServiceHandle | None = None
    #: what the agent's environment gets besides the workspace contract (rollout service)
    env_vars: dict[str, str] = field(default_factory=dict)
    #: the LLM agent's metering proxy, and under ``--network services`` the bridge into the
    #: agent's network namespace and the egress proxy, while the agent runs
    metering: MeteringProxy | None = None
    bridge: ServiceBridge | None = None
    egress: ServiceHandle | None = None
    #: under ``--network services``: the package index and model hub proxies
    names: NameProxies | None = None
