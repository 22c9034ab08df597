"""``agent2rl study export``: a study's runs and submissions as CSV and Parquet.

Four pandas-friendly tables, each written to ``<dir>/export/`` as ``<name>.csv`` and
``<name>.parquet``, and one chart, ``task_coverage.svg``:

``runs``
    one row per counted run (:func:`agent2rl.study.runs.load_runs`): identity (task, model,
    agent, driver, mode, repeat, seed), status, baseline, best, improvement (as recorded, and
    ``outcome_improvement`` under the best of budget rule), ``integrity_flags`` and
    ``flagged`` (whether the run counts as its base model in the main table), intervals,
    submission counts, timings, LLM tokens and cost, environment steps, route and best
    route, failure kinds;
``submissions``
    one row per submission of those runs: run identity, id, time, score, improvement over
    the run's baseline (None when not comparable), best so far, status, copy/duplicate,
    error, eval seconds;
``main_table``
    the paper's main table in its wide shape (:func:`main_table_rows`): one row per task,
    its ``baseline``, then per stack (agent x driver x mode) ``<stack> best`` and
    ``<stack> delta``: the mean over that stack's repeats of the best of budget and of the
    improvement (a run without a valid comparable submission counts as the baseline, delta
    0); blank where a stack has no run of that task with a baseline; and ``flagged``, how
    many of the task's runs are flagged. A flagged run counts as its base model (best =
    baseline, delta 0), the policy of every aggregate
    (:mod:`agent2rl.analysis.dashboard.counting`): its graded best never reaches the table;
``task_coverage``
    the paper's task-coverage chart (Fig. 4) as data: one row per stack and task with runs,
    how many of them improved the task (and beyond noise), whether the stack covers it, and
    the margins (tasks a stack covers, stacks covering a task)
    (:mod:`agent2rl.analysis.dashboard.coverage`); ``task_coverage.svg`` draws it.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from agent2rl.analysis.dashboard.counting import counted, counts_as_flagged, run_flags
from agent2rl.analysis.dashboard.coverage import coverage_rows, coverage_svg, task_coverage
from agent2rl.analysis.dashboard.failures import run_failures
from agent2rl.analysis.dashboard.routes import run_route
from agent2rl.analysis.dashboard.runset import StudyRun, outcome
from agent2rl.files import write_text_atomic
from agent2rl.study.runs import load_runs

#: columns taken as they are: of the runs table from the run's metrics, of the submissions
#: table from the trajectory's points
_IDENTITY = ("run_id", "task", "model", "agent", "driver", "mode")
_RUN_COLUMNS = (
    "within_noise submissions valid_submissions valid_submission_rate budget_s duration_s "
    "time_to_best"
).split()
_SUBMISSION_COLUMNS = ("best_so_far", "status", "is_copy", "duplicate_of", "error", "eval_seconds")


def run_rows(runs: list[StudyRun]) -> list[dict[str, Any]]:
    rows = []
    for r in runs:
        m = r.metrics
        o = outcome(m)
        lo, hi = m.improvement_ci95 or (None, None)
        route = run_route(r)
        usage, env = m.llm_usage, m.env_usage
        rows.append(
            {
                **{k: getattr(m, k) for k in _IDENTITY},
                "stack": r.stack.label,
                "repeat": r.repeat,
                **{k: getattr(m, k) for k in ("status", "eval_hash", "baseline")},
                "best": m.best_score,
                "improvement": m.improvement,
                "outcome_improvement": o.improvement if o else None,
                "integrity_flags": ",".join(run_flags(m)),
                "flagged": counts_as_flagged(run_flags(m)),
                "improvement_ci_lo": lo,
                "improvement_ci_hi": hi,
                **{k: getattr(m, k) for k in _RUN_COLUMNS},
                "total_tokens": usage.total_tokens if usage else None,
                "cost_usd": usage.cost_usd if usage else None,
                "env_steps": env.steps if env else None,
                "route": route.route.label,
                "best_route": route.best_route.label,
                "failures": ", ".join(sorted({f.kind for f in run_failures(m)})),
                "run_dir": str(r.run_dir) if r.run_dir else None,
            }
        )
    return rows


def submission_rows(runs: list[StudyRun]) -> list[dict[str, Any]]:
    return [
        {
            "run_id": r.metrics.run_id,
            "task": r.metrics.task,
            "stack": r.stack.label,
            "repeat": r.repeat,
            "submission_id": p.id,
            "t": p.t,
            "score": p.score,
            "improvement": (
                p.score - r.metrics.baseline
                if p.score is not None and r.metrics.baseline is not None and p.comparable
                else None
            ),
            **{k: getattr(p, k) for k in _SUBMISSION_COLUMNS},
        }
        for r in runs
        for p in r.metrics.trajectory
    ]


def main_table_rows(runs: list[StudyRun], *, raw: bool = False) -> list[dict[str, Any]]:
    """The paper's main table (module docstring): task rows, per-stack best / delta columns.

    Stacks are columns in the order first seen (the study's matrix order); tasks likewise.
    The baseline is the mean over the task's runs (one base model: the same number). Runs
    without a baseline (failed before grading it) are left out of every mean. A flagged run
    counts as its base model unless ``raw``
    (:func:`~agent2rl.analysis.dashboard.counting.counted`); ``flagged`` counts them either way.
    """
    tasks: dict[str, list[float]] = {}
    flagged: Counter[str] = Counter()
    cells: dict[tuple[str, str], list[tuple[float, float]]] = {}
    stacks = list(dict.fromkeys(r.stack.label for r in runs))
    for r in runs:
        c = counted(r.metrics, raw=raw)
        label = r.stack.label
        tasks.setdefault(r.metrics.task, [])
        flagged[r.metrics.task] += counts_as_flagged(run_flags(r.metrics))
        if c is None:
            continue
        tasks[r.metrics.task].append(c.baseline)
        cells.setdefault((r.metrics.task, label), []).append((c.best, c.improvement))
    rows = []
    for task, baselines in tasks.items():
        row: dict[str, Any] = {
            "task": task,
            "baseline": sum(baselines) / len(baselines) if baselines else None,
        }
        for label in stacks:
            got = cells.get((task, label), [])
            row[f"{label} best"] = sum(b for b, _ in got) / len(got) if got else None
            row[f"{label} delta"] = sum(d for _, d in got) / len(got) if got else None
        row["flagged"] = flagged[task]
        rows.append(row)
    return rows


def export(study_dir: Path, out: Path | None = None) -> dict[str, Path]:
    """Write the four tables and the coverage chart (see the module docstring) and return
    their paths by file name."""
    runs, _ = load_runs(study_dir)
    out = Path(out) if out else Path(study_dir).expanduser().resolve() / "export"
    return write_export(runs, out, f"Task coverage: {Path(study_dir).expanduser().name}")


def write_export(runs: list[StudyRun], out: Path, title: str = "Task coverage") -> dict[str, Path]:
    """:func:`export`'s files for ``runs`` into ``out`` (created); ``title`` heads the
    coverage chart. Every file is written atomically (temp file, then rename)."""
    import pandas as pd

    out.mkdir(parents=True, exist_ok=True)
    paths: dict[str, Path] = {}
    coverage = task_coverage(runs)
    tables = (
        ("runs", run_rows(runs)),
        ("submissions", submission_rows(runs)),
        ("main_table", main_table_rows(runs)),
        ("task_coverage", coverage_rows(coverage)),
    )
    for name, rows in tables:
        frame = pd.DataFrame(rows)
        for suffix, write in (("csv", frame.to_csv), ("parquet", frame.to_parquet)):
            path = out / f"{name}.{suffix}"
            tmp = path.with_name(f".{path.name}.tmp")
            write(tmp, index=False)
            tmp.replace(path)  # readers never see half a file
            paths[path.name] = path
    svg = out / "task_coverage.svg"
    write_text_atomic(svg, coverage_svg(coverage, title))
    paths[svg.name] = svg
    return paths
