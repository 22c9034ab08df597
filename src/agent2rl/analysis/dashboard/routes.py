"""Route classification: which training route a run took, from recorded evidence.

Labels (:data:`ROUTES`): ``failed`` (no valid submission: no gradable model); ``no training``
(valid submissions, but every one a copy of the base model, or no SFT or RL evidence recorded
at all, e.g. weights edited by hand, or only prompt changes); ``SFT only`` / ``RL only``
(evidence of one family only); ``SFT then RL`` (both, the first SFT evidence earlier than the
first RL evidence); ``SFT and RL`` (both, with RL first or no timed evidence that orders them:
the reason says which).

Evidence (:class:`~agent2rl.analysis.dashboard.runset.Evidence`) comes from the code at each
submission and at the end, the agent's own progress lines, and environment steps through the
rollout service (see :mod:`agent2rl.analysis.dashboard.evidence`). What ran outranks what was
written: when a run has runtime evidence (its log lines, its rollout steps), the families come
from that alone, and the code (which may hold methods it never calls, e.g. shared helpers) is
shown beside it; a run without runtime evidence is classified from its code. Only timed
evidence orders the families; untimed evidence only says that a family was used.

The *best route* applies the same rules to the evidence up to the run's best submission:
the route that produced the model the run is scored by (the paper's best-route
classification).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from agent2rl.analysis.dashboard.runset import Evidence, StudyRun
from agent2rl.analysis.report.run_metrics import RunMetrics

ROUTES = ("SFT only", "RL only", "SFT then RL", "SFT and RL", "no training", "failed")
#: evidence of what ran (outranks the code, which shows what was written)
RUNTIME_SOURCES = ("log", "rollout")


@dataclass(frozen=True)
class Route:
    label: str
    """One of :data:`ROUTES`."""
    reason: str
    evidence: tuple[Evidence, ...]
    """The evidence the label rests on (for ``failed``/``no training``: what was found)."""


def _first(evidence: Sequence[Evidence], family: str) -> tuple[bool, float | None]:
    """(family seen, earliest time it was seen at, None if never timed)."""
    hits = [e for e in evidence if family in e.methods]
    times = [e.t for e in hits if e.t is not None]
    return bool(hits), (min(times) if times else None)


def classify(m: RunMetrics, evidence: Sequence[Evidence], until: float | None = None) -> Route:
    """The route of a run with metrics ``m`` and ``evidence`` (module docstring).

    ``until``: only evidence at or before this time counts (untimed evidence counts only
    when no evidence is timed), and only submissions up to it: the best route.
    """
    subs = [p for p in m.trajectory if until is None or p.t <= until]
    valid = [p for p in subs if p.score is not None]
    if not valid:
        why = f"status {m.status}, {len(subs)} submission(s), none valid"
        if m.rejected_attempts:
            why += f", {m.rejected_attempts} refused at submission"
        return Route("failed", why, ())
    if all(p.is_copy for p in valid):
        ids = ", ".join(f"#{p.id}" for p in valid)
        return Route("no training", f"every valid submission ({ids}) is the base model", ())
    if until is not None:
        timed = [e for e in evidence if e.t is not None]
        evidence = [e for e in timed if e.t <= until] if timed else list(evidence)
    runtime = [e for e in evidence if e.source in RUNTIME_SOURCES and e.methods]
    used = tuple(runtime) if runtime else tuple(e for e in evidence if e.methods)
    sft, sft_t = _first(used, "sft")
    rl, rl_t = _first(used, "rl")
    if not sft and not rl:
        found = "; ".join(e.detail for e in evidence) or "nothing"
        return Route(
            "no training",
            f"no SFT or RL in the code, the agent's log or the rollout record ({found})",
            tuple(evidence),
        )
    if sft and not rl:
        return Route("SFT only", "SFT evidence, no RL evidence", used)
    if rl and not sft:
        return Route("RL only", "RL evidence, no SFT evidence", used)
    if sft_t is not None and rl_t is not None and sft_t < rl_t:
        return Route("SFT then RL", f"SFT first seen at {sft_t:.0f}s, RL at {rl_t:.0f}s", used)
    if sft_t is not None and rl_t is not None and rl_t < sft_t:
        why = f"RL first seen at {rl_t:.0f}s, before SFT at {sft_t:.0f}s"
    else:
        why = "both seen, nothing recorded orders them"
    return Route("SFT and RL", why, used)


@dataclass(frozen=True)
class RunRoute:
    run_id: str
    route: Route
    best_route: Route
    """The route up to the best submission (equals ``route`` without a best)."""


def run_route(run: StudyRun) -> RunRoute:
    """:func:`classify` of the whole run and up to its best submission."""
    m = run.metrics
    route = classify(m, run.evidence)
    best_t = m.time_to_best
    best = classify(m, run.evidence, until=best_t) if best_t is not None else route
    return RunRoute(m.run_id, route, best)
