"""Reading finished run directories into :class:`~agent2rl.analysis.dashboard.runset.StudyRun`\\ s.

This is the one impure part of the cross-run analysis: it reads ``report/metrics.json`` and
the evidence that file does not hold:

- the training methods in the agent's code at each submission (the code snapshot the
  grading service took, ``record/code.git``; only files under ``code/``, so that the prompt
  and the task's own text, which name methods, are not read as the agent's code), and at the
  end of the run;
- the agent's own progress lines that name a method (plain-text lines of ``agent.log``,
  timed when they start with ``[HH:MM:SS]``; a line saying a method was not run is left out);
- environment steps through the rollout service (online rollouts);
- the cumulative token count per metered LLM request (``record/llm_usage.jsonl``).

Everything read here is recorded by the harness or written by the agent and shown with its
artifact, never trusted as a score.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import replace
from datetime import datetime, timedelta
from itertools import accumulate
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from agent2rl.agents.methods import detect_methods
from agent2rl.analysis.dashboard.runset import Evidence, StudyRun
from agent2rl.analysis.report.run_metrics import (
    CodeChange,
    RejectedAttempt,
    RunMetrics,
    TrajectoryPoint,
)
from agent2rl.files import read_jsonl_tolerant
from agent2rl.run_record import RunRecord
from agent2rl.rundir import RunPaths

_CODE_SUFFIXES = (".py", ".sh", ".yaml", ".yml", ".toml", ".json", ".cfg")
_STAMP = re.compile(r"^\[(\d{1,2}):(\d{2}):(\d{2})\]")
_PATH = re.compile(r"\S*/\S*")
#: a line that says a method was not run ("no time for another GRPO round") is no evidence
_NEGATION = re.compile(r"(?i)\b(no|not|never|skip(?:ped|ping)?|without|cannot|can't|won't)\b")
#: log lines longer than this are not read as the agent's own progress lines (a prompt echo
#: or a JSON event would otherwise name every method the prompt mentions)
MAX_LOG_LINE = 300
MAX_LOG_LINES = 50_000


def families(methods: Iterable[str]) -> frozenset[str]:
    """``sft`` and/or ``rl`` from :func:`~agent2rl.agents.methods.detect_methods`' names."""
    return frozenset(methods) & {"sft", "rl"}


def code_evidence(run_dir: Path, m: RunMetrics) -> list[Evidence]:
    """Methods in the code at each submission (when they change) and at the end."""
    record = RunRecord(run_dir)
    snapshots = {c.id: c.snapshot for c in m.code_changes if c.snapshot}
    out: list[Evidence] = []
    seen: dict[str, frozenset[str]] = {}
    last: frozenset[str] | None = None
    for p in m.trajectory:
        snap = snapshots.get(p.id)
        if not snap or not record.paths.code_git.is_dir():
            continue
        if snap not in seen:
            text = record.git.files_text(snap, "code", _CODE_SUFFIXES)
            seen[snap] = families(detect_methods(text)) if text is not None else frozenset()
        fam = seen[snap]
        if fam != last:
            detail = f"code at submission #{p.id}: {', '.join(sorted(fam)) or 'no training method'}"
            out.append(
                Evidence("code", p.t, fam, detail, f"snapshot {snap[:10]} (submission #{p.id})")
            )
            last = fam
    final = m.methods if m.methods is not None else sorted(detect_methods(record.paths.code))
    fam = families(final)
    if fam:
        detail = f"code at the end: {', '.join(sorted(final))}"
        out.append(Evidence("code", m.duration_s, fam, detail, "workspace/code/"))
    return out


def log_evidence(run_dir: Path, m: RunMetrics) -> list[Evidence]:
    """The agent's short plain-text lines that name SFT or RL: the first of each method,
    and each switch between them. Lines that say a method was not run (``no``, ``not``,
    ``skip``...) are left out. A ``[HH:MM:SS]`` prefix is read as local time on the run's
    day (the reference agents' format) and becomes ``t``; other lines have no time."""
    path = RunPaths(run_dir).agent_log
    if not path.is_file():
        return []
    start = datetime.fromtimestamp(m.start) if m.start is not None else None
    out: list[Evidence] = []
    last: frozenset[str] | None = None
    with open(path, encoding="utf-8", errors="replace") as fh:
        for lineno, line in enumerate(fh, 1):
            if lineno > MAX_LOG_LINES:
                break
            line = line.strip()
            skip = not line or len(line) > MAX_LOG_LINE or line.startswith(("{", "[{", '"'))
            if skip or _NEGATION.search(line):
                continue
            # Paths name things after the agent (".../reference-grpo-1a2b/output/v1"), not
            # after what ran: they are not read.
            fam = families(detect_methods(_PATH.sub(" ", line)))
            if not fam or fam == last:
                continue
            out.append(Evidence("log", _line_time(line, start), fam, line, f"agent.log:{lineno}"))
            last = fam
    return out


