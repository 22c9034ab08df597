"""A study file: the TOML matrix of runs, and its expansion into run slots.

A study is tasks x models x agents (x drivers x modes for LLM agents) x repeats, every run
with the same budget and settings. docs/studies.md lists a study file's keys (the fields of
:class:`StudySpec`) with an example: repeat ``r`` runs with seed ``seed + r``, and an LLM
agent's ``[agent_cells."name"]`` gives it its own drivers and/or modes instead of the
study's (a matrix that is not a full cross product, e.g. the paper's).

Drivers and modes apply to agents that use an LLM; an agent without one runs once per
(task, model, repeat) with neither. A :class:`RunSlot` is one cell of the matrix at one
repeat: the unit a study schedules, retries and counts.
"""

from __future__ import annotations

import hashlib
import json
import tomllib
from dataclasses import dataclass
from itertools import product
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from agent2rl.errors import UserError
from agent2rl.formatting import format_duration
from agent2rl.orchestration.request import RunRequest
from agent2rl.settings import parse_duration


class AgentCells(BaseModel):
    """One agent's own drivers and/or modes in a study (``[agent_cells."name"]``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    drivers: list[str] | None = None
    modes: list[str] | None = Field(default=None, min_length=1)


class StudySpec(BaseModel):
    """A study file, validated. Unknown keys are an error (a misspelt key must not be
    silently ignored); docs/studies.md says what each key sets. The settings its runs share
    are checked by the run request (:meth:`request`, on :func:`load_study`) with its
    messages; the grader's ``backend`` and ``protocol`` here (a run checks them where it
    runs: vLLM)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1)
    tasks: list[str] = Field(min_length=1)
    agents: list[str] = Field(min_length=1)
    models: list[str] = Field(default_factory=lambda: ["tiny"], min_length=1)
    drivers: list[str] = Field(default_factory=list)
    modes: list[str] = Field(default_factory=lambda: ["free"], min_length=1)
    repeats: int = Field(default=1, ge=1, le=1000)
    budget: str
    seed: int = 0
    sandbox: str = "auto"
    backend: Literal["auto", "vllm", "transformers"] = "auto"
    protocol: Literal["auto", "reference", "agent2rl"] = "auto"
    feedback: str = "private"
    instructions: str = "neutral"
    allow_provider_tools: bool = False
    token_budget: int | None = Field(default=None, gt=0)
    cpus_per_run: float = Field(default=1.0, gt=0)
    gpus_per_run: float | Literal["auto"] = "auto"
    task_options: dict[str, dict[str, str | int | float | bool]] = Field(default_factory=dict)
    agent_cells: dict[str, AgentCells] = Field(default_factory=dict)

    def drivers_for(self, agent: str) -> list[str | None]:
        """The drivers an LLM agent runs with: its ``agent_cells`` entry's, else the study's
        (``[None]``: the agent's default driver)."""
        cells = self.agent_cells.get(agent)
        drivers = cells.drivers if cells is not None and cells.drivers is not None else self.drivers
        return list(drivers) or [None]

    def modes_for(self, agent: str) -> list[str]:
        """The modes an LLM agent runs in: its ``agent_cells`` entry's, else the study's."""
        cells = self.agent_cells.get(agent)
        return list(cells.modes if cells is not None and cells.modes else self.modes)

    @field_validator("budget")
    @classmethod
    def _budget(cls, value: str) -> str:
        parse_duration(value)  # UserError -> a validation error naming the key
        return value

    @property
    def budget_s(self) -> float:
        return parse_duration(self.budget)

    def request(self, slot: RunSlot, study_dir: Path) -> RunRequest:
        """The run request of ``slot``, its run directory under ``study_dir``. An agent
        without an LLM (``slot.mode`` None) runs in the default mode with no token budget."""
        return RunRequest(
            task=slot.task, agent=slot.agent, model=slot.model, budget_s=self.budget_s,
            runs_dir=study_dir, seed=slot.seed, sandbox=self.sandbox, backend=self.backend,
            protocol=self.protocol, feedback=self.feedback, instructions=self.instructions,
            allow_provider_tools=self.allow_provider_tools,
            task_options=self.options_for(slot.task), driver=slot.driver,
            mode=slot.mode or "free",
            token_budget=self.token_budget if slot.mode is not None else None,
        )  # fmt: skip

    def options_for(self, task: str) -> dict[str, str]:
        """The ``--task-opt`` values of ``task`` as strings (TOML numbers and booleans too)."""
        raw = self.task_options.get(task, {})
        return {k: (str(v).lower() if isinstance(v, bool) else str(v)) for k, v in raw.items()}

    def run_settings(self) -> dict[str, Any]:
        """What every run of the study shares. A study directory keeps these fixed: the
        matrix may grow between two ``study run`` calls, the settings may not (runs under
        other settings would not be comparable)."""
        keep = ("budget", "seed", "sandbox", "backend", "token_budget", "task_options")
        settings = {k: getattr(self, k) for k in keep} | {"budget_s": self.budget_s}
        # Keys added later enter only when set away from their default, so the settings
        # hash of a study directory made before them stays the same.
        later = {
            "protocol": "auto",
            "feedback": "private",
            "instructions": "neutral",
            "allow_provider_tools": False,
        }
        return settings | {k: getattr(self, k) for k, d in later.items() if getattr(self, k) != d}

    def settings_hash(self) -> str:
        blob = json.dumps(self.run_settings(), sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class RunSlot:
    """One run of the matrix: a cell (task, model, agent, driver, mode) at one repeat.

    ``driver`` and ``mode`` are None for an agent without an LLM (and ``driver`` None for an
    LLM agent on its default driver). ``key`` names the slot in the study's state database.
    """

    task: str
    model: str
    agent: str
    driver: str | None
    mode: str | None
    repeat: int
    seed: int

    @property
    def key(self) -> str:
        cell = "/".join((self.task, self.model, self.agent, self.driver or "-", self.mode or "-"))
        return f"{cell}#r{self.repeat}"

    @property
    def label(self) -> str:
        """Short, for progress lines: ``arith-lite reference-sft r1`` (+ driver, mode)."""
        agent = Path(self.agent).stem if self.agent.endswith(".toml") else self.agent
        extra = " ".join(x for x in (self.driver, self.mode) if x)
        model = "" if self.model == "tiny" else f" {self.model}"
        return f"{self.task} {agent}{' ' + extra if extra else ''}{model} r{self.repeat}"


def load_study(path: Path) -> StudySpec:
    """Read and validate a study file. Agent spec paths are made absolute (relative to the
    study file), so that the study runs the same from any working directory.

    Raises :class:`UserError` naming the problem: a missing or unreadable file, one that is
    not UTF-8, bad TOML, a missing or unknown key, a bad value.
    """
    path = Path(path).expanduser()
    try:
        raw = tomllib.loads(path.read_bytes().decode("utf-8"))
    except FileNotFoundError:
        raise UserError(
            f"no study file at {path}: write one (see `agent2rl study --help`)"
        ) from None
    except IsADirectoryError:
        raise UserError(f"{path} is a directory: pass the study file (TOML)") from None
    except OSError as err:
        raise UserError(f"cannot read study file {path}: {err.strerror}") from None
    except UnicodeDecodeError as err:
        raise UserError(
            f"study file {path} is not UTF-8 text (byte {err.start}): save it as UTF-8"
        ) from None
    except tomllib.TOMLDecodeError as err:
        raise UserError(f"{path} is not valid TOML: {err}") from None
    agents = raw.get("agents")
    if isinstance(agents, list):
        raw["agents"] = [_agent_ref(a, path.parent) for a in agents]
    try:
        spec = StudySpec.model_validate(raw)
        spec.request(expand(spec)[0], path.parent)  # the settings the runs share
        return spec
    except UserError as err:  # refused by the run request, with its message
        raise UserError(f"bad study file {path}: {err}") from None
    except ValidationError as err:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'file'}: {e['msg']}" for e in err.errors()
        )
        raise UserError(f"bad study file {path}: {problems}") from None


