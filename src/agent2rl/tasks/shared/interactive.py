"""InteractiveTask: the plumbing every level-3 task shares. The grader's
:class:`~agent2rl.solvers.EpisodeSolver` and the rollout service both play the task's
:meth:`~agent2rl.tasks.base.Task.environment`; the agent gets the episode protocol
(``data/protocol.py``, on ``data/protocol_core.py``) and the rollout service's client
(``data/env_client.py``) so that its training code builds the very prompts the grader does."""

from __future__ import annotations

from abc import abstractmethod
from pathlib import Path
from types import ModuleType
from typing import Any, ClassVar, Protocol

from agent2rl.dataset import PreparedTask, Split
from agent2rl.rollout import client as env_client
from agent2rl.rollout.env import GameSource
from agent2rl.solvers import EpisodeSolver
from agent2rl.solvers.episode import EpisodeProtocol
from agent2rl.tasks.base import Task
from agent2rl.tasks.options import option
from agent2rl.tasks.shared import protocol_core


def env_batch_option(default: int = 64) -> Any:
    """The ``env_batch`` option every interactive task has (its help said once)."""
    return option(
        default,
        "Games played side by side when grading, one batched generate call per step over "
        "those still running (speed and memory only: outputs are the same for any value).",
    )


def batch_size_option(default: int = 64) -> Any:
    """The ``batch_size`` option every interactive task has."""
    return option(default, "Prompts per forward pass when grading (speed only).")


class EpisodeSizing(Protocol):
    """What :class:`InteractiveTask` reads of its task's options (:func:`env_batch_option`,
    :func:`batch_size_option`)."""

    @property
    def env_batch(self) -> int: ...

    @property
    def batch_size(self) -> int: ...


class InteractiveTask(Task):
    """A level-3 task (module docstring). A subclass sets :attr:`protocol_module` and
    declares :meth:`episode_format`, besides the dataset, scorer and description every task
    declares; its options ``env_batch`` and ``batch_size`` size the solver (its speed and
    memory, not its outputs)."""

    level = 3
    interactive = True
    eval_timeout_s = 3600.0
    #: the task's episode protocol (standard library only: copied into the workspace beside
    #: :mod:`agent2rl.tasks.shared.protocol_core`, which it imports)
    protocol_module: ClassVar[ModuleType]
    config: EpisodeSizing  # type: ignore[assignment]  (each subclass's options class)

    @abstractmethod
    def episode_format(self) -> EpisodeProtocol:
        """The run's episode protocol, from the task's options."""

    def prompt_format(self, prepared: PreparedTask) -> EpisodeProtocol:
        return self.episode_format()

    def solver(self, prepared: PreparedTask, split: Split = "private") -> EpisodeSolver:
        return EpisodeSolver(
            self.grading_games(prepared, split),
            self.episode_format(),
            max_open=self.config.env_batch,
            batch_size=self.config.batch_size,
        )

    def grading_games(self, prepared: PreparedTask, split: Split) -> GameSource:
        """The games the grader plays: :meth:`environment`'s (or, the same, in workers)."""
        return self.environment(prepared, split)

    def solver_settings(self, prepared: PreparedTask) -> dict[str, Any]:
        # Without building the environment (loading its games or index takes a while).
        return {"solver": "episode", "protocol": self.episode_format().to_dict()}

    def workspace_files(self) -> dict[str, Path]:
        return {
            "protocol.py": Path(str(self.protocol_module.__file__)),
            "protocol_core.py": Path(protocol_core.__file__),
            "env_client.py": Path(env_client.__file__),
        }


def count_lines(path: Path) -> int:
    """The non-blank lines of the text file at ``path`` (a JSON-lines file's rows)."""
    with open(path) as fh:
        return sum(1 for line in fh if line.strip())
