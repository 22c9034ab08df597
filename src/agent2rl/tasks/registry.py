"""The task registry: name -> Task. A new task registers itself with :func:`register`."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from agent2rl.errors import UserError
from agent2rl.tasks.base import PreparedTask, Task

_REGISTRY: dict[str, Callable[[], Task]] = {}


def register(name: str, factory: Callable[[], Task]) -> None:
    """Register a task factory under ``name`` (re-registering replaces it)."""
    _REGISTRY[name] = factory


def task_names() -> list[str]:
    return sorted(_REGISTRY)


def get_task(name: str) -> Task:
    """The task called ``name``; an unknown name raises :class:`UserError` listing the known."""
    try:
        return _REGISTRY[name]()
    except KeyError:
        known = ", ".join(task_names())
        raise UserError(f"unknown task {name!r}: choose one of {known}") from None


def prepare_task(task: Task, task_store: Path) -> PreparedTask:
    """Prepare ``task`` in the store under ``<store>/<name>/v<version>/`` (idempotent)."""
    return task.prepare(task_store / task.name / f"v{task.version}")