def _agent_ref(agent: Any, base: Path) -> Any:
    """An agent name stays a name; a ``.toml`` path becomes absolute (relative to ``base``)."""
    if isinstance(agent, str) and agent.endswith(".toml"):
        p = Path(agent).expanduser()
        return str((p if p.is_absolute() else base / p).resolve())
    return agent


def expand(spec: StudySpec) -> list[RunSlot]:
    """The study's runs, in a stable order (task, model, agent, driver, mode, repeat).

    An agent without an LLM gets one cell per (task, model) whatever ``drivers`` and
    ``modes`` say; an LLM agent gets drivers x modes (``drivers = []``: its default driver).
    Agent kinds are read from their specs, so an unknown agent raises :class:`UserError`.
    """
    from agent2rl.agents.spec import get_agent

    slots: list[RunSlot] = []
    for task, model, agent in product(spec.tasks, spec.models, spec.agents):
        if get_agent(agent).uses_llm:
            cells = list(product(spec.drivers_for(agent), spec.modes_for(agent)))
        else:
            cells = [(None, None)]
        for (driver, mode), r in product(cells, range(spec.repeats)):
            slots.append(RunSlot(task, model, agent, driver, mode, r, spec.seed + r))
    return slots


def validate(spec: StudySpec) -> list[RunSlot]:
    """Check everything a run would refuse, before any run starts, and return the slots.

    Tasks and their options, agents, modes, drivers (and that their keys are set here),
    duplicates in the lists. Models are not resolved here: on a cluster they are fetched
    where the runs execute. Raises :class:`UserError` for the first problem found.
    """
    from agent2rl.agents.drivers import driver_for, real_key
    from agent2rl.agents.modes import get_mode
    from agent2rl.agents.spec import get_agent
    from agent2rl.tasks import get_task

    for key in ("tasks", "agents", "models", "drivers", "modes"):
        values = getattr(spec, key)
        if len(set(values)) != len(values):
            raise UserError(f"study {spec.name}: {key} lists a value twice: {values}")
    for key, listed in (("task_options", "tasks"), ("agent_cells", "agents")):
        if unknown := set(getattr(spec, key)) - set(getattr(spec, listed)):
            raise UserError(
                f"study {spec.name}: {key} for {sorted(unknown)}, which are not in {listed}"
            )
    for task in spec.tasks:
        get_task(task, spec.options_for(task))
    for mode in {*spec.modes, *(m for c in spec.agent_cells.values() for m in c.modes or [])}:
        get_mode(mode)
    for agent in spec.agents:
        a = get_agent(agent)
        if a.uses_llm:
            for d in spec.drivers_for(agent):
                real_key(driver_for(a, d))
        elif spec.token_budget is not None and len(spec.agents) == 1:
            raise UserError(f"token_budget: agent {a.name} uses no LLM")
    return expand(spec)


def describe(spec: StudySpec, n_slots: int) -> str:
    """One line: ``modes-x-tasks: 12 runs (2 tasks x 2 agents x 3 repeats), budget 3m``."""
    parts = [f"{len(spec.tasks)} task(s)", f"{len(spec.agents)} agent(s)"]
    if len(spec.models) > 1:
        parts.append(f"{len(spec.models)} models")
    parts.append(f"{spec.repeats} repeat(s)")
    return (
        f"{spec.name}: {n_slots} runs ({' x '.join(parts)}), "
        f"budget {format_duration(spec.budget_s)} each"
    )
