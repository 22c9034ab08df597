"""Constructed runs for the cross-run analysis tests: RunMetrics with known scores and
submissions, wrapped as StudyRuns (real pydantic models, no run directory needed)."""

from __future__ import annotations

from collections.abc import Sequence

from agent2rl.analysis.dashboard.runset import Evidence, StudyRun
from agent2rl.analysis.report.run_metrics import RunMetrics, TrajectoryPoint

_COUNTER = iter(range(1, 1_000_000))


def point(
    sid: int,
    t: float,
    score: float | None,
    *,
    status: str | None = None,
    is_copy: bool = False,
    error: str | None = None,
    comparable: bool | None = True,
) -> TrajectoryPoint:
    return TrajectoryPoint(
        id=sid,
        t=t,
        score=score,
        best_so_far=None,
        status=status or ("graded" if score is not None else "failed"),
        is_copy=is_copy,
        duplicate_of=None,
        error=error,
        path=f"output/v{sid}",
        eval_seconds=1.0,
        eval_hash="h1",
        score_ci95=None,
        improvement_ci95=None,
        within_noise=None,
        comparable=comparable if score is not None else None,
    )


def make_run(
    *,
    task: str = "arith-lite",
    agent: str = "reference-sft",
    driver: str | None = None,
    mode: str | None = None,
    baseline: float | None = 10.0,
    scores: Sequence[float | None] = (),
    times: Sequence[float] | None = None,
    status: str = "deadline",
    eval_hash: str | None = "h1",
    budget_s: float = 100.0,
    repeat: int | None = None,
    evidence: Sequence[Evidence] = (),
    token_timeline: Sequence[tuple[float, int]] = (),
    **extra,
) -> StudyRun:
    """A run whose submissions score ``scores`` (None: a failed one) at ``times`` (default
    10, 20, ...); best and improvement follow the best of budget rule."""
    times = list(times) if times is not None else [10.0 * (i + 1) for i in range(len(scores))]
    traj = [point(i + 1, t, s) for i, (t, s) in enumerate(zip(times, scores, strict=True))]
    valid = [p for p in traj if p.score is not None]
    best = max(valid, key=lambda p: p.score) if valid else None
    n = next(_COUNTER)
    m = RunMetrics(
        run_id=f"run-{n:04d}",
        task=task,
        agent=agent,
        driver=driver,
        mode=mode,
        model="tiny",
        status=status,
        budget_s=budget_s,
        start=1000.0,
        duration_s=budget_s,
        baseline=baseline,
        best_score=best.score if best else None,
        best_submission_id=best.id if best else None,
        eval_hash=eval_hash,
        improvement=(best.score - baseline) if best and baseline is not None else None,
        time_to_best=best.t if best else None,
        submissions=len(traj),
        valid_submissions=len(valid),
        valid_submission_rate=len(valid) / len(traj) if traj else None,
        trajectory=traj,
        **extra,
    )
    return StudyRun(m, None, repeat, tuple(evidence), tuple(token_timeline))
