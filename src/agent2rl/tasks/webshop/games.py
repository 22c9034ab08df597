"""WebShop goals as the rollout layer's games: :class:`ShopGames` (a
:class:`~agent2rl.rollout.env.GameSource`) and :class:`ShopEpisode` (an
:class:`~agent2rl.rollout.env.Episode`).

A game is one goal of a split's ``goals.jsonl`` (its ``game_id``, its ``group`` = the
product's category); an episode is one shopping session for it. Both the grader's episode
solver and the rollout service open episodes here, over the same :class:`Shop`.

A step's ``kind`` is ``search``, ``click`` or ``purchase``; its reward is 0 but on the
purchase, which ends the episode with WebShop's reward; ``won`` is a reward of 1 (WebShop's
success). An episode also ends, unrewarded, after ``max_steps`` actions. An action the shop
does not offer raises :class:`ValueError` and uses no step (the service answers 400);
with ``lenient`` games (the ``webshop`` task's ``invalid=env``, the paper's reference: it
hands every action to WebShop's environment) it is played as a no-op instead: the step is
used, the page stays, reward 0, kind ``invalid``.
"""

from __future__ import annotations

import functools
import time
from pathlib import Path
from typing import Any

from agent2rl.files import read_jsonl
from agent2rl.rollout.env import GameInfo, SearchRecord, StepResult
from agent2rl.tasks.webshop.catalog import load_catalog
from agent2rl.tasks.webshop.engine import Outcome, Shop, ShopSession

#: a purchase rewarded at least this is WebShop's success (rewards are sums of fractions)
WIN_REWARD = 1.0 - 1e-9


@functools.lru_cache(maxsize=4)
def open_shop(catalog_dir: Path) -> Shop:
    """The shop over the catalog in ``catalog_dir``, built once per process (loading and
    indexing 1,000 products takes about a second; every split and session shares it)."""
    return Shop(load_catalog(catalog_dir))


class ShopGames:
    """The goals of one split (``goals_file``, one goal per line with its ``game_id``) in
    the shop of ``catalog_dir``. ``games`` keep the file's order. Raises FileNotFoundError
    for a missing file and ValueError for a split without goals or a goal whose product is
    not in the catalog."""

    def __init__(
        self,
        catalog_dir: Path,
        goals_file: Path,
        max_steps: int,
        step_cap: int | None = None,
        lenient: bool = False,
    ) -> None:
        self.lenient = lenient
        self.shop = open_shop(Path(catalog_dir).resolve())
        goals = read_jsonl(Path(goals_file))
        if not goals:
            raise ValueError(f"no goals in {goals_file}")
        missing = [g["asin"] for g in goals if g["asin"] not in self.shop.catalog.by_asin]
        if missing:
            raise ValueError(f"{goals_file}: goals for products not in the catalog: {missing[:5]}")
        self.games = [GameInfo(g["game_id"], g.get("category"), {"goal": g}) for g in goals]
        self.by_id = {g.game_id: g for g in self.games}
        self.max_steps = max_steps
        self.step_cap = max(max_steps, step_cap or max_steps)

    def open(self, game: GameInfo, max_steps: int | None = None) -> ShopEpisode:
        """A new session for ``game``, at most ``max_steps`` actions (default
        ``self.max_steps``, at most ``step_cap``)."""
        steps = min(max_steps or self.max_steps, self.step_cap)
        return ShopEpisode(self.shop, game, steps, lenient=self.lenient)


class ShopEpisode:
    """One shopping session (see the module docstring). Not thread-safe."""

    def __init__(self, shop: Shop, game: GameInfo, max_steps: int, lenient: bool = False) -> None:
        self.lenient = lenient
        self.game = game
        goal: dict[str, Any] = game.meta["goal"]
        self.goal = goal["instruction_text"]
        self.max_steps = max_steps
        self.session = ShopSession(shop, goal)
        self.steps = 0
        self.done = False
        self.last = StepResult(
            self.session.observation(), self.session.available_actions(), 0.0, False, False, 0,
            "reset",
        )  # fmt: skip

    def admits(self, action: str) -> bool:
        """Whether ``action`` is one this page offers (a search on the search page, a click
        on something shown)."""
        name, _, rest = action.strip().partition("[")
        if not rest.endswith("]"):
            return False
        arg = rest[:-1].strip().lower()
        if name == "search":
            return self.session.has_search_bar() and bool(arg)
        return name == "click" and arg != "search" and arg in self.session.clickables()

    def step(self, action: str) -> StepResult:
        """Play ``action``; ValueError (nothing changes, no step used) for one the page does
        not offer (a lenient episode: a no-op step instead), RuntimeError once the episode
        is over."""
        if self.done:
            raise RuntimeError("the episode is over")
        started = time.monotonic()
        try:
            outcome = self.session.act(action)
        except ValueError:
            if not self.lenient:
                raise
            outcome = Outcome("invalid")
        search = None
        if outcome.kind == "search":  # for the run's record of queries (the shop's BM25)
            query = " ".join(self.session.keywords)
            search = SearchRecord(
                query, "bm25", len(self.session.results), time.monotonic() - started
            )
        self.steps += 1
        self.done = outcome.done or self.steps >= self.max_steps
        self.last = StepResult(
            self.session.observation(),
            self.session.available_actions() if not self.done else [],
            outcome.reward,
            self.done,
            outcome.reward >= WIN_REWARD,
            self.steps,
            outcome.kind,
            search,
        )
        return self.last

    def close(self) -> None:
        """Nothing to release (the shop is shared)."""
