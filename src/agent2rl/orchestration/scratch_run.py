"""Real run directories built outside a run, for tests and benchmarks.

Tests and the grading benchmarks need a run's directory (``run.json`` with a running clock,
the workspace, the baseline in the ledger) without starting an agent: this module is the one
copy of that set-up both import, so that a change to the run directory's layout reaches both.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

from agent2rl.grading.ledger import Ledger
from agent2rl.orchestration.baseline import measure_baseline, record_baseline
from agent2rl.rundir import RunInfo, RunPaths
from agent2rl.settings import load_settings
from agent2rl.workspace import build_workspace


def run_stub(
    root: Path, task: Any, model: Any = None, budget_s: float = 600.0, agent: str = "test"
) -> RunPaths:
    """A run directory holding only ``run.json`` (task, options, a clock started now, status
    ``running``): what the rollout service needs. ``root`` must not exist yet (its parent is
    created); ``model`` None leaves ``model_path`` unset."""
    paths = RunPaths(root)
    root.mkdir(parents=True)
    now = time.time()
    RunInfo(
        run_id=root.name,
        task=task.name,
        task_version=task.version,
        level=task.level,
        agent=agent,
        model="tiny",
        budget_s=budget_s,
        seed=0,
        sandbox="none",
        created_at=now,
        start=now,
        deadline=now + budget_s,
        status="running",
        model_path=str(model.path) if model else None,
        task_options=task.opts,
    ).save(paths)
    return paths


def make_run(
    root: Path, task: Any, prepared: Any, model: Any, budget_s: float = 600.0, agent: str = "test"
) -> RunPaths:
    """:func:`run_stub` plus the workspace and the baseline measured and recorded in the
    ledger: a run directory a grading service can serve. The baseline is a real evaluation
    (cached by model and task under the settings' store, so a second call is quick)."""
    paths = run_stub(root, task, model, budget_s, agent)
    build_workspace(paths, task, prepared, model)
    with Ledger(paths.ledger) as ledger:
        baseline = measure_baseline(task, model, load_settings(), paths)
        record_baseline(ledger, task, model, baseline)
    return paths


def perturbed_copy(model_dir: Path, dest: Path, seed: int, scale: float = 0.01) -> Path:
    """A copy of ``model_dir`` at ``dest`` whose safetensors weights have Gaussian noise
    (``scale``, seeded by ``seed``) added: a distinct submission of the same structure, the
    same for the same seed. Only ``model.safetensors`` is rewritten (a sharded model keeps
    its other shards as they are)."""
    import torch
    from safetensors.torch import load_file, save_file

    shutil.copytree(model_dir, dest)
    g = torch.Generator().manual_seed(seed)
    tensors = load_file(model_dir / "model.safetensors")
    noisy = {k: v + scale * torch.randn(v.shape, generator=g) for k, v in tensors.items()}
    save_file(noisy, dest / "model.safetensors", metadata={"format": "pt"})
    return dest
