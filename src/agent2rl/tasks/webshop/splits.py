"""A catalog's goals split into graded, validation and public games, and the expert's
walkthroughs of public games; shared by ``webshop`` and ``webshop-lite``.

The graded games are the first ``n_eval`` goals of WebShop's session order
(:func:`~agent2rl.tasks.webshop.catalog.shuffle_goals` of the synthetic goals): for the real
catalog and ``n_eval = 100`` they are the sessions 0-99 the reference code grades, named
``s00000`` to ``s00099`` as their session numbers. The validation games are the next goals
in that order whose product is not a graded goal's, ``n_validation`` of them; the public
games are the remaining goals whose product is neither a graded nor a validation goal's (a
goal for the same product with other options would be a graded goal with another colour),
then the human goals for such products (``h00000``...), which WebShop's human-goal setting
serves.

:func:`expert_walkthrough` plays a goal as an expert with the catalog's knowledge: it
searches the goal's instruction without request filler (:func:`search_query`; searching
the product type alone puts the product that fits lower in the listing: measured on the lite
catalog, the first result earns 0.87 on average this way, 0.52 with the type alone), pages
until a listed product would earn the full reward with the goal's options (the first such,
in listing order), opens it, chooses the options and buys. A goal no listed product of the
top 50 satisfies has no walkthrough.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agent2rl.rollout.env import GameInfo
from agent2rl.tasks.webshop.catalog import Catalog, human_goals, shuffle_goals, synthetic_goals
from agent2rl.tasks.webshop.engine import PRODUCT_WINDOW, SEARCH_RETURN_N, Shop
from agent2rl.tasks.webshop.games import WIN_REWARD, ShopEpisode
from agent2rl.tasks.webshop.reward import purchase_reward


@dataclass
class GoalSplits:
    """Goal rows (catalog goals plus ``game_id``) of the three splits."""

    private: list[dict[str, Any]]
    validation: list[dict[str, Any]]
    public: list[dict[str, Any]]


def split_goals(
    catalog: Catalog, n_eval: int, n_validation: int, with_human: bool = True
) -> GoalSplits:
    """The splits of the module docstring. Raises ValueError when the catalog has fewer
    than ``n_eval`` goals or too few for the validation split."""
    order = shuffle_goals(synthetic_goals(catalog))
    if len(order) < n_eval:
        raise ValueError(f"the catalog makes {len(order)} goals; {n_eval} are to be graded")
    rows = [{"game_id": f"s{i:05d}", **g} for i, g in enumerate(order)]
    private = rows[:n_eval]
    held = {g["asin"] for g in private}
    validation = [g for g in rows[n_eval:] if g["asin"] not in held][:n_validation]
    if len(validation) < n_validation:
        raise ValueError(
            f"only {len(validation)} goals for other products than the graded ones; "
            f"{n_validation} are wanted for validation"
        )
    held |= {g["asin"] for g in validation}
    public = [g for g in rows[n_eval:] if g["asin"] not in held]
    if with_human:
        humans = [g for g in human_goals(catalog) if g["asin"] not in held]
        public += [{"game_id": f"h{i:05d}", **g} for i, g in enumerate(humans)]
    return GoalSplits(private, validation, public)


#: the words of a request that name no product or attribute (BM25 ignores most of them as
#: stop words; leaving them out keeps the expert's query short, as people type queries)
_FILLER = frozenset(
    "i im i'm am is are a an the for to me my that which with and need want looking find buy "
    "would like please some".split()
)


def search_query(instruction: str) -> str:
    """The expert's query for an instruction: its lowercased words without request filler
    (``i am looking for a face cream that is long lasting`` -> ``face cream long
    lasting``); the whole instruction if nothing else is left."""
    words = instruction.lower().replace(",", " ").split()
    kept = [w for w in words if w not in _FILLER]
    return " ".join(kept or words)


def _full_reward_options(shop: Shop, asin: str, goal: dict[str, Any]) -> dict[str, str] | None:
    """The goal's options as this product offers them, if buying it with them earns 1."""
    prod = shop.catalog.by_asin[asin]
    chosen = {}
    for name, value in goal["goal_options"].items():
        if value not in prod.options.get(name, []):
            return None
        chosen[name] = value
    reward, _ = purchase_reward(prod.reward_view(), goal, shop.catalog.prices[asin], chosen)
    return chosen if reward >= WIN_REWARD else None


def expert_walkthrough(shop: Shop, goal: dict[str, Any], max_steps: int) -> dict[str, Any] | None:
    """A walkthrough row (``game_id``, ``group``, ``goal``, ``steps`` of ``{observation,
    admissible_actions, action}``, ``final_observation``, ``won``, ``reward``) of the
    expert of the module docstring, or None when no product in the search's top 50 earns
    the full reward or the walkthrough would exceed ``max_steps``."""
    episode = ShopEpisode(
        shop, GameInfo(goal["game_id"], goal["category"], {"goal": goal}), max_steps
    )
    steps: list[dict[str, Any]] = []

    def play(action: str) -> None:
        last = episode.last
        steps.append(
            {"observation": last.observation, "admissible_actions": last.admissible_actions,
             "action": action}
        )  # fmt: skip
        episode.step(action)

    query = search_query(goal["instruction"])
    play(f"search[{query}]")
    listed = enumerate(episode.session.results[:SEARCH_RETURN_N])
    fits = ((i, a, _full_reward_options(shop, a, goal)) for i, a in listed)
    pick = next(((i, a, o) for i, a, o in fits if o is not None), None)
    if pick is None:
        return None
    rank, asin, options = pick
    page = rank // PRODUCT_WINDOW
    n_actions = 1 + page + 1 + len(options) + 1
    if n_actions > max_steps:
        return None
    for _ in range(page):
        play("click[next >]")
    play(f"click[{asin.lower()}]")
    for value in options.values():
        play(f"click[{value}]")
    play("click[buy now]")
    if not episode.last.won:  # a value two options share, chosen under the other name
        return None
    return {
        "game_id": goal["game_id"],
        "group": goal["category"],
        "goal": goal["instruction_text"],
        "steps": steps,
        "final_observation": episode.last.observation,
        "won": True,
        "reward": episode.last.reward,
    }
