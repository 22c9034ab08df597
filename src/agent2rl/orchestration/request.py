"""The one run request: what ``agent2rl run``, :func:`agent2rl.run`, a study's spec and a
study's attempt all build and read (a study writes it as JSON, its attempt reads it back).

Every flag a user can get wrong without touching the machine (sandbox, network, mode, agent,
feedback, instructions, token budget, process cap) is checked when the request is built, with
the flag's own :class:`~agent2rl.errors.UserError` (pydantic lets it through unwrapped); what
needs the machine or the task (bubblewrap, the model, a validation split) is checked by
:func:`~agent2rl.orchestration.run.resolve_run`.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator

from agent2rl.errors import UserError
from agent2rl.inference.backend import BackendConfig
from agent2rl.rollout.app import RolloutLimits

SANDBOX_MODES = ("auto", "bwrap", "none")
NETWORK_MODES = ("auto", "host", "services")


class RunRequest(BaseModel):
    """One run, as asked for. Timing knobs exist for tests and slow machines.

    The grading backend's fields are flat (``backend`` is its kind, as ``--backend``), so the
    JSON form of a request is the CLI's flags; :meth:`backend_config` builds the
    :class:`~agent2rl.inference.backend.BackendConfig`. ``gpu_memory_utilization`` None: the
    GPU layout's share (0.85 without one). ``memory``, ``max_pids``, ``disk_quota`` and
    ``max_files`` cap the agent (None: the defaults of
    :func:`~agent2rl.orchestration.run.default_caps`); ``network`` is ``host``, ``services``
    (only the run's own services and an allowlisted egress proxy) or ``auto`` (``services``
    where bubblewrap can make a network namespace); ``egress_allow`` None is
    :data:`~agent2rl.sandbox.egress.DEFAULT_ALLOWLIST`, empty is no egress at all.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    task: str
    agent: str
    model: str
    budget_s: float
    runs_dir: Path = Path("runs")
    seed: int = 0
    sandbox: str = "auto"
    backend: str = "auto"
    dtype: str = "auto"
    #: ``--protocol``: how the grader decodes (:mod:`agent2rl.inference.decoding`)
    protocol: str = "auto"
    gpu_memory_utilization: float | None = None
    max_model_len: int | None = None
    tensor_parallel_size: int = 1
    task_options: dict[str, str] = Field(default_factory=dict)
    driver: str | None = None
    driver_base_url: str | None = None
    mode: str = "free"
    #: the agent's instructions.md: neutral, or reference (agent2rl.workspace.instructions)
    instructions: str = "neutral"
    token_budget: int | None = None
    #: let the LLM provider's own tools (web search, URL fetches) through the metering proxy,
    #: each use recorded (an agent spec with ``provider_tools`` turns it on too)
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
    rollout_limits: RolloutLimits = Field(default_factory=RolloutLimits)
    extra_env: dict[str, str] = Field(default_factory=dict)
    #: appended to the agent's instructions.md: its GPUs and the memory it may use on them
    gpu_note: str | None = None
    #: the grading protocol: ``private`` (the paper's) or ``validation`` (scores on the
    #: validation split, one submission graded on the private split at the end:
    #: agent2rl.grading.final)
    feedback: str = "private"

    @field_validator("sandbox")
    @classmethod
    def _sandbox(cls, mode: str) -> str:
        if mode not in SANDBOX_MODES:
            raise UserError(f"bad --sandbox {mode!r}: use auto, bwrap or none")
        return mode

    @field_validator("network")
    @classmethod
    def _network(cls, mode: str) -> str:
        if mode not in NETWORK_MODES:
            raise UserError(f"bad --network {mode!r}: use auto, host or services")
        return mode

    @field_validator("agent")
    @classmethod
    def _agent(cls, agent: str) -> str:
        from agent2rl.agents.spec import get_agent

        get_agent(agent)  # the agent Registry's message, or a spec file that cannot be read
        return agent

    @field_validator("mode")
    @classmethod
    def _mode(cls, mode: str) -> str:
        from agent2rl.agents.modes import get_mode

        get_mode(mode)  # the mode Registry's message
        return mode

    @field_validator("instructions")
    @classmethod
    def _instructions(cls, style: str) -> str:
        from agent2rl.workspace.builder import instructions_template

        instructions_template(style)
        return style

    @field_validator("feedback")
    @classmethod
    def _feedback(cls, feedback: str) -> str:
        from agent2rl.grading.final import FEEDBACK_PROTOCOLS

        if feedback not in FEEDBACK_PROTOCOLS:
            raise UserError(f"bad --feedback {feedback!r}: use {' or '.join(FEEDBACK_PROTOCOLS)}")
        return feedback

    @field_validator("token_budget")
    @classmethod
    def _token_budget(cls, tokens: int | None) -> int | None:
        if tokens is not None and tokens <= 0:
            raise UserError(f"--token-budget {tokens} must be a positive token count")
        return tokens

    @field_validator("max_pids")
    @classmethod
    def _max_pids(cls, pids: int | None) -> int | None:
        if pids is not None and pids < 16:
            raise UserError(f"--max-procs {pids} is too small: an agent needs at least 16")
        return pids

    def backend_config(self) -> BackendConfig:
        """The grader's backend as asked for (completed per run by ``for_run``)."""
        return backend_config(
            self.backend, self.dtype, self.protocol, self.gpu_memory_utilization,
            self.max_model_len, self.tensor_parallel_size,
        )  # fmt: skip

    def deadline(self, start: float) -> float:
        """The run's deadline (epoch seconds) for a clock started at ``start``: the one place
        the budget becomes a time, recorded as ``RunInfo.deadline``."""
        return start + self.budget_s


def backend_config(
    kind: str = "auto",
    dtype: str = "auto",
    protocol: str = "auto",
    gpu_memory_utilization: float | None = None,
    max_model_len: int | None = None,
    tensor_parallel_size: int = 1,
) -> BackendConfig:
    """The :class:`BackendConfig` of the grading flags (``run`` and ``eval`` share them);
    ``gpu_memory_utilization`` None is vLLM's dedicated-GPU default."""
    share: dict[str, float] = {}
    if gpu_memory_utilization is not None:  # else BackendConfig's own (a GPU of its own)
        share["gpu_memory_utilization"] = gpu_memory_utilization
    return BackendConfig(
        kind=kind, dtype=dtype, max_model_len=max_model_len,
        tensor_parallel_size=tensor_parallel_size, protocol=protocol, **share,
    )  # fmt: skip


__all__ = ["NETWORK_MODES", "SANDBOX_MODES", "RunRequest", "backend_config"]
