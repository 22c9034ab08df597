"""A task's data: its three splits on disk and the samples a solver works through.

Every task prepares three disjoint splits in the task store:

``public``
    what the agent sees (copied into its workspace's ``data/``);
``private``
    the held-out items every submission is graded on (never inside a workspace);
``validation``
    items disjoint from both, never graded and never shown to the agent: the harness's own
    split for tuning defaults (reference-agent settings, judges, benchmarks), so that no
    default is chosen by looking at graded items.

A split is read as a list of :class:`Sample`: an id, the fields the prompt is built from, the
target the scorer compares against, and metadata for the report (``metadata["group"]`` is
the category scores are broken down by).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from agent2rl.files import read_jsonl

Split = Literal["public", "private", "validation"]
SPLITS: tuple[Split, ...] = ("public", "private", "validation")


@dataclass(frozen=True)
class Sample:
    """One item of a split. ``input`` holds the fields a solver builds its prompt from (a
    question, a function prompt, a game's id); ``target`` is what the scorer checks (a gold
    answer, unit tests, a goal); ``metadata`` is passed through to the item's result."""

    id: str
    input: dict[str, Any]
    target: Any = None
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class PreparedTask:
    """Where a task's splits live in the task store. ``validation`` is None only for a task
    that cannot spare items for one (its docstring then says why)."""

    public: Path
    private: Path
    validation: Path | None = None

    def split(self, name: Split) -> Path:
        """The directory of split ``name``; ``ValueError`` for a task without that split."""
        path = {"public": self.public, "private": self.private, "validation": self.validation}[name]
        if path is None:
            raise ValueError(f"this task has no {name} split")
        return path


@dataclass(frozen=True)
class JsonlSplits:
    """Splits stored as one JSON-lines file each: ``files`` maps a split to its file name
    (``train.jsonl``, ...) inside the split's directory."""

    files: dict[Split, str]
    to_sample: Callable[[dict[str, Any]], Sample]

    def read(self, prepared: PreparedTask, split: Split, limit: int | None = None) -> list[Sample]:
        """The first ``limit`` samples (all when None) of ``split``, in file order."""
        path = prepared.split(split) / self.files[split]
        return [self.to_sample(r) for r in read_jsonl(path, limit)]
