"""A study directory's counted runs, for the analysis, the dashboard and the export.

In a study directory (``study.db``) only each finished slot's run counts: attempts that were
interrupted or failed keep their run directories on disk (evidence of what happened) but are
not analysed, so a resumed study never counts a slot twice. A plain runs directory (no
``study.db``) gives every run that has a report.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from agent2rl.analysis.dashboard.evidence import load_run, load_runs_dir
from agent2rl.analysis.dashboard.page import Overview
from agent2rl.analysis.dashboard.runset import StudyRun
from agent2rl.errors import UserError
from agent2rl.formatting import format_duration
from agent2rl.study.state import AttemptStatus, SlotStatus, is_study_dir, read_state


def load_runs(path: Path) -> tuple[list[StudyRun], Overview]:
    """The runs of a study directory or a plain runs directory, and the dashboard's
    overview of them. Raises :class:`UserError` when ``path`` holds neither."""
    path = Path(path).expanduser().resolve()
    if not path.is_dir():
        raise UserError(f"{path} is not a directory: pass a study directory or a runs directory")
    if is_study_dir(path):
        return _study_runs(path)
    runs = load_runs_dir(path)
    if not runs:
        raise UserError(
            f"no finished run with a report under {path}: pass a study directory "
            "(`agent2rl study run --out DIR`) or a runs directory"
        )
    overview = Overview(
        f"agent2rl runs: {path.name}",
        [
            ("directory", str(path)),
            ("runs", str(len(runs))),
            ("tasks", ", ".join(sorted({r.metrics.task for r in runs}))),
            ("stacks", ", ".join(sorted({r.stack.label for r in runs}))),
        ],
        ["A plain runs directory: every run with a report is shown (no study state)."],
    )
    return runs, overview


def _study_runs(path: Path) -> tuple[list[StudyRun], Overview]:
    meta, slots, attempts = read_state(path)
    loaded = [
        load_run(Path(s.run_dir), s.repeat, {"slot": s.key, "attempts": str(s.attempts)})
        for s in slots
        if s.status == SlotStatus.FINISHED and s.run_dir
    ]
    runs = [run for run in loaded if run is not None]
    missing = len(loaded) - len(runs)
    spec = meta.get("spec") or {}
    counts = Counter(s.status for s in slots)
    budget = (meta.get("run_settings") or {}).get("budget_s")
    interrupted = sum(a.status == AttemptStatus.INTERRUPTED for a in attempts)
    failed = sum(a.status == AttemptStatus.FAILED for a in attempts)
    lines = [
        ("study", str(meta.get("name"))),
        ("directory", str(path)),
        ("tasks", ", ".join(spec.get("tasks", []))),
        (
            "agents",
            ", ".join(Path(a).stem if a.endswith(".toml") else a for a in spec.get("agents", [])),
        ),
        ("models", ", ".join(spec.get("models", []))),
        ("repeats", str(spec.get("repeats"))),
        ("budget", format_duration(budget) if budget else "-"),
        ("slots", ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))),
        ("attempts", f"{len(attempts)} ({interrupted} interrupted, {failed} failed)"),
        ("runs shown", f"{len(runs)} (one per finished slot)"),
    ]
    notes = []
    if missing:
        notes.append(
            f"{missing} finished run(s) have no readable report/metrics.json and are left out."
        )
    unfinished = len(slots) - counts[SlotStatus.FINISHED]
    if unfinished:
        notes.append(f"{unfinished} slot(s) not finished yet: `agent2rl study run` resumes them.")
    return runs, Overview(f"agent2rl study: {meta.get('name')}", lines, notes)
