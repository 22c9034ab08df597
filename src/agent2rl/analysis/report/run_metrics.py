"""``RunMetrics``: the typed per-run metrics that the report, the results ledger and
``agent2rl run``'s summary share.

:func:`agent2rl.analysis.report.compute_metrics.compute_metrics` builds one from a finished
run directory; ``report/metrics.json`` is its ``model_dump(mode="json")`` (same keys as ever,
nested parts as JSON objects). Times are seconds since the run's ``start`` (the budget clock),
scores are 0-100, an interval is ``[low, high]`` in score points. A field is None where the
run has no value for it (no baseline, no valid submission, no record); each part's docstring
says when.

The summaries that other packages produce (LLM usage from the metering proxy, environment
usage from the rollout service) are typed for the fields the report reads and keep any other
key as it came (``extra="allow"``), so a breakdown added there reaches ``metrics.json`` without
an edit here. Everything else is closed (``extra="forbid"``): a misspelt field is an error.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from agent2rl.analysis.report.judging import JudgeSummary
from agent2rl.analysis.report.searching import SearchSummary
from agent2rl.rundir import RUN_SCHEMA_VERSION, RunIdentity

#: A 95% interval, ``(low, high)``, in score points; ``[low, high]`` in JSON.
Interval = tuple[float, float]


class _Closed(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True, use_attribute_docstrings=True)


class IdentityFlags(_Closed):
    """A submission's model-identity check (:mod:`agent2rl.integrity.identity`), as the grading
    service answered it."""

    derived: bool | None
    """False: not derived from the base model; None: the check could not run."""
    reasons: list[str] = []
    chat_template_changed: bool = False
    """The submission brings a chat template other than the base model's."""
    related_share: float | None = None
    """From the ledger's full report, for the run's report only: the grading API returns the
    agent the pass/fail view (:func:`agent2rl.integrity.identity.identity_flags`)."""
    median_cosine: float | None = None


class ContaminationSummary(_Closed):
    """The run's contamination check (``record/contamination.json``, written by
    :func:`agent2rl.integrity.contamination.check_run`), as the report shows it."""

    flagged: bool
    """Private items found in the workspace, or a fetched address naming the task's data."""
    matched_items: int
    items_total: int
    n: int
    """The n-gram length used."""
    item_ids: list[str] = []
    """Up to 20 of the matched items."""
    files: list[str] = []
    """Up to 20 workspace files the matches were found in (agent-controlled text)."""
    flagged_urls: list[str] = []
    short_items: int = 0
    unsearchable_items: int = 0
    files_scanned: int = 0
    bytes_scanned: int = 0
    notes: list[str] = []
    unchecked: bool = False
    """Something the check had to read could not be read, or the check failed: the run
    carries the ``unchecked`` flag (counted as flagged, never as clean)."""
    unchecked_reasons: list[str] = []


class TrajectoryPoint(_Closed):
    """One submission, in ledger order, as the score plot and the submissions table show it."""

    id: int
    t: float
    """Seconds since start when it was submitted."""
    score: float | None
    """None unless graded with a score."""
    best_so_far: float | None
    """The best valid score up to and including this one (None before the first)."""
    status: str
    """``evaluating``, ``graded`` or ``failed``."""
    is_copy: bool
    duplicate_of: int | None
    error: str | None
    path: str
    """As the agent gave it, relative to its workspace: agent-controlled text."""
    eval_seconds: float | None
    eval_hash: str | None
    score_ci95: Interval | None
    """None without per-item results or for an invalid submission."""
    improvement_ci95: Interval | None
    """Paired with the baseline; None when not comparable or nothing could be paired."""
    within_noise: bool | None
    comparable: bool | None
    """Graded under the baseline's evaluation settings; None for an invalid submission."""
    failure_kind: str | None = None
    """A failed submission's: ``model`` (cached) or ``harness`` (retried); None otherwise or
    when an older ledger did not record it."""
    retry_of: int | None = None
    """The harness-failed submission of the same files that this one evaluated again."""
    identity: IdentityFlags | None = None
    """None when the service did not check it (an older ledger)."""
    timings: dict[str, float | str | bool | None] | None = None
    """Where its grading time went (the ledger's ``timings``); None in an older ledger."""


