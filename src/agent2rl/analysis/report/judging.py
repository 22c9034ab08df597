"""What a judge-based run's judge did: its cost over the run's gradings and the judged metrics
of the baseline and the best submission.

Read from the grading directories only: each evaluation's ``judge_usage.jsonl`` (one line
per judge request, written by :class:`~agent2rl.scoring.llm_client.LLMMeter`) and the
``details`` of its ``result.json`` (:meth:`agent2rl.scoring.Judge.details`). A baseline
taken from the cache has no usage file: it cost this run nothing. A run of a task without a
judge has neither, and no summary.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from agent2rl.metering.usage import read_usage, summarize_usage
from agent2rl.rundir import RunPaths
from agent2rl.scoring.judges.win_rates import LC_V1

#: the usage file's name in a grading directory (:data:`agent2rl.scoring.judges.USAGE_FILE`)
USAGE_FILE = "judge_usage.jsonl"
#: the judged metrics shown for the baseline and the best submission
METRICS = (
    "metric",
    "win_rate",
    "standard_error",
    "length_controlled_winrate",
    "lc_standard_error",
    "lc_glm",
    "n_wins",
    "n_draws",
    "n_total",
    "unjudged",
    "avg_length",
    "reference_avg_length",
)

#: the usage summaries' counts that add up over the run's gradings
_SUMMED = (
    "requests",
    "errors",
    "input_tokens",
    "output_tokens",
    "cached_tokens",
    "total_tokens",
    "unpriced_requests",
)


class JudgeSummary(BaseModel):
    """The judge's totals over every grading of the run (requests actually sent, failed ones
    included; cache hits cost nothing) and the judged metrics of the baseline and the best
    submission (``None``: not judged, e.g. no valid submission)."""

    model_config = ConfigDict(extra="allow", frozen=True)

    metric: str | None = None
    """The score's metric: ``length_controlled_winrate`` or ``win_rate`` (the baseline's)."""
    evaluations: int = 0
    requests: int = 0
    errors: int = 0
    cache_hits: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    total_tokens: int = 0
    cost_usd: float = 0.0
    unpriced_requests: int = 0
    baseline: dict[str, Any] | None = None
    best: dict[str, Any] | None = None


def grading_dirs(paths: RunPaths) -> list[Path]:
    """The run's grading directories: the baseline's, then each submission's."""
    return [paths.baseline_dir, *sorted((paths.grading / "submissions").glob("*"))]


def result_details(result: Path) -> dict[str, Any] | None:
    """The ``details`` object of an evaluation's ``result.json`` (None: missing, unreadable)."""
    try:
        details = json.loads(result.read_text()).get("details")
    except (OSError, ValueError, AttributeError):
        return None
    return details if isinstance(details, dict) else None


def _details(result: Path) -> dict[str, Any] | None:
    details = result_details(result)
    return details if details is not None and "judge" in details else None


def _metrics(items: Path | None) -> dict[str, Any] | None:
    details = _details(items.parent / "result.json") if items is not None else None
    return {k: details.get(k) for k in METRICS if k in details} if details else None


def judge_summary(
    paths: RunPaths, baseline_items: Path | None, best_items: Path | None
) -> JudgeSummary | None:
    """The run's :class:`JudgeSummary`; None when no grading of the run used a judge.

    ``baseline_items`` / ``best_items`` are the per-item files of the baseline and the best
    submission (their ``result.json`` lies beside them)."""
    dirs = grading_dirs(paths)
    judged = [(d, det) for d in dirs if (det := _details(d / "result.json")) is not None]
    usage_files = [d / USAGE_FILE for d in dirs if (d / USAGE_FILE).is_file()]
    if not judged and not usage_files:
        return None
    parts = [summarize_usage(path) for path in usage_files]
    totals = {key: sum(part[key] for part in parts) for key in _SUMMED}
    # a failed evaluation (a judge outage) has usage lines but no result.json
    evaluations = len({*(d for d, _ in judged), *(p.parent for p in usage_files if read_usage(p))})
    base = _metrics(baseline_items)
    return JudgeSummary(
        metric=(base or {}).get("metric") or next((det.get("metric") for _, det in judged), None),
        evaluations=evaluations,
        cache_hits=sum(int((det.get("judge") or {}).get("cache_hits") or 0) for _, det in judged),
        **totals,
        cost_usd=round(sum((part["cost_usd"] for part in parts), 0.0), 6),
        baseline=base,
        best=_metrics(best_items),
    )


def _rate(m: dict[str, Any], key: str, se: str) -> str:
    value = m.get(key)
    if value is None:
        return "—"
    err = m.get(se)
    return f"{value:.2f}" + (f" ± {err:.2f}" if isinstance(err, int | float) else "")


def _side(name: str, m: dict[str, Any] | None) -> str:
    if not m:
        return f"{name}: not judged."
    # the leaderboard's GLM is plain "LC"; another (alpaca-lite's minimal one) is named
    glm = m.get("lc_glm")
    label = "LC win rate" + (f" ({glm} GLM)" if glm and glm != LC_V1 else "")
    lc = (
        f", {label} {_rate(m, 'length_controlled_winrate', 'lc_standard_error')}"
        if m.get("length_controlled_winrate") is not None
        else ""
    )
    length = m.get("avg_length")
    ref = m.get("reference_avg_length")
    lengths = (
        f"; average length {length:,.0f} characters vs the reference's {ref:,.0f}"
        if isinstance(length, int | float) and isinstance(ref, int | float)
        else ""
    )
    return f"{name}: win rate {_rate(m, 'win_rate', 'standard_error')}{lc}{lengths}."


def judge_text(j: JudgeSummary | None) -> str:
    """One paragraph for the report: which metric the score is, the judged metrics of the
    baseline and the best submission (win rate and LC win rate with standard errors, the
    average output length against the reference's), and the judge's requests, tokens and
    cost over the run."""
    if j is None:
        return "No judge in this task."
    metric = {
        "length_controlled_winrate": "the length-controlled (LC) win rate",
        "win_rate": "the raw win rate (no LC data in the task store)",
    }.get(j.metric or "", j.metric or "—")
    cost = f"${j.cost_usd:.4f}" + (
        f" (lower bound: {j.unpriced_requests} requests on unpriced models)"
        if j.unpriced_requests
        else ""
    )
    return (
        f"Score: {metric}. {_side('Baseline', j.baseline)} {_side('Best', j.best)} "
        f"Judge: {j.requests:,} requests ({j.errors} errors, {j.cache_hits:,} answered from "
        f"the cache) over {j.evaluations} evaluations, {j.input_tokens:,} input and "
        f"{j.output_tokens:,} output tokens; estimated cost {cost}."
    )
