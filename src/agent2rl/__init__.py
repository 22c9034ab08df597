"""agent2rl: a benchmark harness for LLM coding agents that engineer RL post-training.

The packages (docs/development.md shows the same map)::

    cli.py           the ``agent2rl`` command (Typer): run, report, compare, study, data, ...
    orchestration/   one run: resolve -> task data -> workspace -> baseline -> services ->
                     agent -> supervise -> finalize (RunContext shared by the stages)
    tasks/           one module or package per task, a declaration: dataset + solver + scorer
    dataset.py       Sample, PreparedTask (public / private / validation), JSONL splits
    solvers/         how samples become outputs: Generate, EpisodeSolver (multi-turn, tools)
    scoring/         how outputs are judged: FinalAnswer, UnitTests, EpisodeOutcome, judges
    inference/       generation backends (transformers; vLLM on GPUs) behind one interface
    grading/         the per-run grading service, its ledger (SQLite) and the evaluator
    rollout/         the task-neutral rollout service for interactive tasks (env.db)
    workspace/       the agent's workspace: data, base model, description, instructions
    sandbox/         bubblewrap, per-run uid, caps, network policy, program sandboxes
    agents/          agent specs (TOML), drivers, launch, log parsers, modes, reference agents
    metering/        the LLM metering proxy: per-provider usage, prices, SSE streams
    recording/       code snapshots (git) and the resource timeline
    integrity/       contamination and model-identity checks
    analysis/        per-run report, cross-run dashboard (results.db, compare), rendering
    study/           many runs of a matrix on Ray, resumable
    models/          the built-in tiny model, local directories, hub ids
    files.py, formatting.py, statistics.py, locks.py, rundir.py, settings.py, errors.py: shared

A run, as data flows through it::

    agent2rl run --task T --agent A --model M --budget B
      resolve_run        task (tasks.registry), agent spec, model, sandbox, caps: all checked
                         before runs/<id>/ exists, so a bad flag leaves nothing behind
      task data          Task.prepare -> public / private / validation in the task store
                         ($AGENT2RL_HOME/tasks/<name>/v<version>)
      workspace          runs/<id>/workspace: public data, base model (read-only), description
      baseline           grading.evaluator -> worker process -> Task.evaluate(solver, scorer)
                         on the private split; cached per (task, settings, model, backend)
      services           grading service (ledger.db), rollout service (env.db, L3), metering
                         proxy (LLM agents), service bridge and egress proxy (--network services)
      agent              under bubblewrap as its own uid, in its cgroup; code snapshots and
                         resources recorded; killed (whole tree) at the deadline or a cap
      finalize           integrity checks -> RunMetrics once -> report/ and runs/results.db

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
