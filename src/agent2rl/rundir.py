"""The layout of one run directory, shared by every stage that reads or writes it.

::

    runs/<run_id>/
      run.json              RunInfo: task, agent, model, budget, clock, status (atomic writes;
                            RunIdentity: what was run; RunStatus: how it stands)
      ledger.db             SQLite (WAL): meta, submissions, rejections — written by the grader
      agent.log             the agent's stdout+stderr
      workspace/            the only part the agent sees
        code/ output/ data/ models/base/ description.md instructions.md run_meta.json
      grading/              service.log, service.json (port), baseline/, submissions/<id>/
      env/                  a level-3 run's rollout service: service.log, service.json (port, pid)
      record/               code.git (snapshots), resources.jsonl (CPU/RAM timeline),
                            env.db (level 3: every episode and step played for training)
      report/               metrics.json, report.md, report.html, diffs/
      sandbox/              what the agent's sandbox binds from outside the workspace

Nothing outside ``workspace/`` is mounted into the agent's sandbox.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from agent2rl.files import SubPath, read_json, write_json_atomic

#: The format of ``run.json`` (and of ``report/metrics.json``, which carries the same key):
#: a file without ``schema_version`` was written before it existed and reads as version 1.
#: Version 2 added only the key itself.
RUN_SCHEMA_VERSION = 2


class RunStatus(StrEnum):
    """How a run stands (``run.json``'s ``status``). String-valued: a member *is* its string
    (``RunStatus.RUNNING == "running"``, JSON writes ``"running"``), so run directories and
    results.db rows written before the enum existed read the same."""

    PREPARING = "preparing"
    """Resolved, preparing task data, workspace and baseline; the budget clock not started."""
    RUNNING = "running"
    """The agent is running (the budget clock started)."""
    COMPLETED = "completed"
    """The agent exited 0 before the deadline."""
    DEADLINE = "deadline"
    """The agent was killed at the deadline."""
    AGENT_ERROR = "agent_error"
    """The agent exited non-zero."""
    OOM = "oom"
    """The agent went over its memory cap."""
    DISK_QUOTA = "disk_quota"
    """The agent's workspace went over its quota."""
    INTERRUPTED = "interrupted"
    """Stopped by a signal or the user (or its harness died: ``agent2rl report`` closes it)."""
    HARNESS_ERROR = "harness_error"
    """The harness itself failed."""

    @property
    def live(self) -> bool:
        """The run's harness is (or should be) still working on it."""
        return self in LIVE_RUN_STATUSES


#: statuses of a run not yet ended: a run.json left in one belongs to a harness that died
LIVE_RUN_STATUSES = frozenset({RunStatus.PREPARING, RunStatus.RUNNING})
#: statuses of a run whose agent ran to an end the run's rules define (not the harness's
#: failure, not an interruption)
FINISHED_RUN_STATUSES = (
    frozenset(RunStatus) - LIVE_RUN_STATUSES - {RunStatus.INTERRUPTED, RunStatus.HARNESS_ERROR}
)


class RunIdentity(BaseModel):
    """What was run, the fields every per-run record shares: ``run.json`` (:class:`RunInfo`,
    :meth:`RunInfo.identity`), ``metrics.json`` (:class:`~agent2rl.analysis.RunMetrics`
    extends this model, so it has the fields once, flat in its JSON) and the results ledger
    (:func:`~agent2rl.analysis.dashboard.results.results_row` takes its columns from here).

    Frozen. ``task_version`` is None only in records written before it existed; ``driver``
    (the LLM that drives an agent) and ``mode`` (its operating mode) are None for agents
    without an LLM. ``feedback`` is the grading protocol (:mod:`agent2rl.grading.final`):
    runs of the two are never pooled as one; a record written before it existed reads as
    ``private``.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    run_id: str
    task: str
    task_version: str | None = None
    agent: str
    driver: str | None = None
    mode: str | None = None
    model: str
    feedback: str = "private"
    provider_tools: bool = False
    """The LLM provider's own tools (web search, URL fetches) were allowed through the
    metering proxy (``--allow-provider-tools``, or an agent spec that turns them on): such a
    run's agent could reach the web past the deny lists, each use recorded in
    ``record/provider_tools.jsonl``. False in a record written before it existed."""
    sandbox: str | None = None
    """The sandbox the agent actually ran in: ``bwrap``, or ``none`` (asked for, or ``auto``
    on a machine without bubblewrap). None in a record written before it was part of the
    identity. Runs of different confinement are never pooled as one (the cross-run
    analyses group them apart: :func:`agent2rl.analysis.dashboard.runset.isolation_label`)."""
    network: str | None = None
    """The agent's network as it ran: ``services`` (its own namespace, the harness's
    services and the egress proxy only) or ``host`` (the machine's network, loopback
    included). None as ``sandbox``."""

    @classmethod
    def of(cls, record: Any) -> RunIdentity:
        """The identity fields of any record carrying them as attributes."""
        return cls(**{name: getattr(record, name) for name in cls.model_fields})

    def identity(self) -> RunIdentity:
        """Just the identity (of a subclass such as RunMetrics: without its other fields)."""
        return RunIdentity.of(self)


@dataclass(frozen=True)
class RunPaths:
    """Paths inside one run directory (nothing is created by constructing it)."""

    root: Path

    run_json = SubPath("run.json")
    ledger = SubPath("ledger.db")
    agent_log = SubPath("agent.log")
    workspace = SubPath("workspace")
    code = SubPath("workspace", "code")
    output = SubPath("workspace", "output")
    data = SubPath("workspace", "data")
    base_model = SubPath("workspace", "models", "base")
    grading = SubPath("grading")
    service_json = SubPath("grading", "service.json")
    service_log = SubPath("grading", "service.log")
    baseline_dir = SubPath("grading", "baseline")
    record = SubPath("record")
    code_git = SubPath("record", "code.git")
    resources = SubPath("record", "resources.jsonl")
    llm_usage = SubPath("record", "llm_usage.jsonl")
    #: the agent's own view, written after it stops: log summary, methods, mode flags
    agent_json = SubPath("record", "agent.json")
    #: the agent's network as it ran, with the egress proxy's summary (``services``)
    network_json = SubPath("record", "network.json")
    #: every LLM exchange the metering proxy relayed (JSON lines)
    transcript = SubPath("record", "transcript.jsonl")
    #: ``--network services``: every request the egress proxy saw (JSON lines)
    egress_log = SubPath("record", "egress.jsonl")
    env_db = SubPath("record", "env.db")
    env_service = SubPath("env")
    report = SubPath("report")
    #: the run's metrics (:class:`~agent2rl.analysis.RunMetrics`), written with its report
    metrics_json = SubPath("report", "metrics.json")
    #: files the harness binds into the agent's sandbox from outside the workspace: the
    #: passwd/group files naming the agent's user, the service sockets of ``--network services``
    sandbox = SubPath("sandbox")

    def submission_dir(self, submission_id: int) -> Path:
        return self.root / "grading" / "submissions" / f"{submission_id:04d}"


@dataclass
class RunInfo:
    """The contents of ``run.json``: what was run and how it ended.

    ``start``/``deadline`` are epoch seconds of the budget clock (the baseline is measured
    before ``start``). ``status`` is a :class:`RunStatus` (a plain string once read back).
    ``schema_version``: the format of the file it was read from (1: written before the key
    existed); :meth:`save` writes :data:`RUN_SCHEMA_VERSION`.
    """

    run_id: str
    task: str
    task_version: str
    level: int
    agent: str
    model: str
    budget_s: float
    seed: int
    sandbox: str
    created_at: float
    driver: str | None = None
    model_path: str | None = None
    start: float | None = None
    deadline: float | None = None
    ended_at: float | None = None
    status: str = RunStatus.PREPARING
    agent_exit_code: int | None = None
    eval_hash: str | None = None
    error: str | None = None
    #: the run's ``--task-opt`` values and grading backend (a BackendConfig dict)
    task_options: dict[str, Any] | None = None
    backend: dict[str, Any] | None = None
    #: the operating mode of an LLM agent (free, sft-only, rl-oriented, multi) and its
    #: optional token budget through the metering proxy
    mode: str | None = None
    token_budget: int | None = None
    #: how the agent was confined: the uid it ran as (None: the harness's own user), its
    #: network policy (``host`` or ``services``), its caps (ResourceCaps as a dict) and what
    #: enforced them (``cgroup2``, ``cgroup1`` or ``none``: see agent2rl.sandbox.limits)
    agent_uid: int | None = None
    network: str | None = None
    caps: dict[str, Any] | None = None
    cap_mechanism: str | None = None
    #: the process that runs the run (pid, start_ticks, host): lets ``agent2rl report`` tell
    #: a run whose harness died from one still going (agent2rl.orchestration.recover)
    harness: dict[str, Any] | None = None
    #: the grading protocol: ``private`` (the paper's) or ``validation`` (agent2rl.grading.final)
    feedback: str = "private"
    #: the LLM provider's own tools were allowed (see RunIdentity.provider_tools)
    provider_tools: bool = False
    schema_version: int = RUN_SCHEMA_VERSION

    def identity(self) -> RunIdentity:
        """What was run (:class:`RunIdentity`), as every record of the run carries it."""
        return RunIdentity.of(self)

    def save(self, paths: RunPaths) -> None:
        """Write ``run.json`` atomically, in the current format (:data:`RUN_SCHEMA_VERSION`)."""
        self.schema_version = RUN_SCHEMA_VERSION
        write_json_atomic(paths.run_json, self.__dict__)

    @classmethod
    def load(cls, paths: RunPaths) -> RunInfo:
        """Read ``run.json``; keys this version does not know are ignored, a file without
        ``schema_version`` reads as version 1."""
        data = read_json(paths.run_json)
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        known.setdefault("schema_version", 1)
        return cls(**known)
