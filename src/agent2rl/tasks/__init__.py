"""Benchmark tasks: one module (or package) per task, each registered by name.

::

    base.py        Task: a dataset, a solver and a scorer; evaluate() composes them
    options.py     TaskOptions: a task's --task-opt options as a typed frozen dataclass
    docs.py        the task pages' option tables, generated from the options dataclasses
    registry.py    the @task decorator, get_task(), prepare_task()
    shared/        parts several tasks share (no task lives here):
      interactive.py    InteractiveTask: the episode solver, protocol and workspace files of L3
      protocol_core.py  the episode-protocol core shipped beside each L3 task's protocol.py
      opencompass.py    the paper's OpenCompass prompts for gsm8k and humaneval
      public_view.py    --task-opt public=reference for gsm8k and humaneval
    arith_lite.py, gsm8k.py, humaneval.py   level 1 (rule-based reward)
    alpacaeval.py, alpaca_lite/             level 2 (judge-based reward)
    alfworld/, webshop/, deepsearch/        level 3 (interactive rollout)

Importing this package imports every task module in it (:func:`task_modules`), so each
registers itself; tasks installed through the ``agent2rl.tasks`` entry-point group are loaded
on the first lookup (:data:`~agent2rl.tasks.registry.TASKS`). A new task is one module (or
package) here: nothing else names it."""

import importlib
import pkgutil

from agent2rl.dataset import PreparedTask, Sample
from agent2rl.scoring.base import EvalResult, ItemResult
from agent2rl.tasks.base import Task
from agent2rl.tasks.options import TaskOptions, option
from agent2rl.tasks.registry import (
    TASKS,
    get_task,
    prepare_task,
    private_paths,
    register,
    task,
    task_names,
    task_root,
)

#: the modules of this package that are the task framework, not tasks: discovery skips
#: them (as it skips any name starting with an underscore)
FRAMEWORK_MODULES = frozenset({"base", "docs", "options", "registry", "shared"})


def task_modules() -> list[str]:
    """The task modules and packages of this package, by name (what importing it imports)."""
    return sorted(
        m.name
        for m in pkgutil.iter_modules(__path__)
        if m.name not in FRAMEWORK_MODULES and not m.name.startswith("_")
    )


for _name in task_modules():
    importlib.import_module(f"{__name__}.{_name}")

__all__ = [
    "EvalResult",
    "ItemResult",
    "PreparedTask",
    "TASKS",
    "Sample",
    "Task",
    "TaskOptions",
    "get_task",
    "option",
    "prepare_task",
    "private_paths",
    "register",
    "task",
    "task_names",
    "task_modules",
    "task_root",
]
