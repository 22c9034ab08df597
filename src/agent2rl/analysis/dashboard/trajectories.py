"""Submission trajectories (the paper's Fig. 5): each run's scores by submission, with its
baseline. Plain data for the dashboard's per-run plots."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from agent2rl.analysis.dashboard.runset import StudyRun


@dataclass(frozen=True)
class TrajectoryStep:
    index: int
    """1-based position in the run's submissions."""
    submission_id: int
    t: float
    score: float | None
    """None for an invalid or unfinished submission."""
    status: str
    is_copy: bool
    is_best: bool


@dataclass(frozen=True)
class Trajectory:
    run_id: str
    task: str
    stack: str
    repeat: int | None
    baseline: float | None
    steps: list[TrajectoryStep]


def trajectory(run: StudyRun) -> Trajectory:
    """One run's submissions in order; ``is_best`` marks the run's best submission."""
    m = run.metrics
    steps = [
        TrajectoryStep(i, p.id, p.t, p.score, p.status, p.is_copy, p.id == m.best_submission_id)
        for i, p in enumerate(m.trajectory, 1)
    ]
    return Trajectory(m.run_id, m.task, run.stack.label, run.repeat, m.baseline, steps)


def trajectories(runs: Sequence[StudyRun]) -> list[Trajectory]:
    """Every run's trajectory, ordered by task, stack and repeat."""
    ts = [trajectory(r) for r in runs]
    return sorted(ts, key=lambda t: (t.task, t.stack, t.repeat if t.repeat is not None else 0))