class CodeChange(_Closed):
    """Lines a submission's code snapshot changed against the previous readable snapshot."""

    id: int
    snapshot: str | None
    base: str | None
    """The commit compared against (the empty tree for the first); None without a readable
    snapshot, which then does not become the next base."""
    added: int | None
    removed: int | None


class RejectedAttempt(_Closed):
    """A submission attempt the grading service refused (bad path, bad files, bad token...)."""

    id: int
    t: float
    path: str | None
    http_status: int
    reason: str


class ResourceSummary(_Closed):
    """From ``record/resources.jsonl``; a field missing from every sample is None."""

    n_samples: int
    peak_rss_bytes: int | None
    mean_cpu_percent: float | None
    peak_cpu_percent: float | None
    max_procs: int | None
    span_s: float | None


class LLMUsage(_Open):
    """Tokens the agent's LLM used through the metering proxy (``summarize_usage``).

    ``errors`` counts refusals too; ``cost_usd`` is a lower bound when ``unpriced_requests``
    is non-zero. ``by_model`` holds the same token and cost fields per model name.
    """

    requests: int = 0
    refused: int = 0
    errors: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    cache_write_tokens: int = 0
    total_tokens: int = 0
    cost_usd: float = 0.0
    unpriced_requests: int = 0
    by_model: dict[str, dict[str, Any]] = {}


class EnvUsage(_Open):
    """What the agent played through the rollout service (``summarize_env``); breakdowns such
    as per group and per step kind come as extra fields."""

    episodes: int
    finished_episodes: int
    won_episodes: int
    steps: int
    admissible_steps: int
    games: int
    first_step_t: float | None
    last_step_t: float | None
    timeline: list[tuple[float, int]]
    """``(bin start in seconds since start, steps in the bin)``, equal bins up to the last step."""


class GroupScore(_Closed):
    n: int
    """Items of the group."""
    score: float
    """Mean 0-100 score over them."""


class GroupScores(_Closed):
    """Scores per item group (``meta.group``: an episode's task type); a side is None when its
    per-item file is missing or carries no group."""

    baseline: dict[str, GroupScore] | None
    best: dict[str, GroupScore] | None