def _line_time(line: str, start: datetime | None) -> float | None:
    match = _STAMP.match(line)
    if not match or start is None:
        return None
    h, mi, s = (int(g) for g in match.groups())
    at = start.replace(hour=h, minute=mi, second=s, microsecond=0)
    if at < start - timedelta(hours=12):  # the run crossed midnight
        at += timedelta(days=1)
    return (at - start).total_seconds()


def rollout_evidence(m: RunMetrics) -> list[Evidence]:
    """Environment steps through the rollout service: online rollouts, RL's evidence."""
    env = m.env_usage
    if env is None or env.steps <= 0:
        return []
    detail = (
        f"{env.steps} environment steps in {env.episodes} episodes "
        f"({env.won_episodes} won) through the rollout service"
    )
    return [Evidence("rollout", env.first_step_t, frozenset({"rl"}), detail, "record/env.db")]


def token_timeline(run_dir: Path, m: RunMetrics) -> tuple[tuple[float, int], ...]:
    """``(t, cumulative tokens)`` per metered request in time order, t in seconds since the
    start; input + output tokens, as a token budget counts them. Lines without a time (none
    the proxy writes) are left out."""
    path = RunPaths(run_dir).llm_usage
    if not path.is_file() or m.start is None:
        return ()
    requests: list[tuple[float, int]] = []
    for line in read_jsonl_tolerant(path):
        t = line.get("time")
        if not isinstance(t, int | float):
            continue
        tokens = sum(
            int(line[k])
            for k in ("input_tokens", "output_tokens")
            if isinstance(line.get(k), int | float)
        )
        requests.append((float(t) - m.start, max(tokens, 0)))
    requests.sort()
    return tuple(zip((t for t, _ in requests), accumulate(n for _, n in requests), strict=True))


def _known(data: Any, model: type[BaseModel]) -> Any:
    """``data`` with only the keys ``model`` declares (a dict; anything else unchanged)."""
    if not isinstance(data, dict):
        return data
    return {k: v for k, v in data.items() if k in model.model_fields}


def read_metrics(path: Path) -> RunMetrics | None:
    """A ``metrics.json`` as :class:`RunMetrics`; None when it is missing or unreadable.

    A file written by another version of the harness may carry fields this one does not
    know (``RunMetrics`` refuses unknown keys): they are dropped, at the top level and in the
    lists of submissions, code changes and rejections, so that a study keeps its older and
    newer runs in one analysis. A file that still does not validate gives None.
    """
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    try:
        return RunMetrics.from_json(data)
    except ValidationError:
        pass
    if not isinstance(data, dict):
        return None
    data = _known(data, RunMetrics)
    for key, model in (
        ("trajectory", TrajectoryPoint),
        ("code_changes", CodeChange),
        ("rejections", RejectedAttempt),
    ):
        if isinstance(data.get(key), list):
            data[key] = [_known(x, model) for x in data[key]]
    try:
        return RunMetrics.from_json(data)
    except ValidationError:
        return None


def load_run(
    run_dir: Path, repeat: int | None = None, labels: dict[str, str] | None = None
) -> StudyRun | None:
    """A run directory as a :class:`StudyRun`; None when it has no readable
    ``report/metrics.json`` (a run whose report was never written)."""
    run_dir = Path(run_dir)
    m = read_metrics(RunPaths(run_dir).metrics_json)
    if m is None:
        return None
    evidence = code_evidence(run_dir, m) + log_evidence(run_dir, m) + rollout_evidence(m)
    return StudyRun(
        m, run_dir, repeat, tuple(evidence), token_timeline(run_dir, m), dict(labels or {})
    )


def load_runs_dir(runs_dir: Path) -> list[StudyRun]:
    """Every run directly under a plain runs directory (a directory with a ``run.json``) that
    has a report, oldest first, with a repeat index per group in that order."""
    dirs = sorted(p.parent for p in Path(runs_dir).glob("*/run.json"))
    runs = [r for d in dirs if (r := load_run(d)) is not None]
    runs.sort(key=lambda r: (r.metrics.start or 0, r.run_id))
    counter: Counter[tuple] = Counter()
    for i, r in enumerate(runs):
        k = (r.metrics.task, r.metrics.model, r.stack)
        runs[i] = replace(r, repeat=counter[k])
        counter[k] += 1
    return runs
