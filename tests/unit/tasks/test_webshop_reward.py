"""WebShop's purchase reward: the cases and values of WebShop's own
``tests/web-agent-site/engine/test_goal.py``, then what we do differently on purpose (sizes
match exactly, thefuzz's rounding before the threshold)."""

from __future__ import annotations

from math import isclose

from agent2rl.tasks.webshop.reward import (
    attribute_reward,
    fuzzy_score,
    normalize_color,
    option_reward,
    purchase_reward,
    type_reward,
    type_words,
)

BASKETBALL_GOAL = "Mens D.O.N. Issue 2 Gca Basketball Sneakers Shoes Casual - Off White"
BASKETBALL_BOUGHT = (
    "PEAK High Top Mens Basketball Shoes Lou Williams Streetball Master Breathable Non Slip "
    "Outdoor Sneakers"
)
CORD_GOAL = (
    "Saireed UL Listed 2 Prong Power Cord for JBL Bar 3.1 Bar 2.1 Channel 4K Ultra HD Soundbar"
)
CORD_BOUGHT = (
    "BRST AC Power Cord Outlet Socket Cable Plug Lead for Panasonic SC-HT830V DVD/VCR Combo "
    "Home Theater System"
)


def test_type_reward_cases_of_webshop() -> None:
    goal = {"query": "Query 1", "product_category": "a › b › c", "name": "Name 1"}
    bought = dict(goal)
    r = type_reward(bought, goal)
    assert r == {"r_type": 1.0, "query_match": True, "category_match": True, "title_score": 1}

    bought["query"] = "Query 2"
    assert type_reward(bought, goal)["query_match"] is False
    for category, match in [
        ("b › c › a", True),
        ("d › e › f", False),
        ("a › d › b", True),
        ("a › a › b", True),
        ("a › a › d", False),
    ]:
        bought["product_category"] = category
        assert type_reward(bought, goal)["category_match"] is match, category

    goal["name"], bought["name"] = BASKETBALL_GOAL, BASKETBALL_BOUGHT
    assert isclose(type_reward(bought, goal)["title_score"], 0.333, abs_tol=1e-2)
    goal["name"] = CORD_GOAL + " Home Theater System Subwoofer"
    bought["name"] = CORD_BOUGHT
    assert isclose(type_reward(bought, goal)["title_score"], 0.3, abs_tol=1e-2)
    goal["name"] = CORD_GOAL
    assert isclose(type_reward(bought, goal)["title_score"], 0.15, abs_tol=1e-2)
    goal["name"] = "Rusticware 921ORB Kitchen and Bath Cabinet Knob"
    bought["name"] = (
        "Minkissy 2pcs Stainless Steel Eyebrow Tweezers Blackhead Acne Remover Portable Makeup "
        "Tweezers (Silver)"
    )
    assert type_reward(bought, goal)["title_score"] < 0.05


def test_r_type_steps_at_the_title_thresholds() -> None:
    goal = {"query": "q", "product_category": "a › b", "name": "red kettle pot"}
    other = {"query": "x", "product_category": "c › d"}
    assert type_reward({**other, "name": "kettle pot"}, goal)["r_type"] == 1.0  # 2/3 > 0.2
    goal5 = {**goal, "name": "alpha beta gamma delta epsilon"}
    assert type_reward({**other, "name": "alpha zeta"}, goal5)["r_type"] == 0.5  # 0.2, no match
    goal11 = {**goal, "name": " ".join(f"w{c}" for c in "abcdefghijk")}
    assert type_reward({**other, "name": "wa"}, goal11)["r_type"] == 0.1  # 1/11 < 0.1
    assert type_reward({**other, "name": "zz"}, goal5)["r_type"] == 0.0


def test_type_words_stand_in() -> None:
    assert type_words(BASKETBALL_GOAL) == [
        "d.o.n.", "issue", "gca", "basketball", "sneakers", "shoes", "casual", "off", "white",
    ]  # fmt: skip
    # numbers and model numbers are not types; repeats count (WebShop divides by the list)
    assert type_words("JBL Bar 3.1 Bar 2.1 Channel 4K") == ["jbl", "bar", "bar", "channel"]
    assert type_words("Shampoo for Women, 2 Pack (16 oz)") == ["shampoo", "pack", "oz"]
    assert type_words("") == []