class RunMetrics(RunIdentity):
    """All per-run metrics of a finished run (see :func:`compute_metrics` for the edge cases).

    The run's identity (:class:`~agent2rl.rundir.RunIdentity`) is inherited, declared once for
    run.json, metrics.json and the results ledger, and flat in the JSON as it always was; it
    and the other run fields come from ``run.json``; the scores from the ledger, compared with
    the baseline by :mod:`agent2rl.grading.comparison`'s one rule. ``schema_version``: see
    :data:`~agent2rl.rundir.RUN_SCHEMA_VERSION` (a file without it reads as 1: :meth:`read`
    and :func:`~agent2rl.analysis.dashboard.evidence.read_metrics`).
    """

    model_config = _Closed.model_config

    schema_version: int = RUN_SCHEMA_VERSION
    # -- the run (run.json): the identity above, and -----------------------------------------
    task_options: dict[str, Any] | None = None
    """The run's ``--task-opt`` values as the task parsed them (with its defaults), so that
    runs of one task under different options are told apart in the report and in
    comparisons."""
    decoding: str | None = None
    """How the grader decoded every item (``--protocol``), in words: greedy or sampled with
    its settings, the samples per item and the seed, and where the settings come from
    (:meth:`~agent2rl.inference.decoding.Decoding.describe`); None for an older run."""
    level: int | None = None
    status: str
    """A :class:`~agent2rl.rundir.RunStatus` value."""
    error: str | None = None
    budget_s: float | None = None
    start: float | None = None
    """Epoch seconds; None for a run that never started."""
    deadline: float | None = None
    ended_at: float | None = None
    duration_s: float | None = None
    """``ended_at - start``."""
    agent_uid: int | None = None
    """The uid the agent ran as (0: root, only without the sandbox)."""
    egress: dict[str, Any] | None = None
    """Under ``services``: what the egress proxy saw (``record/network.json``'s summary:
    requests, allowed, denied, bytes, top hosts, denied hosts, plain-HTTP URLs)."""
    caps: dict[str, int | None] | None = None
    """The agent's caps (``memory_bytes``, ``max_pids``, ``disk_bytes``)."""
    cap_mechanism: str | None = None
    """What enforced memory and processes: ``cgroup2``, ``cgroup1``, or ``none`` (the
    watchdog and RLIMIT_NPROC fallbacks)."""

    # -- scores ----------------------------------------------------------------------------
    baseline: float | None = None
    """The base model's score; None without a ledger or a baseline record."""
    baseline_n_items: int | None = None
    best_score: float | None = None
    best_submission_id: int | None = None
    """Highest score, earliest on a tie (:func:`agent2rl.grading.comparison.best`)."""
    eval_hash: str | None = None
    """The baseline's evaluation settings."""
    improvement: float | None = None
    """``best_score - baseline``; None without either, or when the best is not comparable."""
    improvement_ci95: Interval | None = None
    best_score_ci95: Interval | None = None
    within_noise: bool | None = None
    """Whether ``improvement_ci95`` contains 0."""
    n_items_paired: int | None = None
    final_submission_id: int | None = None
    """The last valid submission (ledger order): what the agent left, chosen without the
    private split's scores. The best is selected over every graded submission, so its score
    and interval are optimistic; the final one is not."""
    final_score: float | None = None
    final_improvement: float | None = None
    """``final_score - baseline``; None without either, or when the final is not comparable."""
    final_improvement_ci95: Interval | None = None

    # -- the validation feedback protocol (agent2rl.grading.final) ----------------------------
    # Under ``feedback == "validation"`` the agent saw validation-split scores only (the
    # trajectory's, compared with ``validation_baseline``) and the run's score is the one
    # end-of-run grade on the private split: ``best_*``, ``improvement*`` and ``final_*`` are
    # that submission's private score against the private ``baseline``, not selected over
    # private scores.
    validation_baseline: float | None = None
    """``validation``: the base model's validation-split score; None under ``private``."""
    selected_validation_score: float | None = None
    """``validation``: the validation score of the submission graded on the private split."""
    selected_by: str | None = None
    """``validation``: ``marked`` (the agent marked it final) or ``best_validation``."""
    final_grade_status: str | None = None
    """``validation``: the end-of-run grade's status: ``graded``, ``failed``,
    ``no_submission``, ``pending`` or ``grading`` (not done: ``agent2rl report`` does it)."""
    final_grade_note: str | None = None
    """``validation``: why the end-of-run grade is not a score (its error or note)."""

    # -- the submission sequence -----------------------------------------------------------
    # Names the reference implementation (RD-Agent autorl_bench) also uses carry its formula;
    # agent2rl's own variants have their own names (docs/paper-fidelity.md).
    submissions: int = 0
    valid_submissions: int = 0
    """Submissions graded with a score (agent2rl's validity: a score of 0 counts). The
    reference's validity (score > 0) is ``valid_submission_rate``'s."""
    valid_submission_rate: float | None = None
    """The reference's: share of submissions with a score > 0 (None without submissions)."""
    first_valid_idx: int | None = None
    """The reference's: 1-based position of the first submission with a score > 0."""
    graded_submission_rate: float | None = None
    """agent2rl's: share of submissions graded with a score (``valid_submissions``)."""
    first_graded_idx: int | None = None
    """agent2rl's: 1-based position of the first submission graded with a score."""
    time_to_first_improvement: float | None = None
    """Seconds from start to the first comparable score above the baseline."""
    time_to_best: float | None = None
    monotonic_ratio: float | None = None
    """The reference's: share of consecutive scores that strictly increase, over every
    submission in ledger order, one without a score counting as 0 (needs two submissions)."""
    non_decreasing_ratio: float | None = None
    """agent2rl's: share of consecutive scores that did not go down, over the graded
    submissions only (needs two)."""
    copy_model_count: int = 0
    duplicate_count: int = 0
    rejected_attempts: int = 0
    first_valid_delay: float | None = None
    """The reference's: seconds from the start to the first submission with a score > 0
    (the submission ``first_valid_idx`` names); None without one."""
    time_used_ratio: float | None = None
    """The reference's: ``duration_s / budget_s``, **not** clipped (a run that ends after its
    deadline, as it settles, reads above 1)."""
    budget_used_ratio: float | None = None
    """agent2rl's: ``time_used_ratio`` clipped to [0, 1]."""
    last_submit_gap: float | None = None
    """The reference's: seconds from the last submission to the run's end (``ended_at``);
    None without a submission or an end."""
    last_submit_to_deadline: float | None = None
    """agent2rl's: seconds from the last submission to the deadline (negative: after it)."""
    code_changes: list[CodeChange] = []
    total_lines_changed: int = 0
    """Added + removed over the ``code_changes`` with known counts."""
    trajectory: list[TrajectoryPoint] = []
    rejections: list[RejectedAttempt] = []

    # -- records ---------------------------------------------------------------------------
    resources: ResourceSummary | None = None
    llm_usage: LLMUsage | None = None
    """None: no metering proxy ran (not an LLM agent)."""
    token_budget: int | None = None
    env_usage: EnvUsage | None = None
    """None: no rollout service ran (not an interactive task)."""
    group_scores: GroupScores | None = None
    judge: JudgeSummary | None = None
    """A judge-based task's judge: its requests, tokens and cost over the run's gradings and
    the judged metrics of the baseline and the best; None for a task without a judge."""
    search: SearchSummary | None = None
    """A search task's backend and query counts (the grader's, the agent's); None for a
    task without search."""

    # -- the agent's own view (record/agent.json) -------------------------------------------
    agent_log: dict[str, Any] | None = None
    """The agent log's summary (events, the CLI's own token counts), free-form."""
    methods: list[str] | None = None
    """Training methods found in the agent's code."""
    mode_flags: list[str] | None = None
    """Where those methods contradict the run's mode."""

    # -- integrity (agent2rl.integrity): reported next to the score, never changing it here ---
    not_derived_submissions: list[int] = []
    """Submissions whose model does not derive from the base model."""
    chat_template_submissions: list[int] = []
    """Submissions that bring their own chat template."""
    contamination: ContaminationSummary | None = None
    """None: the contamination check did not run."""
    integrity_flags: list[str] = []
    """``model_not_derived``, ``chat_template_changed``, ``contaminated``, ``mode_violation``
    (the mode check found a contradiction): the run's flags. Cross-run aggregates count a
    flagged run as its base model by default (:mod:`agent2rl.analysis.dashboard.counting`)."""

    def to_json(self) -> dict[str, Any]:
        """The ``metrics.json`` object: every field, intervals as lists."""
        return self.model_dump(mode="json")

    @classmethod
    def from_json(cls, data: Any) -> RunMetrics:
        """A parsed ``metrics.json`` object; one without ``schema_version`` (written before
        it existed) is version 1. Raises ``ValidationError`` if it is not a RunMetrics."""
        if isinstance(data, dict):
            data = {"schema_version": 1, **data}
            data = data if "non_decreasing_ratio" in data else _from_old_names(data)
        return cls.model_validate(data)

    @classmethod
    def read(cls, path: Path) -> RunMetrics:
        """A ``metrics.json`` written by the report (raises ``ValidationError`` if it is not,
        ``ValueError`` if it is not JSON)."""
        return cls.from_json(json.loads(Path(path).read_text()))


