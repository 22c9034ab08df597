"""The task registry: name -> Task.

A task module registers its class with the :func:`task` decorator (:mod:`agent2rl.tasks`
imports every one); installed packages may add tasks through the ``agent2rl.tasks``
entry-point group, loaded on the first lookup, whose entry point names a task class, a
factory, or a module whose import registers its tasks. :data:`TASKS` refuses a second task
under a taken name (:class:`~agent2rl.registry.RegistryConflict`), never replacing the first."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from agent2rl.dataset import PreparedTask
from agent2rl.locks import file_lock
from agent2rl.registry import Registry
from agent2rl.tasks.base import Task

#: Every task by name -> its factory (a Task class, called with the options dict).
TASKS: Registry[Callable[..., Task]] = Registry("tasks", "task")

T = TypeVar("T", bound=type[Task])


def register(name: str, factory: Callable[..., Task]) -> None:
    """Register a task factory under ``name``. Another factory under a taken name raises
    :class:`~agent2rl.registry.RegistryConflict`; the same one again is a no-op."""
    TASKS.register(name, factory)


def task(cls: T) -> T:
    """Class decorator: register ``cls`` under its ``name``."""
    register(cls.name, cls)
    return cls


def task_names() -> list[str]:
    """Every registered task name, sorted (installed entry points included)."""
    return TASKS.names()


def get_task(name: str, options: dict[str, Any] | None = None) -> Task:
    """The task called ``name`` configured with ``options`` (see :attr:`Task.options`). An
    unknown name raises :class:`~agent2rl.errors.UserError` listing the known ones (and the
    closest, for a typo); so does a bad option."""
    return TASKS[name](options)


def private_paths() -> list[Path]:
    """Every registered task's :meth:`~Task.private_paths` (what every agent sandbox masks)."""
    return sorted({p for name in task_names() for p in get_task(name).private_paths()})


def task_root(task: Task, task_store: Path) -> Path:
    """The task's directory in the store: ``<store>/<name>/v<version>/``."""
    return task_store / task.name / f"v{task.version}"


def prepare_task(task: Task, task_store: Path) -> PreparedTask:
    """Prepare ``task`` in the store (idempotent); sets ``task.prepared`` and
    ``task.data_digest``. Runs that prepare the same task version at once (a study) take
    turns under a per-task file lock in the store: the first generates, the others then find
    the data there."""
    root = task_root(task, task_store)
    with file_lock(root.parent / f".v{task.version}.lock"):
        prepared = task.prepare(root)
    task.prepared = prepared
    task.data_digest = tree_digest(prepared.private)
    return prepared


def tree_digest(root: Path) -> str:
    """sha256 over the relative paths and bytes of every file under ``root`` (sorted), short."""
    h = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        h.update(str(path.relative_to(root)).encode() + b"\0")
        with open(path, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
        h.update(b"\0")
    return h.hexdigest()[:16]
