"""What the stages of one run share, so that each takes one argument: :class:`RunContext`,
what stage 1 resolved from the :class:`~agent2rl.orchestration.request.RunRequest`, and its
:class:`Started`, handles to what the later stages started (stopping those is
:class:`~agent2rl.orchestration.services.RunServices`'s work). The types are only named
here: typing the context imports none of the packages behind them."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
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
    from agent2rl.orchestration.request import RunRequest
    from agent2rl.rundir import RunInfo, RunPaths
    from agent2rl.sandbox import AgentUser, Cgroup, NameProxies, ResourceCaps, ServiceBridge
    from agent2rl.settings import Settings
    from agent2rl.tasks import Task


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
class Started:
    """Handles to what a run's stages started, each None until its stage starts it: the
    ``ledger``, ``grading`` service and ``grading_token`` and the rollout service's
    ``env_vars`` once the baseline is measured; the rest when the agent is launched."""

    ledger: Ledger | None = None
    grading: ServiceHandle | None = None
    grading_token: str = ""
    rollout: ServiceHandle | None = None
    #: what the agent's environment gets besides the workspace contract (rollout service)
    env_vars: dict[str, str] = field(default_factory=dict)
    cgroup: Cgroup | None = None
    #: the LLM agent's metering proxy, and under ``--network services`` the bridge into the
    #: agent's network namespace and the egress proxy, while the agent runs
    metering: MeteringProxy | None = None
    bridge: ServiceBridge | None = None
    egress: ServiceHandle | None = None
    #: under ``--network services``: the package index and model hub proxies
    names: NameProxies | None = None

    def ports(self) -> dict[str, int]:
        """The run's own services the agent may reach (name -> port on the host's loopback);
        the grading service is started first, so it is always there."""
        assert self.grading is not None
        ports = {"grading": self.grading.port}
        for name, handle in (("rollout", self.rollout), ("metering", self.metering),
                             ("egress", self.egress)):  # fmt: skip
            if handle is not None:
                ports[name] = handle.port
        return ports | (self.names.ports() if self.names is not None else {})


@dataclass
class RunContext:
    """One run's resolved parts (see the module docstring): everything up to ``llm`` before
    the run directory exists (a bad request writes nothing); ``paths``, ``info`` and
    ``user`` with it. ``info`` is the one part that changes as the run goes (its status,
    start, deadline); what the stages start goes in ``started``."""

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
    started: Started = field(default_factory=Started)
