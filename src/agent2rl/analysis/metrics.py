"""Per-run metrics, computed only from a finished run directory (never from live state).

Reads ``run.json``, ``ledger.db``, the per-item result files the grader wrote, the code
snapshots in ``record/code.git`` and, if present, ``record/resources.jsonl``. Everything returned
is plain JSON (numbers, strings, lists, dicts, None) and deterministic: the bootstrap uses a fixed
seed, so computing the metrics twice gives byte-identical ``metrics.json``.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from agent2rl.analysis.noise import compare_items, load_item_scores, read_jsonl
from agent2rl.envs.ledger import summarize_env
from agent2rl.grading.ledger import Ledger, Rejection, Submission
from agent2rl.recording.snapshot import EMPTY_TREE
from agent2rl.recording.usage import summarize_usage
from agent2rl.rundir import RunInfo, RunPaths

# A snapshot id must look like a commit id; anything else is never handed to git, so a bad
# ledger value can neither be read as an option nor name an arbitrary ref.
_COMMIT_RE = re.compile(r"^[0-9a-fA-F]{4,64}$")


# -- inputs ------------------------------------------------------------------------------------
def resource_summary(path: Path) -> dict[str, Any] | None:
    """Peak RSS, mean CPU and peak process count from ``record/resources.jsonl``.

    Returns None when the file is missing or holds no usable sample. A field missing from every
    sample is reported as None.
    """
    path = Path(path)
    if not path.is_file():
        return None
    samples = read_jsonl(path)
    if not samples:
        return None

    def nums(key: str) -> list[float]:
        return [
            float(s[key])
            for s in samples
            if isinstance(s.get(key), int | float) and not isinstance(s.get(key), bool)
        ]

    rss, cpu, procs, ts = nums("rss_bytes"), nums("cpu_percent"), nums("n_procs"), nums("t")
    return {
        "n_samples": len(samples),
        "peak_rss_bytes": int(max(rss)) if rss else None,
        "mean_cpu_percent": float(np.mean(cpu)) if cpu else None,
        "peak_cpu_percent": float(max(cpu)) if cpu else None,
        "max_procs": int(max(procs)) if procs else None,
        "span_s": float(max(ts) - min(ts)) if ts else None,
    }


# -- git ---------------------------------------------------------------------------------------
def _git(git_dir: Path, *args: str) -> str | None:
    """stdout of ``git --git-dir=<git_dir> <args>``, or None if git or the repo is unusable."""
    if not Path(git_dir).is_dir():
        return None
    try:
        proc = subprocess.run(
            ["git", f"--git-dir={git_dir}", *args],
            capture_output=True,
            check=False,
            timeout=120,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if proc.returncode != 0:
        return None
    return proc.stdout.decode("utf-8", errors="replace")


def _is_commit_id(value: str | None) -> bool:
    return value is not None and bool(_COMMIT_RE.match(value))


def diff_numstat(git_dir: Path, old: str, new: str) -> tuple[int, int] | None:
    """(lines added, lines removed) between two commits (or trees) of ``git_dir``.

    Binary files (``-`` in numstat) are ignored. Renames are detected (``-M``) so a moved file
    counts only its edits. Returns None when the repo or either id is missing or invalid.
    """
    if not (_is_commit_id(old) and _is_commit_id(new)):
        return None
    out = _git(git_dir, "diff", "--numstat", "-M", "--no-ext-diff", "--no-textconv", old, new)
    if out is None:
        return None
    added = removed = 0
    for line in out.splitlines():
        parts = line.split("\t", 2)
        if len(parts) < 3 or not (parts[0].isdigit() and parts[1].isdigit()):
            continue
        added += int(parts[0])
        removed += int(parts[1])
    return added, removed


def snapshot_diff(git_dir: Path, old: str, new: str) -> str | None:
    """The unified diff between two commits of ``git_dir`` as text (binary files summarised).

    Returns None when the repo or either id is missing or invalid; an empty string when the two
    snapshots hold the same code.
    """
    if not (_is_commit_id(old) and _is_commit_id(new)):
        return None
    return _git(git_dir, "diff", "-M", "--no-color", "--no-ext-diff", "--no-textconv", old, new)


def code_changes(git_dir: Path, submissions: Sequence[Submission]) -> list[dict[str, Any]]:
    """Lines added/removed by each submission relative to the previous snapshotted submission.

    The first snapshot is compared with the empty tree. A submission without a snapshot (or
    whose snapshot git cannot read) gets ``added``/``removed`` None and does not become the next
    comparison base. Each entry: ``id``, ``snapshot``, ``base`` (the id compared against, or
    None), ``added``, ``removed``.
    """
    out: list[dict[str, Any]] = []
    base = EMPTY_TREE
    for sub in submissions:
        entry: dict[str, Any] = {
            "id": sub.id,
            "snapshot": sub.snapshot,
            "base": None,
            "added": None,
            "removed": None,
        }
        stat = diff_numstat(git_dir, base, sub.snapshot) if sub.snapshot else None
        if stat is not None:
            entry.update(base=base, added=stat[0], removed=stat[1])
            base = sub.snapshot  # type: ignore[assignment]
        out.append(entry)
    return out


# -- metrics -----------------------------------------------------------------------------------
def _rel(paths: RunPaths, rel: str | None) -> Path | None:
    return paths.root / rel if rel else None


def _items_for(paths: RunPaths, sub: Submission, by_id: dict[int, Submission]) -> Path | None:
    """The per-item file of ``sub``; a duplicate without its own falls back to its original's."""
    if sub.items_path:
        return _rel(paths, sub.items_path)
    original = by_id.get(sub.duplicate_of) if sub.duplicate_of is not None else None
    return _rel(paths, original.items_path) if original else None


