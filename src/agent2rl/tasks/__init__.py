"""Benchmark tasks: one module per task, registered by name."""

from agent2rl.tasks.arith_lite import ArithLite
from agent2rl.tasks.base import EvalResult, ItemResult, PreparedTask, Task
from agent2rl.tasks.registry import get_task, prepare_task, register, task_names

register(ArithLite.name, ArithLite)

__all__ = [
    "EvalResult",
    "ItemResult",
    "PreparedTask",
    "Task",
    "get_task",
    "prepare_task",
    "register",
    "task_names",
]
