"""The Task interface: a task declares its dataset, a solver and a scorer.

As in Inspect AI, a task is assembled from parts rather than coded as a pipeline:

- its **dataset**: :meth:`Task.prepare` writes the public, private and validation splits into
  the task store; :meth:`Task.samples` reads a split as :class:`~agent2rl.dataset.Sample`
  (by default through :attr:`Task.splits`, one JSON-lines file per split);
- its **solver** (:mod:`agent2rl.solvers`): single-turn generation, or a multi-turn episode
  against the task's environment (:meth:`Task.environment`);
- its **scorer** (:mod:`agent2rl.scoring`): final-answer match, unit tests in the sandbox,
  an episode's outcome, a judge.

:meth:`Task.evaluate` is the composition (samples -> solver -> scorer -> :class:`EvalResult`)
and no task overrides it. A task also writes what the agent reads (``description.md``, the
prompt protocol file) and states everything that changes a score in :meth:`eval_settings`
(the solver's and scorer's settings are included automatically), so scores are comparable only
under one evaluation hash."""

from __future__ import annotations

import hashlib
import json
import time
from abc import ABC, abstractmethod
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any, ClassVar, Protocol

from agent2rl.dataset import JsonlSplits, PreparedTask, Sample, Split
from agent2rl.errors import UserError
from agent2rl.inference.backend import Backend
from agent2rl.rollout.env import GameSource
from agent2rl.scoring.base import EvalResult, Scorer
from agent2rl.scoring.metrics import declared_metrics
from agent2rl.solvers.base import Solver
from agent2rl.tasks.options import TaskOptions


def example_block(path: Path) -> str:
    """The first row of the JSON-lines file ``path`` as a description's ``Example:`` block."""
    with path.open(encoding="utf-8") as fh:
        row = json.loads(fh.readline())
    return f"Example:\n```json\n{json.dumps(row)}\n```"


class EvalFormat(Protocol):
    """A task's evaluation protocol as data (a :class:`~agent2rl.solvers.PromptFormat` for
    single-prompt tasks, an episode protocol for interactive ones): what the workspace's
    ``data/eval_format.json`` holds."""

    def to_dict(self) -> dict[str, Any]: ...


