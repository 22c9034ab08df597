"""The WebShop catalog (read as WebShop reads its files), the goals and their seeded order,
and the shop's pages and actions, on small fixture files in WebShop's exact schema."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from agent2rl.rollout.env import GameInfo
from agent2rl.tasks.webshop.catalog import (
    human_goals,
    load_catalog,
    parse_pricing,
    shuffle_goals,
    synthetic_goals,
)
from agent2rl.tasks.webshop.engine import SEP, Shop, ShopSession, search_text
from agent2rl.tasks.webshop.games import ShopEpisode
from agent2rl.tasks.webshop.splits import expert_walkthrough, search_query, split_goals

FIXTURES = Path(__file__).resolve().parents[2] / "support" / "fixtures" / "webshop"


@pytest.fixture(scope="module")
def shop() -> Shop:
    return Shop(load_catalog(FIXTURES))


def test_catalog_is_read_as_webshop_reads_it(shop: Shop) -> None:
    cat = shop.catalog
    # a repeated asin and a "nan" asin are dropped, the first product of an asin kept
    assert [p.asin for p in cat.products] == [
        "B000SHAMP1", "B000SHAMP2", "B000SNEAK1", "B000LAMP01", "B000TEA001",
    ]  # fmt: skip
    sh1, sh2, sneak, lamp, _ = cat.products
    assert sh1.title == "Verano Tea Tree Shampoo for Dry Scalp"
    assert sh1.query == "tea tree shampoo"  # lowercased, stripped
    # option names and values lowercased, "/" written as " | ", null options skipped
    assert sh1.options == {
        "scent": ["tea tree", "mint | eucalyptus"],
        "size": ["8 fl oz", "16 fl oz"],
    }
    assert sneak.options == {"color": ["black", "navy blue"], "size": ["9", "10", "x-large"]}
    assert sh2.bullet_points == ["Paraben free"]  # one string becomes a one-item list
    assert (sh2.pricing, sh2.price_tag) == ([8.0, 14.0], "$8.0 to $14.0")
    assert 8.0 <= cat.prices["B000SHAMP2"] <= 14.0
    assert (lamp.pricing, lamp.price_tag, cat.prices["B000LAMP01"]) == ([100.0], "$100.0", 100.0)
    assert lamp.instruction is None and lamp.attributes == ["usb port", "dimmable"]
    assert cat.prices == load_catalog(FIXTURES).prices  # a ranged price is drawn seeded


def test_parse_pricing() -> None:
    assert parse_pricing("$12.99") == ([12.99], "$12.99")
    assert parse_pricing("$1,299.00") == ([1299.0], "$1299.0")
    assert parse_pricing("$5.00 - $9.50 - $12.00") == ([5.0, 9.5], "$5.0 to $9.5")
    assert parse_pricing(None) == ([100.0], "$100.0")
    with pytest.raises(ValueError):
        parse_pricing("free")


def test_synthetic_goals_one_per_option_combination(shop: Shop) -> None:
    goals = synthetic_goals(shop.catalog)
    # shampoo 1: 2 scents x 2 sizes; shampoo 2: 2 sizes; sneakers 2 x 3; tea 2; lamp none
    assert len(goals) == 4 + 2 + 6 + 2
    first = goals[0]
    assert first["goal_options"] == {"scent": "tea tree", "size": "8 fl oz"}
    assert first["instruction_text"].startswith(
        "i need a sulfate free tea tree shampoo with scent: tea tree, and size: 8 fl oz, and "
        "price lower than "
    )
    cap = first["price_upper"]
    assert cap in (20.0, 30.0, 40.0, 50.0) and cap > shop.catalog.prices["B000SHAMP1"]
    assert first["attributes"] == ["sulfate free", "tea tree"]
    assert synthetic_goals(shop.catalog) == goals  # the price caps are seeded


def test_human_goals_name_their_options(shop: Shop) -> None:
    goals = human_goals(shop.catalog)
    assert len(goals) == 1  # the instruction without attributes is skipped, as in WebShop
    assert goals[0]["goal_options"] == {"color": "navy blue", "size": "10"}
    assert goals[0]["instruction_text"].startswith("i need navy blue running shoes in size 10")


def test_goal_order_is_webshops_seeded_shuffle(shop: Shop) -> None:
    goals = synthetic_goals(shop.catalog)
    expected = list(goals)
    random.seed(233)  # what WebShop's SimServer does before random.shuffle(self.goals)
    random.shuffle(expected)
    assert shuffle_goals(goals) == expected


def test_splits_are_disjoint_by_product(shop: Shop) -> None:
    s = split_goals(shop.catalog, n_eval=2, n_validation=1)
    assert [g["game_id"] for g in s.private] == ["s00000", "s00001"]
    graded = {g["asin"] for g in s.private}
    val = {g["asin"] for g in s.validation}
    assert not graded & val
    assert all(g["asin"] not in graded | val for g in s.public)
    ids = [g["game_id"] for g in s.private + s.validation + s.public]
    assert len(ids) == len(set(ids))
    with pytest.raises(ValueError):
        split_goals(shop.catalog, n_eval=100, n_validation=1)


def test_search_indexes_webshops_fields(shop: Shop) -> None:
    text = search_text(shop.catalog.by_asin["B000SHAMP1"])
    assert text == (
        "verano tea tree shampoo for dry scalp a sulfate free tea tree shampoo with natural "
        "ingredients. sulfate free formula scent: tea tree, mint | eucalyptus, and size: 8 fl "
        "oz, 16 fl oz"
    )
    assert shop.search("tea tree shampoo")[0] == "B000SHAMP1"
    assert shop.search("rubber sole running")[0] == "B000SNEAK1"
    assert shop.search("eucalyptus") == ["B000SHAMP1"]  # option values are indexed
    assert shop.search("zzzz the") == []  # nothing above 0: no results


def _session(shop: Shop) -> ShopSession:
    goal = next(g for g in synthetic_goals(shop.catalog) if g["asin"] == "B000SNEAK1")
    return ShopSession(shop, goal)


def test_pages_and_observations_follow_webshops_text_mode(shop: Shop) -> None:
    s = _session(shop)
    instr = s.goal["instruction_text"]
    assert s.observation() == SEP.join(["WebShop", "Instruction:", instr, "Search"])
    assert s.available_actions() == ["search[<query>]"]
    assert s.act("search[Running Shoes Rubber Sole]").kind == "search"
    obs = s.observation()
    assert obs.startswith(SEP.join(["Instruction:", instr, "Back to Search"]))
    assert f"Page 1 (Total results: {len(s.results)})" in obs and "< Prev" not in obs
    assert "B000SNEAK1 [SEP] Kestra Mens Running Sneakers Rubber Sole [SEP] $45.0" in obs
    assert "click[b000sneak1]" in s.available_actions()
    s.act("click[B000SNEAK1]")  # matched in lowercase, as WebShop lowercases the argument
    assert s.page == "item"
    assert s.observation().endswith(
        "< Prev [SEP] color [SEP] black [SEP] navy blue [SEP] size [SEP] 9 [SEP] 10 [SEP] "
        "x-large [SEP] Kestra Mens Running Sneakers Rubber Sole [SEP] Price: $45.0 [SEP] "
        "Rating: N.A. [SEP] Description [SEP] Features [SEP] Reviews [SEP] Buy Now"
    )
    s.act("click[features]")
    assert s.observation().endswith("< Prev [SEP] Rubber sole [SEP] Breathable mesh")
    s.act("click[< prev]")
    s.act("click[navy blue]")
    s.act("click[black]")  # the last click of an option wins
    s.act("click[10]")
    assert s.options == {"color": "black", "size": "10"}
    s.act("click[< prev]")
    assert s.page == "results" and s.page_no == 1
    s.act("click[next >]")
    assert s.page_no == 2 and "< Prev" in s.observation()  # WebShop pages past the end too
    s.act("click[back to search]")
    assert (s.page, s.results, s.options) == ("search", [], {})


def test_refused_actions_change_nothing(shop: Shop) -> None:
    s = _session(shop)
    for bad in ["click[b000sneak1]", "look", "search[]", "click[search]", "search[x"]:
        with pytest.raises(ValueError):
            s.act(bad)
    assert s.page == "search"
    s.act("search[running shoes]")
    before = s.observation()
    for bad in ["search[again]", "click[b000zzzzzz]", "click[buy now]", "click[description]"]:
        with pytest.raises(ValueError) as err:
            s.act(bad)
        assert "not on this page" in str(err.value) or "no search bar" in str(err.value)
    assert s.observation() == before


def test_purchase_rewards_and_ends(shop: Shop) -> None:
    s = _session(shop)
    goal = s.goal
    s.act("search[running shoes]")
    s.act("click[b000sneak1]")
    for value in goal["goal_options"].values():
        s.act(f"click[{value}]")
    out = s.act("click[buy now]")
    assert out.kind == "purchase" and out.done and out.reward == 1.0 and s.reward == 1.0
    assert s.observation().endswith("Your score (min 0.0, max 1.0) [SEP] 1.0")
    with pytest.raises(RuntimeError):
        s.act("click[buy now]")
    # without the options: 2 attributes + price of 2 + 2 + 1
    s = _session(shop)
    s.act("search[running shoes]")
    s.act("click[b000sneak1]")
    assert s.act("click[buy now]").reward == pytest.approx(3 / 5)


def test_episode_steps_kinds_limit_and_admits(shop: Shop) -> None:
    goal = {"game_id": "g", **synthetic_goals(shop.catalog)[0]}
    ep = ShopEpisode(shop, GameInfo("g", "beauty", {"goal": goal}), max_steps=3)
    assert ep.last.kind == "reset" and ep.goal == goal["instruction_text"]
    assert ep.admits("search[anything]") and not ep.admits("click[b000shamp1]")
    with pytest.raises(ValueError):
        ep.step("click[nothing]")
    assert ep.steps == 0  # a refused action uses no step
    assert ep.step("search[shampoo]").kind == "search"
    assert ep.admits("click[b000shamp1]") and not ep.admits("search[more]")
    assert ep.step("click[b000shamp1]").kind == "click"
    last = ep.step("click[description]")
    assert last.done and not last.won and last.reward == 0.0 and last.steps == 3
    with pytest.raises(RuntimeError):
        ep.step("click[< prev]")


def test_expert_walkthroughs_reach_full_reward(shop: Shop) -> None:
    assert search_query("I am looking for a face cream, that is long lasting") == (
        "face cream long lasting"
    )
    for goal in split_goals(shop.catalog, 0, 0).public:
        row = expert_walkthrough(shop, goal, max_steps=15)
        if goal["game_id"].startswith("s"):
            assert row is not None, goal["instruction_text"]
        if row is None:
            continue
        assert row["won"] and row["reward"] == 1.0
        assert row["steps"][0]["action"].startswith("search[")
        assert row["steps"][-1]["action"] == "click[buy now]"
        ep = ShopEpisode(shop, GameInfo(goal["game_id"], None, {"goal": goal}), 15)
        for step in row["steps"]:  # the recorded pages are what a replay shows
            assert ep.last.observation == step["observation"]
            ep.step(step["action"])
        assert ep.last.won
