"""The scorer of interactive tasks: an episode's outcome, broken down by group."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from agent2rl.dataset import Sample
from agent2rl.scoring.base import ItemResult
from agent2rl.solvers.base import Output


@dataclass(frozen=True)
class EpisodeOutcome:
    """Scores an :class:`~agent2rl.solvers.episode.EpisodeSolver` output.

    ``by`` is ``won`` (score 1 for a won episode, else 0: ALFWorld's success rate) or
    ``reward`` (score = the episode's return clipped to [0, 1], correct when it is 1: a
    graded purchase). ``details`` breaks the outcome down by the games' groups, with the
    mean number of steps.
    """

    by: str = "won"

    def score(self, samples: list[Sample], outputs: list[Output]) -> list[ItemResult]:
        items = []
        for sample, out in zip(samples, outputs, strict=True):
            t = out.trace
            if self.by == "won":
                score = 1.0 if t["won"] else 0.0
            else:
                score = min(1.0, max(0.0, float(t["reward"])))
            meta = {"group": t.get("group"), "steps": t["steps"]}
            target = str(t.get("goal", ""))
            items.append(ItemResult(sample.id, out.text, target, score >= 1.0, score, meta))
        return items

    def settings(self) -> dict[str, Any]:
        return {"scorer": "episode", "by": self.by}

    def details(self, items: list[ItemResult], outputs: list[Output]) -> dict[str, Any]:
        won = Counter((i.meta or {}).get("group") for i in items if i.correct)
        total = Counter((i.meta or {}).get("group") for i in items)
        return {
            "by_group": {
                str(g): {"games": n, "won": won[g], "success": 100.0 * won[g] / n}
                for g, n in sorted(total.items(), key=lambda kv: str(kv[0]))
            },
            "mean_steps": sum(o.trace["steps"] for o in outputs) / max(1, len(outputs)),
        }
