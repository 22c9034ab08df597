"""The runs a cross-run analysis works on, and the rules every analysis shares.

A :class:`StudyRun` is one finished run as the cross-run modules see it: its
:class:`RunMetrics` (``report/metrics.json``), where it lives, its repeat index in a study,
and the evidence read from its directory that ``metrics.json`` does not hold (the methods in
each code snapshot, the agent's own progress lines, the token timeline), collected by
:mod:`agent2rl.analysis.dashboard.evidence`. Everything in the analysis modules that consumes
StudyRuns is a pure function, so tests build StudyRuns by hand with known answers.

Shared rules (each analysis docstring refers here):

- **stack**: (agent, driver, mode), what the paper compares; a run of an agent without an
  LLM has neither driver nor mode; qualified by the feedback protocol and by the agent's
  confinement (:func:`isolation_label`): a run whose agent ran without the sandbox (``auto``
  on a machine without bubblewrap) or on the host's network is never pooled with sandboxed
  runs, its stack label says so (``sandbox: none``, ``network: host``);
- **group**: (task, eval hash, model, stack). Runs of one task graded under different
  evaluation settings are never pooled: such a task is split by eval hash and its column is
  labelled with the hash (:func:`column_label`), as ``agent2rl compare`` refuses to mix them;
- **outcome**: a run's (baseline, best, improvement) with the best of budget rule: its best
  valid submission graded under the baseline's settings; a run with a baseline but no such
  submission leaves the base model, so it scores its baseline (improvement 0); a run without
  a baseline (the harness failed before grading) has no outcome and counts only in ``n``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import NamedTuple

from agent2rl.analysis.report.run_metrics import RunMetrics


def isolation_label(
    sandbox: str | None, network: str | None, provider_tools: bool | int | None = None
) -> str | None:
    """How a run's confinement qualifies its stack: ``sandbox: none`` for an agent that ran
    without the sandbox, ``network: host`` for a sandboxed agent on the host's network, and
    ``provider tools`` (after either, joined by ``, ``) for a run that let the driver's
    provider-side tools through (web search past every deny list: ``--allow-provider-tools``
    or a spec such as codex-paper). None for the full confinement (``bwrap`` and
    ``services``, no provider tools) and for a record from before the identity held them
    (all None or false: nothing to tell apart)."""
    parts = []
    if sandbox == "none":
        parts.append("sandbox: none")
    elif network == "host":
        parts.append("network: host")
    if provider_tools:
        parts.append("provider tools")
    return ", ".join(parts) or None


class Stack(NamedTuple):
    """An agent stack: the agent system, its driver LLM and its operating mode, and
    ``feedback`` (``feedback: validation`` for a run of the validation feedback protocol,
    None for the default): runs of the two protocols are never pooled in one group; and
    ``isolation`` (:func:`isolation_label`): neither are runs of different confinement."""

    agent: str
    driver: str | None = None
    mode: str | None = None
    feedback: str | None = None
    isolation: str | None = None

    @property
    def label(self) -> str:
        """``reference-sft``, ``claude-code · claude-sonnet-4-5 · free``, or
        ``reference-sft · sandbox: none``."""
        parts = (self.agent, self.driver, self.mode, self.feedback, self.isolation)
        return " · ".join(x for x in parts if x)


class GroupKey(NamedTuple):
    """Runs pooled by every cross-run statistic (see the module docstring)."""

    task: str
    eval_hash: str | None
    model: str
    stack: Stack


@dataclass(frozen=True)
class Evidence:
    """One recorded fact about which training method a run used, and where it is recorded.

    ``source`` is ``code`` (methods detected in a code snapshot), ``log`` (a line the agent
    printed), ``rollout`` (environment steps through the rollout service) or
    ``submission``; ``t`` is seconds since the run's start (None: not timed, e.g. a log line
    without a timestamp); ``methods`` holds ``sft`` and/or ``rl`` (other detected methods
    are kept in ``detail``); ``ref`` names the artifact (``snapshot 1a2b3c4d
    (submission #2)``, ``agent.log:41``, ``record/env.db``).
    """

    source: str
    t: float | None
    methods: frozenset[str]
    detail: str
    ref: str


@dataclass(frozen=True)
class StudyRun:
    """One run for cross-run analysis (see the module docstring)."""

    metrics: RunMetrics
    run_dir: Path | None = None
    repeat: int | None = None
    evidence: tuple[Evidence, ...] = ()
    token_timeline: tuple[tuple[float, int], ...] = ()
    """``(seconds since start, cumulative input+output tokens)`` per metered LLM request."""
    labels: dict[str, str] = field(default_factory=dict)
    """Free-form study labels (slot key, attempt) shown in drill-downs."""

    @property
    def run_id(self) -> str:
        return self.metrics.run_id

    @property
    def stack(self) -> Stack:
        m = self.metrics
        # A validation-protocol run's best is one private grade selected on validation scores,
        # not a maximum over private ones: its own group (agent2rl.grading.final).
        feedback = "feedback: validation" if m.feedback == "validation" else None
        isolation = isolation_label(m.sandbox, m.network, m.provider_tools)
        return Stack(m.agent, m.driver, m.mode, feedback, isolation)

    @property
    def key(self) -> GroupKey:
        m = self.metrics
        return GroupKey(m.task, m.eval_hash, m.model, self.stack)


class Outcome(NamedTuple):
    baseline: float
    best: float
    improvement: float
    has_valid: bool
    """False: no valid comparable submission, the base model stands (improvement 0)."""


def outcome(m: RunMetrics) -> Outcome | None:
    """The run's (baseline, best, improvement) under the best of budget rule (module
    docstring); None for a run without a baseline."""
    if m.baseline is None:
        return None
    if m.improvement is not None and m.best_score is not None:
        return Outcome(m.baseline, m.best_score, m.improvement, True)
    return Outcome(m.baseline, m.baseline, 0.0, False)


def _task_hashes(runs: Iterable[StudyRun]) -> dict[str, set[str]]:
    """Task -> the eval hashes its runs were graded under."""
    hashes: dict[str, set[str]] = defaultdict(set)
    for r in runs:
        if r.metrics.eval_hash:
            hashes[r.metrics.task].add(r.metrics.eval_hash)
    return hashes


def assign_hashes(runs: Iterable[StudyRun]) -> list[StudyRun]:
    """Runs without an eval hash (they failed before their baseline) join their task's only
    hash when it has exactly one, so that they count in that group's ``n``; with several
    hashes they stay apart (hash None)."""
    runs = list(runs)
    hashes = _task_hashes(runs)
    out = []
    for r in runs:
        known = hashes.get(r.metrics.task, set())
        if r.metrics.eval_hash is None and len(known) == 1:
            r = replace(r, metrics=r.metrics.model_copy(update={"eval_hash": next(iter(known))}))
        out.append(r)
    return out


def mixed_tasks(runs: Iterable[StudyRun]) -> dict[str, list[str]]:
    """Tasks whose runs were graded under more than one evaluation setting: task -> sorted
    eval hashes. Each analysis splits such a task by hash; the dashboard says so."""
    return {t: sorted(h) for t, h in sorted(_task_hashes(runs).items()) if len(h) > 1}


def column_label(task: str, eval_hash: str | None, mixed: dict[str, list[str]]) -> str:
    """``task``, or ``task [hash]`` when the task is split by eval hash."""
    if task in mixed:
        return f"{task} [{(eval_hash or 'no baseline')[:8]}]"
    return task


def group_runs(runs: Sequence[StudyRun]) -> dict[GroupKey, list[StudyRun]]:
    """Runs by :class:`GroupKey` (after :func:`assign_hashes`), keys sorted by task, hash,
    model and stack label; runs in each group in their given order."""
    groups: dict[GroupKey, list[StudyRun]] = defaultdict(list)
    for r in assign_hashes(runs):
        groups[r.key].append(r)
    return dict(
        sorted(
            groups.items(),
            key=lambda kv: (kv[0].task, kv[0].eval_hash or "", kv[0].model, kv[0].stack.label),
        )
    )