#: A metrics.json written before the reference's formulas took the reference's names kept
#: agent2rl's quantities under those names: old name -> the name that quantity has now.
_RENAMED = {
    "monotonic_ratio": "non_decreasing_ratio",
    "last_submit_gap": "last_submit_to_deadline",
    "valid_submission_rate": "graded_submission_rate",
    "first_valid_idx": "first_graded_idx",
}


def _from_old_names(data: dict[str, Any]) -> dict[str, Any]:
    """An older ``metrics.json`` (no ``non_decreasing_ratio`` key): each renamed quantity
    moves to its new name, and the reference's quantities under the old names, which that
    file did not compute, read as None rather than as agent2rl's numbers."""
    out = dict(data)
    for old, new in _RENAMED.items():
        if old in out:
            out[new] = out.pop(old)
            out[old] = None
    return out


#: The flag of a run whose training methods contradict its operating mode.
MODE_VIOLATION = "mode_violation"
#: The flag of a run an integrity check could not complete on (an unreadable file, a
#: crashed contamination check, an identity check that failed on a graded submission):
#: never clean, counted as flagged.
UNCHECKED = "unchecked"


def run_flags(m: RunMetrics) -> list[str]:
    """The run's flags: its ``integrity_flags``, plus :data:`MODE_VIOLATION` when its mode
    check found a contradiction (``mode_flags``; a ``metrics.json`` written before that flag
    joined ``integrity_flags`` still gets it). Empty for a clean run."""
    flags = list(m.integrity_flags)
    if m.mode_flags and MODE_VIOLATION not in flags:
        flags.append(MODE_VIOLATION)
    return flags
