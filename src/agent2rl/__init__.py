"""agent2rl: a benchmark harness for LLM coding agents that engineer RL post-training.

The package map and a run's data flow: docs/development.md.

The public API is what this module exports (Inspect's pattern: a small surface re-exported
here over the packages behind it); everything else may move without notice::

    from agent2rl import Task, task, Sample           # declare a task
    from agent2rl import TaskOptions, option          # its typed --task-opt options
    from agent2rl import Solver, Output, Scorer, EvalResult, ItemResult
    from agent2rl import run, RunRequest              # one run (``agent2rl run``)
    from agent2rl import evaluate, EvalRequest        # grade a model (``agent2rl eval``)
    from agent2rl import Registry, RunStatus, RunIdentity

The names are imported on first use (module ``__getattr__``), so ``import agent2rl`` stays
light (it imports no task, torch or pydantic model until one of them is asked for).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from agent2rl.errors import UserError

if TYPE_CHECKING:  # what a type checker sees; at run time, __getattr__ below
    from agent2rl.dataset import Sample
    from agent2rl.orchestration.context import RunOutcome
    from agent2rl.orchestration.evaluate import EvalReport, EvalRequest
    from agent2rl.orchestration.evaluate import evaluate_model as evaluate
    from agent2rl.orchestration.request import RunRequest
    from agent2rl.orchestration.run import execute_run as run
    from agent2rl.registry import Registry, RegistryConflict
    from agent2rl.rundir import RunIdentity, RunStatus
    from agent2rl.scoring.base import EvalResult, ItemResult, Scorer
    from agent2rl.solvers.base import Output, Solver
    from agent2rl.tasks.base import Task
    from agent2rl.tasks.options import TaskOptions, option
    from agent2rl.tasks.registry import task

__version__ = "0.1.0"

#: public name -> (module, attribute) it is imported from on first use
_LAZY: dict[str, tuple[str, str]] = {
    "Task": ("agent2rl.tasks", "Task"),
    "task": ("agent2rl.tasks", "task"),
    "TaskOptions": ("agent2rl.tasks", "TaskOptions"),
    "option": ("agent2rl.tasks", "option"),
    "Sample": ("agent2rl.dataset", "Sample"),
    "Solver": ("agent2rl.solvers.base", "Solver"),
    "Output": ("agent2rl.solvers.base", "Output"),
    "Scorer": ("agent2rl.scoring.base", "Scorer"),
    "EvalResult": ("agent2rl.scoring.base", "EvalResult"),
    "ItemResult": ("agent2rl.scoring.base", "ItemResult"),
    # ``run``: the function behind ``agent2rl run`` (a RunRequest -> RunOutcome)
    "run": ("agent2rl.orchestration.run", "execute_run"),
    "RunRequest": ("agent2rl.orchestration.request", "RunRequest"),
    "RunOutcome": ("agent2rl.orchestration.context", "RunOutcome"),
    # ``evaluate``: the function behind ``agent2rl eval`` (an EvalRequest -> EvalReport)
    "evaluate": ("agent2rl.orchestration.evaluate", "evaluate_model"),
    "EvalRequest": ("agent2rl.orchestration.evaluate", "EvalRequest"),
    "EvalReport": ("agent2rl.orchestration.evaluate", "EvalReport"),
    "Registry": ("agent2rl.registry", "Registry"),
    "RegistryConflict": ("agent2rl.registry", "RegistryConflict"),
    "RunStatus": ("agent2rl.rundir", "RunStatus"),
    "RunIdentity": ("agent2rl.rundir", "RunIdentity"),
}


def __getattr__(name: str) -> Any:
    """Import a public name on first use (and cache it in the module)."""
    try:
        module, attr = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module 'agent2rl' has no attribute {name!r}") from None
    value = getattr(importlib.import_module(module), attr)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "EvalReport",
    "EvalRequest",
    "EvalResult",
    "ItemResult",
    "Output",
    "Registry",
    "RegistryConflict",
    "RunIdentity",
    "RunOutcome",
    "RunRequest",
    "RunStatus",
    "Sample",
    "Scorer",
    "Solver",
    "Task",
    "TaskOptions",
    "UserError",
    "__version__",
    "evaluate",
    "option",
    "run",
    "task",
]
