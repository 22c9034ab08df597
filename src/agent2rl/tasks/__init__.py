"""Benchmark tasks: one module per task, registered by name."""

from agent2rl.tasks.alfworld import Alfworld, AlfworldLite
from agent2rl.tasks.arith_lite import ArithLite
from agent2rl.tasks.base import EvalResult, ItemResult, PreparedTask, Task
from agent2rl.tasks.gsm8k import Gsm8k
from agent2rl.tasks.humaneval import HumanEval
from agent2rl.tasks.registry import get_task, prepare_task, register, task_names, task_root

register(ArithLite.name, ArithLite)
register(Gsm8k.name, Gsm8k)
register(HumanEval.name, HumanEval)
register(Alfworld.name, Alfworld)
register(AlfworldLite.name, AlfworldLite)

__all__ = [
    "EvalResult",
    "ItemResult",
    "PreparedTask",
    "Task",
    "get_task",
    "prepare_task",
    "register",
    "task_names",
    "task_root",
]
