"""Benchmark tasks: one module (or package) per task, each registered by name.

::

    base.py       Task: a dataset, a solver and a scorer; evaluate() composes them
    registry.py   the @task decorator, get_task(), prepare_task()
    interactive.py  InteractiveTask: the episode solver, protocol and workspace files of L3
    arith_lite.py, gsm8k.py, humaneval.py       level 1 (rule-based reward)
    opencompass.py  the paper's OpenCompass prompts for gsm8k and humaneval
    alpacaeval.py   level 2 (judge-based reward): AlpacaEval 2.0
    alfworld/     level 3 (interactive): games, protocol, lite generator, official import
    webshop/      level 3 (interactive): the shop engine, reward, lite catalog, import

Importing this package imports every task module in it, so each registers itself; tasks
installed through the ``agent2rl.tasks`` entry-point group are loaded on the first lookup
(:data:`~agent2rl.tasks.registry.TASKS`).
"""

import importlib
import pkgutil

from agent2rl.dataset import PreparedTask, Sample
from agent2rl.scoring.base import EvalResult, ItemResult
from agent2rl.tasks.base import Task
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

for _module in pkgutil.iter_modules(__path__):
    if _module.name not in ("base", "registry"):
        importlib.import_module(f"{__name__}.{_module.name}")

__all__ = [
    "EvalResult",
    "ItemResult",
    "PreparedTask",
    "TASKS",
    "Sample",
    "Task",
    "get_task",
    "prepare_task",
    "private_paths",
    "register",
    "task",
    "task_names",
    "task_root",
]
