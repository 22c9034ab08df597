"""The scorer of WebShop sessions: the purchase reward, with the three figures papers quote.

- **mean reward x 100**: WebShop's *score* (Yao et al. 2022);
- **success rate**: the share of sessions with reward 1, WebShop's *SR*;
- **reward >= 0.5 rate**: what the Agent² RL-Bench reference code calls success
  (``benchmarks/webshop/eval.py`` counts ``reward >= 0.5`` over 100 sessions and reports it
  x 100 as the score): the paper's WebShop figure.

Which one a run's score is is the task option ``score`` (``reward``, ``success`` or
``half``); the report's details always hold all three, with the breakdown by category.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from agent2rl.dataset import Sample
from agent2rl.scoring.base import ItemResult
from agent2rl.solvers.base import Output

SCORES = ("reward", "success", "half")


@dataclass(frozen=True)
class PurchaseOutcome:
    """Scores :class:`~agent2rl.solvers.episode.EpisodeSolver` outputs of shopping sessions
    by their return (the purchase reward; 0 without a purchase). ``by``: ``reward`` (the
    item's score is the reward), ``success`` (1 for a reward of 1) or ``half`` (1 for a
    reward of at least 0.5). An item is ``correct`` when its reward is 1. Raises ValueError
    for another ``by``."""

    by: str = "reward"

    def __post_init__(self) -> None:
        if self.by not in SCORES:
            raise ValueError(f"score {self.by!r}: choose one of {', '.join(SCORES)}")

    def score(self, samples: list[Sample], outputs: list[Output]) -> list[ItemResult]:
        items = []
        for sample, out in zip(samples, outputs, strict=True):
            t = out.trace
            reward = min(1.0, max(0.0, float(t["reward"])))
            won = bool(t["won"])
            score = {"reward": reward, "success": float(won), "half": float(reward >= 0.5)}
            meta = {"group": t.get("group"), "steps": t["steps"], "reward": reward}
            target = str(t.get("goal", ""))
            items.append(ItemResult(sample.id, out.text, target, won, score[self.by], meta))
        return items

    def settings(self) -> dict[str, Any]:
        return {"scorer": "webshop-purchase", "by": self.by}

    def details(self, items: list[ItemResult], outputs: list[Output]) -> dict[str, Any]:
        def figures(rewards: list[float], wins: list[bool]) -> dict[str, float]:
            n = max(1, len(rewards))
            return {
                "mean_reward_x100": 100.0 * sum(rewards) / n,
                "success_rate": 100.0 * sum(wins) / n,
                "reward_at_least_half_rate": 100.0 * sum(r >= 0.5 for r in rewards) / n,
            }

        rewards = [float((i.meta or {})["reward"]) for i in items]
        wins = [i.correct for i in items]
        groups: dict[str, list[int]] = defaultdict(list)
        for k, i in enumerate(items):
            groups[str((i.meta or {}).get("group"))].append(k)
        return {
            **figures(rewards, wins),
            "paper_figure": "reward_at_least_half_rate",
            "score_by": self.by,
            "by_group": {
                g: {
                    "games": len(ks),
                    "won": sum(wins[k] for k in ks),
                    **figures([rewards[k] for k in ks], [wins[k] for k in ks]),
                }
                for g, ks in sorted(groups.items())
            },
            "mean_steps": sum(o.trace["steps"] for o in outputs) / max(1, len(outputs)),
        }
