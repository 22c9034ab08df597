"""The task registry: name -> Task. A new task registers itself with :func:`register`."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agent2rl.errors import UserError
from agent2rl.tasks.base import PreparedTask, Task

_REGISTRY: dict[str, Callable[..., Task]] = {}


def register(name: str, factory: Callable[..., Task]) -> None:
    """Register a task factory under ``name`` (re-registering replaces it)."""
    _REGISTRY[name] = factory


def task_names() -> list[str]:
    return sorted(_REGISTRY)


def get_task(name: str, options: dict[str, Any] | None = None) -> Task:
    """The task called ``name`` configured with ``options`` (see :attr:`Task.options`).

    An unknown name raises :class:`UserError` listing the known ones; so does a bad option.
    """
    try:
        factory = _REGISTRY[name]
    except KeyError:
        known = ", ".join(task_names())
        raise UserError(f"unknown task {name!r}: choose one of {known}") from None
    return factory(options)


def task_root(task: Task, task_store: Path) -> Path:
    """The task's directory in the store: ``<store>/<name>/v<version>/``."""
    return task_store / task.name / f"v{task.version}"


def prepare_task(task: Task, task_store: Path) -> PreparedTask:
    """Prepare ``task`` in the store (idempotent) and set ``task.data_digest``."""
    prepared = task.prepare(task_root(task, task_store))
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
