"""The Task interface: what every benchmark task declares and how it is graded.

A task knows its name, level and version; it prepares a *public* split (what the agent sees)
and a *private* split (held out, never inside a workspace) into the task store; it writes the
instructions an agent reads; and it evaluates a model directory into an :class:`EvalResult`
with per-item outcomes, so that analysis can bootstrap intervals and compare submissions
item by item.
"""

from __future__ import annotations

import hashlib
import json
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol

from agent2rl.inference.backend import Backend


class EvalFormat(Protocol):
    """A task's evaluation protocol as data (a :class:`~agent2rl.tasks.prompt_format.PromptFormat`
    for single-prompt tasks, an :class:`~agent2rl.envs.alfworld_protocol.EpisodeFormat` for
    episodes): what the workspace's ``data/eval_format.json`` holds."""

    def to_dict(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class ItemResult:
    """One graded item. ``score`` is in [0, 1]; ``correct`` is ``score >= 1`` for binary tasks.
    ``meta`` holds task-specific facts for the report (an episode's task type and steps);
    ``meta["group"]``, when set, is the category the report breaks scores down by."""

    id: str
    prediction: str
    target: str
    correct: bool
    score: float
    meta: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        if d["meta"] is None:
            del d["meta"]
        return d


@dataclass
class EvalResult:
    """A task-level score (0-100) with the per-item results behind it."""

    score: float
    items: list[ItemResult]
    seconds: float = 0.0
    eval_hash: str = ""
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def n_items(self) -> int:
        return len(self.items)

    @staticmethod
    def from_items(items: list[ItemResult], **kw: Any) -> EvalResult:
        """Score = 100 x mean item score (0 for an empty list)."""
        score = 100.0 * sum(i.score for i in items) / len(items) if items else 0.0
        return EvalResult(score=score, items=items, **kw)


@dataclass(frozen=True)
class PreparedTask:
    """Where a task's splits live in the task store (``public`` is copied into workspaces)."""

    public: Path
    private: Path


class Task(ABC):
    """A benchmark task. Subclasses set the class attributes and implement the methods.

    ``version`` must change whenever data, prompts or grading change, since baselines are
    cached by it and scores are only comparable within one version.
    """

    name: str
    level: int
    version: str
    summary: str
    #: an evaluation running longer than this is killed and the submission fails
    eval_timeout_s: float = 1800.0
    #: interactive tasks (level 3) have an environment: a run serves its public games to the
    #: agent through a rollout service (see :meth:`rollout_source`)
    interactive: ClassVar[bool] = False
    #: evaluation options a run may set (``--task-opt name=value``): name -> default. The
    #: default's type (int, float, str, bool) is the type a value is parsed into. Options
    #: change scores, so they are part of :meth:`eval_settings` and the eval hash.
    options: ClassVar[dict[str, Any]] = {}

    def __init__(self, options: dict[str, Any] | None = None) -> None:
        self.opts: dict[str, Any] = parse_options(self.name, self.options, options or {})
        #: digest of the private split, set by :func:`~agent2rl.tasks.prepare_task`: scores on
        #: different data (an imported subset, a re-generated set) must not compare equal
        self.data_digest: str | None = None

    @abstractmethod
    def prepare(self, root: Path) -> PreparedTask:
        """Write the public and private splits under ``root`` (idempotent, atomic per file)."""

    @abstractmethod
    def description(self, prepared: PreparedTask) -> str:
        """Markdown for the workspace's ``description.md``: the task, data and exact
        evaluation protocol (prompt format, generation settings, how answers are graded)."""

    @abstractmethod
    def evaluate(
        self, backend: Backend, prepared: PreparedTask, limit: int | None = None
    ) -> EvalResult:
        """Grade the model behind ``backend`` on the private split (the first ``limit`` items
        when given, for quick checks; official scores never set it)."""

    def prompt_format(self, prepared: PreparedTask) -> EvalFormat | None:
        """The exact prompt protocol, written into the workspace as ``data/eval_format.json``
        (None for a task without one)."""
        return None

    def workspace_files(self) -> dict[str, Path]:
        """Extra files copied into the workspace's ``data/`` (name -> source): code the agent
        shares with the grader, such as an episode protocol or an environment client."""
        return {}

    #: names in the public split that are not copied into workspaces (too big to copy per
    #: run; the agent reaches them through the rollout service instead)
    workspace_exclude: ClassVar[tuple[str, ...]] = ()

    def rollout_source(self, prepared: PreparedTask) -> Any:
        """The games of the public split as the rollout service serves them
        (:class:`~agent2rl.envs.app.GameSource`); None for a task without an environment.
        Only :attr:`interactive` tasks have one; the harness then runs a rollout service."""
        return None

    def import_data(self, source: Path, root: Path) -> str:
        """Import the task's official data files from ``source`` into ``root`` (its store
        directory) for machines without network; returns a one-line summary. Tasks whose data
        ships with a package or is generated have nothing to import."""
        from agent2rl.errors import UserError

        raise UserError(f"task {self.name} has no data to import: its data needs no download")

    def eval_settings(self) -> dict[str, Any]:
        """Everything that changes a score besides the model: hashed into ``eval_hash``."""
        return {
            "task": self.name,
            "version": self.version,
            "options": self.opts,
            "data": self.data_digest,
        }

    def eval_hash(self, backend_settings: dict[str, Any]) -> str:
        """A short hash of task version, evaluation settings and backend settings.

        Scores with different hashes are not comparable.
        """
        blob = json.dumps(
            {"task": self.eval_settings(), "backend": backend_settings}, sort_keys=True
        )
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


def parse_options(task: str, declared: dict[str, Any], given: dict[str, Any]) -> dict[str, Any]:
    """``declared`` defaults overridden by ``given`` (strings are parsed to the default's type).

    Raises :class:`~agent2rl.errors.UserError` for an unknown name or a value that does not
    parse, naming the options the task has.
    """
    from agent2rl.errors import UserError

    out = dict(declared)
    for name, value in given.items():
        if name not in declared:
            known = ", ".join(f"{k} (default {v!r})" for k, v in declared.items()) or "none"
            raise UserError(f"task {task} has no option {name!r}: its options are {known}")
        kind = type(declared[name])
        try:
            if isinstance(value, str) and kind is bool:
                if value.lower() not in ("1", "0", "true", "false", "yes", "no"):
                    raise ValueError(value)
                value = value.lower() in ("1", "true", "yes")
            out[name] = kind(value)
        except (TypeError, ValueError):
            raise UserError(
                f"task option {name}={value!r} is not a valid {kind.__name__}"
            ) from None
    return out