def _noise(
    paths: RunPaths, baseline: dict[str, Any] | None, subs: Sequence[Submission]
) -> dict[int, dict[str, Any]]:
    """Per valid submission: its score interval and the paired interval against the baseline
    (see :func:`compare_items`), plus ``comparable``: False when its eval hash differs from
    the baseline's, in which case no improvement interval is given."""
    base_path = _rel(paths, (baseline or {}).get("items_path"))
    base_items = load_item_scores(base_path) if base_path else None
    base_hash = (baseline or {}).get("eval_hash")
    by_id = {s.id: s for s in subs}
    out: dict[int, dict[str, Any]] = {}
    for sub in subs:
        if not sub.valid:
            continue
        path = _items_for(paths, sub, by_id)
        comparable = not (base_hash and sub.eval_hash and sub.eval_hash != base_hash)
        items = load_item_scores(path) if path else None
        out[sub.id] = {
            **compare_items(items, base_items if comparable else None),
            "comparable": comparable,
        }
    return out


def _confidence(best: Submission | None, noise: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """The best submission's intervals, under the names the report and results use."""
    entry = noise.get(best.id, {}) if best is not None else {}
    return {
        "improvement_ci95": entry.get("improvement_ci95"),
        "best_score_ci95": entry.get("score_ci95"),
        "within_noise": entry.get("within_noise"),
        "n_items_paired": entry.get("n_items_paired"),
    }


def _monotonic_ratio(scores: Sequence[float]) -> float | None:
    if len(scores) < 2:
        return None
    ups = sum(1 for prev, cur in zip(scores, scores[1:], strict=False) if cur >= prev)
    return ups / (len(scores) - 1)


def _trajectory(
    subs: Sequence[Submission], t0: float, noise: dict[int, dict[str, Any]]
) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    best: float | None = None
    for s in subs:
        if s.valid:
            best = s.score if best is None else max(best, s.score)  # type: ignore[type-var]
        out.append(
            {
                "id": s.id,
                "t": s.submitted_at - t0,
                "score": s.score if s.valid else None,
                "best_so_far": best,
                "status": s.status,
                "is_copy": s.is_copy,
                "duplicate_of": s.duplicate_of,
                "error": s.error,
                "path": s.path,
                "eval_seconds": s.eval_seconds,
                "eval_hash": s.eval_hash,
                "score_ci95": noise.get(s.id, {}).get("score_ci95"),
                "improvement_ci95": noise.get(s.id, {}).get("improvement_ci95"),
                "within_noise": noise.get(s.id, {}).get("within_noise"),
                "comparable": noise.get(s.id, {}).get("comparable"),
            }
        )
    return out


def _rejection_dict(r: Rejection, t0: float) -> dict[str, Any]:
    return {
        "id": r.id,
        "t": r.at - t0,
        "path": r.path,
        "http_status": r.http_status,
        "reason": r.reason,
    }


def _agent_view(paths: RunPaths) -> dict[str, Any]:
    """From ``record/agent.json`` (written after the agent stops): the agent log's summary
    (events, the CLI's own token counts), the training methods found in its code and where
    they contradict its mode. All None when the file is missing or unreadable."""
    try:
        view = json.loads((paths.record / "agent.json").read_text())
    except (OSError, ValueError):
        view = {}
    if not isinstance(view, dict):
        view = {}
    return {
        "agent_log": view.get("log"),
        "methods": view.get("methods"),
        "mode_flags": view.get("mode_flags"),
    }


def group_scores(path: Path | None) -> dict[str, dict[str, float]] | None:
    """Per-item results broken down by ``meta.group`` (an episode's task type):
    ``{group: {"n": items, "score": 0-100 mean}}``. None when the file is missing or no item
    carries a group."""
    if path is None or not Path(path).is_file():
        return None
    sums: dict[str, list[float]] = {}
    for row in read_jsonl(Path(path)):
        meta = row.get("meta")
        group = meta.get("group") if isinstance(meta, dict) else None
        if group is not None and isinstance(row.get("score"), int | float):
            sums.setdefault(str(group), []).append(float(row["score"]))
    if not sums:
        return None
    return {g: {"n": len(v), "score": 100.0 * sum(v) / len(v)} for g, v in sorted(sums.items())}


def _breakdown(
    paths: RunPaths, baseline: dict[str, Any] | None, best: Submission | None, subs: list
) -> dict[str, Any] | None:
    """The baseline's and the best submission's scores per item group (None: no groups)."""
    base = group_scores(_rel(paths, (baseline or {}).get("items_path")))
    top = group_scores(_items_for(paths, best, {s.id: s for s in subs})) if best else None
    if base is None and top is None:
        return None
    return {"baseline": base, "best": top}


def _finite(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None


def compute_metrics(paths: RunPaths) -> dict[str, Any]:
    """All per-run metrics of a finished run directory as a JSON-serialisable dict.

    Times are seconds since ``start`` (the budget clock); a run that never started uses
    ``created_at`` as the origin. Scores are 0-100. Edge cases:

    - no ``ledger.db`` (the run failed before grading): zero submissions, no baseline;
    - no valid submission: ``best_score``, ``improvement``, the intervals, ``time_to_best``
      and ``first_valid_idx`` are None; no baseline: ``improvement`` and
      ``time_to_first_improvement`` are None;
    - missing per-item files: the intervals and ``within_noise`` are None; only items present
      in both the baseline's and the best's files are paired;
    - ``monotonic_ratio`` needs two valid submissions, ``time_used_ratio`` needs ``start``,
      ``ended_at`` and a positive budget (it is clipped to [0, 1]);
    - ``code_changes`` entries have None counts where a snapshot is missing or unreadable;
      ``total_lines_changed`` sums the known ones (added + removed).
    """
    info = RunInfo.load(paths)
    subs: list[Submission] = []
    rejections: list[Rejection] = []
    baseline: dict[str, Any] | None = None
    if paths.ledger.is_file():
        with Ledger(paths.ledger) as ledger:
            subs = ledger.submissions()
            rejections = ledger.rejections()
            baseline = ledger.get_meta("baseline")
    if not isinstance(baseline, dict):
        baseline = None
    base_score = _finite(baseline.get("score")) if baseline else None

    t0 = info.start if info.start is not None else info.created_at
    valid = [s for s in subs if s.valid]
    # Same rule as Ledger.best(): highest score, earliest id wins ties.
    best = max(valid, key=lambda s: (s.score, -s.id)) if valid else None
    first_valid_idx = next((i for i, s in enumerate(subs, 1) if s.valid), None)
    first_better = (
        next((s for s in valid if s.score > base_score), None)  # type: ignore[operator]
        if base_score is not None
        else None
    )
    duration = (
        info.ended_at - info.start if info.ended_at is not None and info.start is not None else None
    )
    time_used = (
        min(1.0, max(0.0, duration / info.budget_s))
        if duration is not None and info.budget_s and info.budget_s > 0
        else None
    )
    changes = code_changes(paths.code_git, subs)
    noise = _noise(paths, baseline, subs)
    best_comparable = best is None or noise.get(best.id, {}).get("comparable", True)

    metrics: dict[str, Any] = {
        "run_id": info.run_id,
        "task": info.task,
        "task_version": info.task_version,
        "level": info.level,
        "agent": info.agent,
        "driver": info.driver,
        "mode": info.mode,
        "model": info.model,
        "status": info.status,
        "error": info.error,
        "budget_s": info.budget_s,
        "start": info.start,
        "deadline": info.deadline,
        "ended_at": info.ended_at,
        "duration_s": duration,
        "baseline": base_score,
        "baseline_n_items": baseline.get("n_items") if baseline else None,
        "best_score": best.score if best else None,
        "best_submission_id": best.id if best else None,
        "eval_hash": baseline.get("eval_hash") if baseline else None,
        # A best graded under other evaluation settings than the baseline has no improvement.
        "improvement": (
            best.score - base_score  # type: ignore[operator]
            if best is not None and base_score is not None and best_comparable
            else None
        ),
        **_confidence(best, noise),
        "submissions": len(subs),
        "valid_submissions": len(valid),
        "valid_submission_rate": len(valid) / len(subs) if subs else None,
        "first_valid_idx": first_valid_idx,
        "time_to_first_improvement": first_better.submitted_at - t0 if first_better else None,
        "time_to_best": best.submitted_at - t0 if best else None,
        "monotonic_ratio": _monotonic_ratio([s.score for s in valid]),  # type: ignore[misc]
        "copy_model_count": sum(1 for s in subs if s.is_copy),
        "duplicate_count": sum(1 for s in subs if s.duplicate_of is not None),
        "rejected_attempts": len(rejections),
        "time_used_ratio": time_used,
        "last_submit_gap": (
            info.deadline - subs[-1].submitted_at if subs and info.deadline is not None else None
        ),
        "code_changes": changes,
        "total_lines_changed": sum(
            c["added"] + c["removed"] for c in changes if c["added"] is not None
        ),
        "trajectory": _trajectory(subs, t0, noise),
        "rejections": [_rejection_dict(r, t0) for r in rejections],
        "resources": resource_summary(paths.resources),
        # Tokens the agent's LLM used, as the metering proxy recorded them (None: no proxy).
        "llm_usage": summarize_usage(paths.llm_usage) if paths.llm_usage.is_file() else None,
        "token_budget": info.token_budget,
        # Level 3: what the agent played through the rollout service (None: no service).
        "env_usage": summarize_env(paths.env_db, t0),
        "group_scores": _breakdown(paths, baseline, best, subs),
        **_agent_view(paths),
    }
    return metrics
