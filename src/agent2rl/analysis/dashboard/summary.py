"""Post-hoc run summaries (the paper's post-hoc summarisation), every claim citing an artifact.

A :class:`RunSummary` has the run's route (with the best route), its key decisions, what
failed and a timeline, each a :class:`Claim` whose ``refs`` name recorded artifacts:
``submission #3``, ``snapshot 1a2b3c4d5e (submission #3)``, ``agent.log:41``,
``record/env.db``, ``run.json``, ``rejection #1``... (:func:`artifacts` lists those a run
has). Nothing the agent says about itself is taken as fact: claims are built from the
harness's records.

Two writers:

- :func:`rule_summary`: deterministic, from the same evidence the dashboard shows;
- :func:`llm_summary`: an LLM over any OpenAI-compatible endpoint (``AGENT2RL_SUMMARY_BASE_URL``,
  ``AGENT2RL_SUMMARY_MODEL``, ``AGENT2RL_SUMMARY_API_KEY``) rewrites the rule summary's
  decisions from the evidence. Its claims are kept only when every ref is an artifact the
  run has (others are dropped, and the rule summary stands in when none survive or the call
  fails). The call goes through :class:`~agent2rl.scoring.llm_client.LLMClient` (retried,
  metered, cached by its full request: a dashboard rebuilt over the same runs asks nothing
  twice).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from agent2rl.analysis.dashboard.failures import run_failures
from agent2rl.analysis.dashboard.routes import run_route
from agent2rl.analysis.dashboard.runset import StudyRun
from agent2rl.scoring.llm_client import (
    Completion,
    LLMClient,
    LLMMeter,
    LLMUnavailable,
    ResponseCache,
)

SUMMARY_ENV = ("AGENT2RL_SUMMARY_BASE_URL", "AGENT2RL_SUMMARY_MODEL", "AGENT2RL_SUMMARY_API_KEY")
#: the response cache's file in a summary cache directory
SUMMARY_CACHE = "llm_responses.sqlite3"


@dataclass(frozen=True)
class Claim:
    text: str
    refs: list[str]


@dataclass(frozen=True)
class RunSummary:
    run_id: str
    route: str
    best_route: str
    route_claim: Claim
    decisions: list[Claim]
    failures: list[Claim]
    timeline: list[Claim]
    source: str
    """``rules``, or ``llm:<model>``."""
    notes: list[str] = field(default_factory=list)
    """What happened to LLM claims that were dropped, a failed call..."""

    def claims(self) -> list[Claim]:
        return [self.route_claim, *self.decisions, *self.failures, *self.timeline]


def artifacts(run: StudyRun) -> set[str]:
    """Every artifact ref a claim about ``run`` may cite."""
    m = run.metrics
    refs = {"run.json", "ledger.db", "agent.log", "record/agent.json", "workspace/code/"}
    refs |= {f"submission #{p.id}" for p in m.trajectory}
    refs |= {f"rejection #{r.id}" for r in m.rejections}
    refs |= {e.ref for e in run.evidence}
    refs |= {
        f"snapshot {c.snapshot[:10]} (submission #{c.id})" for c in m.code_changes if c.snapshot
    }
    if m.env_usage is not None:
        refs.add("record/env.db")
    if m.llm_usage is not None:
        refs.add("record/llm_usage.jsonl")
    if m.contamination is not None:
        refs.add("record/contamination.json")
    return refs


def _snapshot_ref(run: StudyRun, sub_id: int) -> list[str]:
    snap = next((c.snapshot for c in run.metrics.code_changes if c.id == sub_id), None)
    refs = [f"submission #{sub_id}"]
    if snap:
        refs.append(f"snapshot {snap[:10]} (submission #{sub_id})")
    return refs


def _fmt_t(t: float | None) -> str:
    return "?" if t is None else f"{t:.0f}s"


def rule_summary(run: StudyRun) -> RunSummary:
    """The deterministic summary of ``run`` (see the module docstring)."""
    m = run.metrics
    route = run_route(run)
    ev_refs = [e.ref for e in route.route.evidence] or ["ledger.db"]
    route_claim = Claim(
        f"Route: {route.route.label} ({route.route.reason}); the best submission came from "
        f"{route.best_route.label}.",
        ev_refs,
    )
    decisions = [Claim(f"At {_fmt_t(e.t)}: {e.detail}.", [e.ref]) for e in route.route.evidence]
    valid = [p for p in m.trajectory if p.score is not None]
    if valid:
        first = valid[0]
        decisions.append(
            Claim(
                f"First valid submission #{first.id} at {_fmt_t(first.t)} scored "
                f"{first.score:.2f} (baseline {m.baseline if m.baseline is not None else '?'}).",
                _snapshot_ref(run, first.id),
            )
        )
    if m.best_submission_id is not None and m.best_score is not None:
        gain = f", improvement {m.improvement:+.2f}" if m.improvement is not None else ""
        noise = {True: " (within noise)", False: " (beyond noise)"}.get(m.within_noise, "")
        decisions.append(
            Claim(
                f"Best submission #{m.best_submission_id} at {_fmt_t(m.time_to_best)} scored "
                f"{m.best_score:.2f}{gain}{noise}.",
                _snapshot_ref(run, m.best_submission_id),
            )
        )
    fails = [Claim(f"{f.kind}: {f.detail}", [f.ref]) for f in run_failures(m)]
    timeline: list[Claim] = [Claim(f"Run started; budget {_fmt_t(m.budget_s)}.", ["run.json"])]
    for p in m.trajectory:
        what = f"scored {p.score:.2f}" if p.score is not None else p.status
        if p.is_copy:
            what += ", a copy of the base model"
        timeline.append(
            Claim(f"{_fmt_t(p.t)}: submission #{p.id} {what}.", [f"submission #{p.id}"])
        )
    env = m.env_usage
    if env is not None and env.steps:
        span = f"{_fmt_t(env.first_step_t)}-{_fmt_t(env.last_step_t)}"
        timeline.append(Claim(f"{span}: {env.steps} environment steps.", ["record/env.db"]))
    timeline.append(Claim(f"{_fmt_t(m.duration_s)}: ended as {m.status}.", ["run.json"]))
    timeline.sort(key=lambda c: _claim_time(c.text))
    return RunSummary(
        m.run_id,
        route.route.label,
        route.best_route.label,
        route_claim,
        decisions,
        fails,
        timeline,
        "rules",
    )


def _claim_time(text: str) -> float:
    head = text.split(":", 1)[0].split("-", 1)[0].rstrip("s")
    try:
        return float(head)
    except ValueError:
        return -1.0 if text.startswith("Run started") else float("inf")


# -- the LLM writer ------------------------------------------------------------------------------
@dataclass(frozen=True)
class SummaryEndpoint:
    """An OpenAI-compatible chat-completions endpoint (``base_url`` ends before
    ``/chat/completions``, e.g. ``http://127.0.0.1:8000/v1``)."""

    base_url: str
    model: str
    api_key: str = ""

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> SummaryEndpoint | None:
        """From ``AGENT2RL_SUMMARY_BASE_URL`` and ``AGENT2RL_SUMMARY_MODEL`` (and the optional
        ``AGENT2RL_SUMMARY_API_KEY``); None unless both are set."""
        env = os.environ if environ is None else environ
        url, model, key = (env.get(k, "") for k in SUMMARY_ENV)
        return cls(url.rstrip("/"), model, key) if url and model else None


_INSTRUCTIONS = (
    "You summarise one run of an RL post-training benchmark for a research paper. You get the "
    "run's recorded evidence as JSON. Answer with JSON only: "
    '{"decisions": [{"text": "...", "refs": ["..."]}]}: at most 6 key decisions the agent '
    "made (method switches, the submission that became best, failures), in time order. Every "
    'decision must cite at least one ref, copied exactly from the evidence\'s "artifacts" '
    "list. Claim nothing that the evidence does not show."
)


def _prompt(run: StudyRun, base: RunSummary) -> str:
    shown = {"task", "status", "baseline", "best_score", "improvement", "budget_s"}
    evidence = {
        "run": {**run.metrics.model_dump(include=shown), "stack": run.stack.label},
        "route": base.route_claim.text,
        "facts": [asdict(c) for c in base.decisions + base.failures + base.timeline],
        "artifacts": sorted(artifacts(run)),
    }
    return json.dumps(evidence, sort_keys=True)


def llm_summary(
    run: StudyRun,
    endpoint: SummaryEndpoint,
    *,
    cache_dir: Path,
    usage_path: Path,
    timeout_s: float = 120.0,
    max_attempts: int = 3,
    backoff_s: float = 1.0,
) -> RunSummary:
    """The LLM's summary of ``run`` (see the module docstring); the rule summary, with a
    note, when the call fails (after ``max_attempts`` tries of a transient failure, ``backoff_s``
    apart and doubling) or no claim survives the check of its refs. The answer is cached in
    ``cache_dir`` (:data:`SUMMARY_CACHE`) by its full request; each request is one line in
    ``usage_path``."""
    base = rule_summary(run)
    body = {
        "model": endpoint.model,
        "messages": [
            {"role": "system", "content": _INSTRUCTIONS},
            {"role": "user", "content": _prompt(run, base)},
        ],
        "temperature": 0,
    }
    client = LLMClient(
        endpoint.model,
        endpoint.base_url,
        endpoint.api_key,
        meter=LLMMeter(Path(usage_path)),
        cache=ResponseCache(Path(cache_dir) / SUMMARY_CACHE),
        max_attempts=max_attempts,
        backoff_s=backoff_s,
        timeout_s=timeout_s,
        concurrency=1,
        label="summary model",
    )
    try:
        content = client.chat(body, Completion.text)
    except LLMUnavailable as err:
        return _with_note(base, f"LLM summary failed ({err}); rule-based summary shown")
    finally:
        client.close()
    return _merge(run, base, content, endpoint.model)


def _merge(run: StudyRun, base: RunSummary, content: str, model: str) -> RunSummary:
    """Keep the LLM's decisions whose refs are all known artifacts of the run."""
    text = content.strip()
    if text.startswith("```"):
        text = text.strip("`").removeprefix("json").strip()
    try:
        raw = json.loads(text).get("decisions", [])
    except (ValueError, AttributeError):
        return _with_note(base, "the LLM's answer was not the JSON asked for; rules shown")
    known = artifacts(run)
    candidates = raw if isinstance(raw, list) else []
    kept = [
        Claim(d["text"], list(d["refs"]))
        for d in candidates
        if isinstance(d, dict)
        and isinstance(d.get("text"), str)
        and isinstance(d.get("refs"), list)
        and d["refs"]
        and all(isinstance(r, str) and r in known for r in d["refs"])
    ]
    dropped = len(candidates) - len(kept)
    notes = [f"{dropped} LLM claim(s) dropped: no ref to a recorded artifact"] if dropped else []
    if not kept:
        return _with_note(base, "no LLM claim cited a recorded artifact; rules shown", *notes)
    return replace(base, decisions=kept, source=f"llm:{model}", notes=notes)


def _with_note(base: RunSummary, *notes: str) -> RunSummary:
    return replace(base, notes=[*base.notes, *notes])


def summarize(
    runs: Sequence[StudyRun],
    endpoint: SummaryEndpoint | None = None,
    *,
    cache_dir: Path | None = None,
    usage_path: Path | None = None,
) -> list[RunSummary]:
    """A summary per run: the LLM's when ``endpoint`` is given (with ``cache_dir`` and
    ``usage_path``), else the rule-based one."""
    if endpoint is None or cache_dir is None or usage_path is None:
        return [rule_summary(r) for r in runs]
    return [llm_summary(r, endpoint, cache_dir=cache_dir, usage_path=usage_path) for r in runs]
