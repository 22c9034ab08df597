"""What a search task's search engine did over a run: which backend answered, and how many
queries the grader's episodes and the agent's training episodes sent.

Read from the run's records only: each evaluation's ``search_queries.jsonl`` in its grading
directory (one line per query of the grader's episodes, written by
:class:`~agent2rl.tasks.deepsearch.search.QueryLog`), the ``search_backend`` in its
``result.json`` details, and the rollout record's ``searches`` table (summarized by
:func:`~agent2rl.rollout.env_record.summarize_env`). A baseline taken from the cache has no
query log: it searched nothing in this run. A task without search has none of these, and no
summary.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from agent2rl.analysis.report.judging import grading_dirs, result_details
from agent2rl.files import read_jsonl_tolerant
from agent2rl.rundir import RunPaths

#: the grader's query log in a grading directory (deepsearch's ``QUERY_LOG``)
QUERY_LOG = "search_queries.jsonl"


class SearchSummary(BaseModel):
    """The run's search counts. ``backends``: every backend named by a grading or a recorded
    query, sorted; ``grader_*``: the grader's episodes over ``grader_evaluations`` gradings
    that searched in this run; ``agent_*``: the agent's episodes through the rollout service
    (``agent_sessions``: sessions that searched). ``*_failed`` counts queries the backend
    could not answer; ``*_by_backend`` splits the queries by backend."""

    model_config = ConfigDict(extra="allow", frozen=True)

    backends: list[str] = []
    grader_evaluations: int = 0
    grader_queries: int = 0
    grader_failed: int = 0
    grader_by_backend: dict[str, int] = {}
    agent_queries: int = 0
    agent_failed: int = 0
    agent_sessions: int = 0
    agent_by_backend: dict[str, int] = {}


def search_summary(paths: RunPaths, env: dict[str, Any] | None) -> SearchSummary | None:
    """The run's :class:`SearchSummary` from its grading directories and ``env`` (the
    :func:`~agent2rl.rollout.env_record.summarize_env` summary, or None); None when nothing in
    the run searched and no grading names a search backend."""
    dirs = grading_dirs(paths)
    details = [result_details(d / "result.json") or {} for d in dirs]
    backends = {str(b) for det in details if (b := det.get("search_backend"))}
    by_backend: dict[str, int] = {}
    failed = evaluations = 0
    for d in dirs:
        log = d / QUERY_LOG
        if not log.is_file():
            continue
        rows = read_jsonl_tolerant(log)  # a torn last line (a grading killed mid-write) is skipped
        evaluations += bool(rows)
        for row in rows:
            name = str(row.get("backend") or "?")
            by_backend[name] = by_backend.get(name, 0) + 1
            failed += bool(row.get("error"))
    agent = (env or {}).get("searches") or {}
    agent_by_backend = {str(k): int(v) for k, v in (agent.get("by_backend") or {}).items()}
    backends |= set(by_backend) | set(agent_by_backend)
    if not backends:
        return None
    return SearchSummary(
        backends=sorted(backends),
        grader_evaluations=evaluations,
        grader_queries=sum(by_backend.values()),
        grader_failed=failed,
        grader_by_backend=dict(sorted(by_backend.items())),
        agent_queries=int(agent.get("queries") or 0),
        agent_failed=int(agent.get("failed") or 0),
        agent_sessions=int(agent.get("sessions") or 0),
        agent_by_backend=dict(sorted(agent_by_backend.items())),
    )


def _n(n: int, noun: str, plural: str = "") -> str:
    return f"{n:,} {noun}" if n == 1 else f"{n:,} {plural or noun + 's'}"


def _split(by_backend: dict[str, int]) -> str:
    """`` (120 wikipedia, 3 bm25)`` when more than one backend answered, else empty."""
    if len(by_backend) < 2:
        return ""
    return " (" + ", ".join(f"{n:,} {b}" for b, n in by_backend.items()) + ")"


def search_text(s: SearchSummary | None) -> str:
    """One paragraph for the report: the backend(s), the grader's queries and the agent's
    queries through the rollout service, each with its failures."""
    if s is None:
        return "No search in this task."
    noun = "Backend" if len(s.backends) == 1 else "Backends"
    grader = (
        f"The grader's episodes sent {_n(s.grader_queries, 'query', 'queries')} over "
        f"{_n(s.grader_evaluations, 'evaluation')}{_split(s.grader_by_backend)}, "
        f"{s.grader_failed:,} failed."
        if s.grader_queries
        else "The grader's episodes sent no query in this run (a cached baseline, no "
        "submission graded)."
    )
    agent = (
        f"The agent's training episodes sent {_n(s.agent_queries, 'query', 'queries')} "
        f"through the rollout service from {_n(s.agent_sessions, 'session')}"
        f"{_split(s.agent_by_backend)}, "
        f"{s.agent_failed:,} failed."
        if s.agent_queries
        else "The agent sent no query through the rollout service."
    )
    return f"{noun}: {', '.join(s.backends)}. {grader} {agent}"