class Task(ABC):
    """A benchmark task. ``version`` must change whenever data, prompts or grading change,
    since baselines are cached by it and scores are only comparable within one version."""

    name: ClassVar[str]
    level: ClassVar[int]
    version: ClassVar[str]
    summary: ClassVar[str]
    #: an evaluation running longer than this is killed and the submission fails
    eval_timeout_s: ClassVar[float] = 1800.0
    #: evaluation options a run may set (``--task-opt name=value``): a frozen dataclass of
    #: typed fields with help (:class:`~agent2rl.tasks.options.TaskOptions`); the instance is
    #: :attr:`config`. Options change scores, so they are part of :meth:`eval_settings` and
    #: the eval hash.
    Options: ClassVar[type[TaskOptions]] = TaskOptions
    #: name -> default of :attr:`Options` (read-only, derived; set for each subclass). A task
    #: written for the untyped declaration may still set this dict instead of
    #: :attr:`Options`: its options are then typed by their defaults, without help.
    options: ClassVar[Mapping[str, Any]] = MappingProxyType({})
    #: the default dataset: one JSON-lines file per split (None: the task overrides
    #: :meth:`samples`)
    splits: ClassVar[JsonlSplits | None] = None
    #: names in the public split that are not copied into workspaces (too big to copy per
    #: run; the agent reaches them through the rollout service instead)
    workspace_exclude: ClassVar[tuple[str, ...]] = ()
    #: package-index projects the agent may not fetch: the grader's own packages (a judge's
    #: weights, a benchmark shipped as a wheel). PEP 503 names, shell patterns allowed;
    #: enforced by the run's index proxy (:mod:`agent2rl.sandbox.name_proxy`)
    denied_packages: ClassVar[tuple[str, ...]] = ()
    #: model-hub repo ids the agent may not fetch (graded data sets, judge weights):
    #: ``org/name`` (any kind), ``datasets/org/name`` (that kind only), a legacy id without
    #: an org, or a shell pattern (``*/name``); enforced by the run's hub proxy
    denied_hub_repos: ClassVar[tuple[str, ...]] = ()
    # Both lists name families: each plain entry also denies every name holding it, in
    # either channel (agent2rl.sandbox.name_proxy.DenyList).

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        owner = getattr(cls, "name", cls.__name__)
        declared = cls.__dict__.get("options")
        if isinstance(declared, dict) and "Options" not in cls.__dict__:
            cls.Options = TaskOptions.from_defaults(owner, declared)
        cls.Options.check_declaration(owner)
        cls.options = MappingProxyType(cls.Options.defaults())

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        """The task with ``options`` (``--task-opt`` strings or typed values) over the
        defaults; :class:`~agent2rl.errors.UserError` for an unknown name or a bad value."""
        #: the typed options (read them as ``self.config.max_steps``)
        self.config: TaskOptions = self.Options.parse(self.name, options)
        #: set by :func:`~agent2rl.tasks.prepare_task`: where the splits are, and a digest of
        #: the private split (scores on different data must not compare equal)
        self.prepared: PreparedTask | None = None
        self.data_digest: str | None = None
        #: set by the grading worker: the evaluation's directory in the run's grading area
        #: (``grading/submissions/<id>/``, ``grading/baseline/``), where a scorer keeps its
        #: private records (a judge's usage lines); None outside the grader
        self.record_dir: Path | None = None
        #: set by a warm grader, which evaluates many submissions with this one object: the
        #: task may keep what its solver starts (environment worker processes) from one
        #: evaluation to the next, until :meth:`close`
        self.keep_environments = False

    def close(self) -> None:  # noqa: B027 (a hook: most tasks keep nothing)
        """End what the task kept between evaluations (see :attr:`keep_environments`).
        Idempotent; the task still evaluates afterwards (starting afresh). None here."""

    # -- the dataset ---------------------------------------------------------------------
    @abstractmethod
    def prepare(self, root: Path) -> PreparedTask:
        """Write the public, private and validation splits under ``root`` (idempotent, atomic
        per file or swapped in whole) and say where they are."""

    def samples(
        self, prepared: PreparedTask, split: Split, limit: int | None = None
    ) -> list[Sample]:
        """The first ``limit`` samples (all when None) of ``split``."""
        if self.splits is None:
            raise NotImplementedError(f"task {self.name} declares no splits: override samples()")
        return self.splits.read(prepared, split, limit)

    def denied_files(self) -> tuple[Path, ...]:
        """The grader's own files (a judge's weights) the agent may not fetch under any name:
        the run's hub proxy refuses a file whose content digest is one of theirs. A file not
        present here is left out. None here."""
        return ()

    def denied_llm_prompts(self) -> dict[str, tuple[str, ...]]:
        """Model -> texts a request of the agent's to that model may not carry (``"*"``: any
        model): the task's judge prompt sent to its judge model would let the agent ask the
        grader's own judge. Enforced by the run's metering proxy; none here."""
        return {}

    def item_texts(self, prepared: PreparedTask, split: Split) -> dict[str, list[str]]:
        """Sample id -> texts of that item which its sample does not hold (an interactive
        task's goal behind a bare game id), for the contamination check's index
        (:func:`agent2rl.integrity.contamination.private_texts`). None here."""
        return {}

    # -- the solver and the scorer -------------------------------------------------------
    @abstractmethod
    def solver(self, prepared: PreparedTask, split: Split = "private") -> Solver:
        """How the model is queried (an episode solver plays ``split``'s environment)."""

    @abstractmethod
    def scorer(self, prepared: PreparedTask) -> Scorer:
        """How outputs are judged."""

    def evaluate(
        self,
        backend: Backend,
        prepared: PreparedTask,
        limit: int | None = None,
        split: Split = "private",
    ) -> EvalResult:
        """Grade the model behind ``backend`` on ``split`` (the private split for every score
        a run records; the validation split for the harness's own tuning): the first
        ``limit`` samples when given (quick checks; official scores never set it)."""
        started = time.time()
        samples = self.samples(prepared, split, limit)
        outputs = self.solver(prepared, split).solve(backend, samples)
        scorer = self.scorer(prepared)
        items = scorer.score(samples, outputs)
        return EvalResult.from_items(
            items,
            declared_metrics(scorer),  # the first is the score (default: 100 x mean score)
            seconds=time.time() - started,
            details=scorer.details(items, outputs),
        )

    # -- the environment (interactive tasks) ---------------------------------------------
    #: interactive tasks have an environment: the grader plays the private games through it,
    #: and a run serves the public games to the agent through a rollout service
    interactive: ClassVar[bool] = False

    def environment(self, prepared: PreparedTask, split: Split) -> GameSource:
        """The games of ``split`` (:class:`~agent2rl.rollout.env.GameSource`). Only
        :attr:`interactive` tasks have one; the rollout service serves the public split."""
        raise NotImplementedError(f"task {self.name} has no environment")

    # -- what the agent reads ------------------------------------------------------------
    @abstractmethod
    def description(self, prepared: PreparedTask) -> str:
        """Markdown for the workspace's ``description.md``: the task, data and exact
        evaluation protocol (prompt format, generation settings, how answers are graded)."""

    def prompt_format(self, prepared: PreparedTask) -> EvalFormat | None:
        """The exact prompt protocol, written into the workspace as ``data/eval_format.json``
        (None for a task without one)."""
        return None

    def workspace_files(self) -> dict[str, Path]:
        """Extra files copied into the workspace's ``data/`` (name -> source): code the agent
        shares with the grader, such as an episode protocol or an environment client."""
        return {}

    def private_paths(self) -> list[Path]:
        """Files or directories outside the task store that hold this task's private items
        (a dataset an installed package ships). Every agent sandbox masks them, whatever the
        run's task, and the leak scanner checks that nothing else readable holds them."""
        return []

    # -- data outside the store ----------------------------------------------------------
    def import_data(self, source: Path, root: Path) -> str:
        """Import the task's official data files from ``source`` into ``root`` (its store
        directory) for machines without network; returns a one-line summary. Tasks whose data
        ships with a package or is generated have nothing to import."""
        raise UserError(f"task {self.name} has no data to import: its data needs no download")

    def make_data(self, out: Path, n: int, seed: int) -> str:
        """Generate ``n`` items from ``seed`` into the new folder ``out`` for use elsewhere
        (``agent2rl data make``); returns a one-line summary. Only generated tasks can."""
        raise UserError(f"task {self.name} has no generator: its data is not generated")

    # -- comparability -------------------------------------------------------------------
    @property
    def opts(self) -> dict[str, Any]:
        """The options as a plain dict (name -> value, in declaration order; a fresh copy):
        what ``run.json`` records, the grading worker is handed, and the eval hash covers."""
        return self.config.to_dict()

    def eval_settings(self) -> dict[str, Any]:
        """Everything that changes a score besides the model, hashed into ``eval_hash``: the
        task's identity, options and private data, and its solver's and scorer's settings.
        Needs :func:`~agent2rl.tasks.prepare_task` to have run (for the data and the parts)."""
        if self.prepared is None:
            raise RuntimeError(f"task {self.name}: prepare_task() before eval_settings()")
        return {
            "task": self.name,
            "version": self.version,
            "options": self.opts,
            "data": self.data_digest,
            "solver": self.solver_settings(self.prepared),
            "scorer": self.scorer(self.prepared).settings(),
        }

    def solver_settings(self, prepared: PreparedTask) -> dict[str, Any]:
        """The solver's settings (a task whose solver is costly to build, such as one that
        loads an environment, states them without building it)."""
        return self.solver(prepared).settings()

    def eval_hash(self, backend_settings: dict[str, Any]) -> str:
        """A short hash of the evaluation and backend settings: scores under different hashes
        are not comparable."""
        blob = json.dumps(
            {"task": self.eval_settings(), "backend": backend_settings}, sort_keys=True
        )
        return hashlib.sha256(blob.encode()).hexdigest()[:16]