def test_attribute_reward_cases_of_webshop() -> None:
    goal = {"attributes": ["tea tree", "essential oils", "natural ingredients"]}
    assert attribute_reward(
        {"Attributes": ["tea tree", "essential oil", "natural ingredients"]}, goal
    ) == (1, 3)
    bought = {
        "Attributes": ["essential oil", "natural ingredients"],
        "Title": "",
        "BulletPoints": [],
        "Description": "",
    }
    assert attribute_reward(bought, goal) == (2 / 3, 2)
    bought = {
        "Attributes": [],
        "Title": "",
        "BulletPoints": ["This shampoo has essential oils and smells like lemons"],
        "Description": "Best shampoo on the market, made with natural ingredients",
    }
    assert attribute_reward(bought, goal) == (2 / 3, 2)
    bought = {
        "Attributes": ["tea bag", "earl gray", "lipton"],
        "Title": "English tea for breakfast",
        "BulletPoints": ["Soothing aroma", "Calming, great feeling"],
        "Description": "Best tea made by Lipton, great to pair with breakfast",
    }
    assert attribute_reward(bought, goal) == (0, 0)


def test_option_reward_cases_of_webshop() -> None:
    goal = ["grey", "XL", "pack of 12"]
    assert option_reward(["pack of 12", "grey", "XL"], goal) == (1, 3)
    assert option_reward(["pack of 12", "blue", "XL"], goal) == (2 / 3, 2)
    fuzzy_goal = ["cool powder snow", "XL", "pack of 12"]
    assert option_reward(["pack of 12", "powder snow", "XL"], fuzzy_goal) == (1, 3)
    assert option_reward(["goal 1", "goal 2"], []) == (None, 0)
    assert option_reward([], ["goal 1", "goal 2"]) == (0, 0)


def test_purchase_reward_cases_of_webshop() -> None:
    goal = {
        "query": "Query 1",
        "product_category": "a › b › c",
        "name": BASKETBALL_GOAL,
        "attributes": ["tea tree", "essential oils", "natural ingredients"],
        "goal_options": {"color": "grey", "size": "XL"},
        "price_upper": 40.00,
    }
    bought = {
        "query": "Query 1",
        "product_category": "a › b › c",
        "name": BASKETBALL_GOAL,
        "Attributes": ["tea tree", "essential oil", "natural ingredients"],
        "Title": "",
        "BulletPoints": [],
        "Description": "",
    }
    chosen = {"color": "grey", "size": "XL"}
    assert purchase_reward(bought, goal, 35, chosen)[0] == 1
    bought["Attributes"] = []
    # a bullet list given as one string is joined character by character, as in WebShop
    bought["BulletPoints"] = "This shampoo has essential oils and smells like lemons"
    bought["Description"] = "Best shampoo on the market, made with natural ingredients"
    assert isclose(purchase_reward(bought, goal, 35, chosen)[0], 2 / 3, abs_tol=1e-2)
    goal["goal_options"] = {"color": "grey", "size": "XL", "amount": "pack of 12"}
    assert isclose(purchase_reward(bought, goal, 35, chosen)[0], 0.5714, abs_tol=1e-2)
    goal["name"], bought["name"] = CORD_GOAL, CORD_BOUGHT
    bought["query"], bought["product_category"] = "Query 2", "a › d › e"
    reward, info = purchase_reward(bought, goal, 35, chosen)
    assert isclose(reward, 0.2857, abs_tol=1e-2)
    assert info["r_type"] == 0.5 and info["r_price"] is True


def test_price_over_the_cap_loses_its_share() -> None:
    goal = {
        "query": "q", "product_category": "a › b", "name": "kettle", "attributes": ["steel"],
        "goal_options": {}, "price_upper": 20.0,
    }  # fmt: skip
    bought = {
        "query": "q", "product_category": "a › b", "name": "kettle", "Attributes": ["steel"],
        "Title": "", "BulletPoints": [], "Description": "",
    }  # fmt: skip
    assert purchase_reward(bought, goal, 20.0, {})[0] == 1.0
    assert purchase_reward(bought, goal, 20.01, {})[0] == 0.5


def test_sizes_match_exactly_other_options_fuzzily() -> None:
    # WebShop's fuzzy test scores "large" against "x-large" at 100: a size would match.
    assert fuzzy_score("large", "x-large") == 100
    assert option_reward({"size": "large"}, {"size": "x-large"}) == (0, 0)
    assert option_reward({"size": "X-Large "}, {"size": "x-large"}) == (1, 1)
    assert option_reward({"color": "navy blue"}, {"color": "dark blue"}) == (1, 1)  # both "blue"
    assert option_reward({"color": "red"}, {"color": "navy"}) == (0, 0)


def test_fuzzy_score_is_thefuzz_token_set_ratio() -> None:
    assert fuzzy_score("essential oil", "essential oils") > 85
    assert fuzzy_score("Tea-Tree!", "tea tree") == 100  # punctuation and case
    assert fuzzy_score("café", "caf") == 100  # non-ASCII dropped, as thefuzz's force_ascii
    assert fuzzy_score("", "tea") == 0
    assert normalize_color("navy blue") == "blue" and normalize_color("xl") == "xl"
