"""The one run request, built by ``agent2rl run``, :func:`agent2rl.run` and a study's spec
(its attempt reads it back from JSON). A flag wrong on any machine is a :class:`UserError`
when it is built (pydantic lets it through unwrapped); what needs this machine or the task
(bubblewrap, the model, a validation split) is checked by :func:`~.run.resolve_run`."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from agent2rl.errors import UserError
from agent2rl.inference.backend import BackendConfig
from agent2rl.rollout.app import RolloutLimits

if TYPE_CHECKING:
    from agent2rl.tasks import Task

SANDBOX_MODES = ("auto", "bwrap", "none")
NETWORK_MODES = ("auto", "host", "services")


class RunRequest(BaseModel):
    """One run, as asked for: its fields are the flags of ``agent2rl run`` (the grader's
    flat, ``backend`` being ``--backend``; :meth:`backend_config` builds its config); the
    timing knobs exist for tests and slow machines. The agent's caps (``memory``,
    ``max_pids``, ``disk_quota``, ``max_files``) None: the defaults of ``run.default_caps``;
    ``egress_allow`` None: the default allowlist, empty: no egress at all."""

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
    #: ``--allow-provider-tools`` (an agent spec with ``provider_tools`` turns it on too)
    allow_provider_tools: bool = False
    memory: int | None = None
    max_pids: int | None = None
    disk_quota: int | None = None
    max_files: int | None = None
    #: the share of this machine the caps' defaults are of (a study's run on a shared node)
    machine_share: float = 1.0
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
    #: the grading protocol: ``private`` (the paper's) or ``validation`` (agent2rl.grading.final)
    feedback: str = "private"

    @field_validator("sandbox", "network", "feedback")
    @classmethod
    def _choice(cls, value: str, field: ValidationInfo) -> str:
        from agent2rl.grading.final import FEEDBACK_PROTOCOLS

        flag = field.field_name
        use = {"sandbox": SANDBOX_MODES, "network": NETWORK_MODES}.get(flag, FEEDBACK_PROTOCOLS)
        if value not in use:
            raise UserError(f"bad --{flag} {value!r}: use {', '.join(use[:-1])} or {use[-1]}")
        return value

    @field_validator("mode", "instructions")
    @classmethod
    def _known(cls, value: str, field: ValidationInfo) -> str:
        from agent2rl.agents.modes import get_mode
        from agent2rl.workspace.builder import instructions_template

        # the mode Registry's message, or the instruction styles'
        check = {"mode": get_mode, "instructions": instructions_template}
        check[str(field.field_name)](value)
        return value

    @model_validator(mode="after")
    def _known_agent(self) -> RunRequest:
        # After every flag's own check, as before the request model: a bad flag is named
        # first, the agent (the Registry's message, or a spec file that cannot be read) last.
        from agent2rl.agents.spec import get_agent

        get_agent(self.agent)
        return self

    @field_validator("token_budget", "max_pids")
    @classmethod
    def _count(cls, n: int | None, field: ValidationInfo) -> int | None:
        if n is not None and field.field_name == "token_budget" and n <= 0:
            raise UserError(f"--token-budget {n} must be a positive token count")
        if n is not None and field.field_name == "max_pids" and n < 16:
            raise UserError(f"--max-procs {n} is too small: an agent needs at least 16")
        return n

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


def grading_backend(requested: BackendConfig, task: Task, model: str, path: Path) -> BackendConfig:
    """``requested`` completed for grading ``task`` with base model ``model`` (at ``path``):
    its end-of-sequence ids end every graded completion, and its name picks the decoding
    (``--protocol``); a submission's own generation config is never read. An output limit
    the user set in the task's options wins over the protocol's table."""
    limit = getattr(task.config, "max_new_tokens", 0)
    return requested.for_run(task.name, model, path, limit)
