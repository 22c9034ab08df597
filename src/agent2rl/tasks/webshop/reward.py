"""WebShop's purchase reward (``web_agent_site/engine/goal.py``, ``get_reward``), written anew.

For a purchased product, its price and the options chosen on its page, against a goal::

    reward = r_type * (attribute matches + option matches + [price <= price_upper])
                    / (goal attributes + goal options + 1)

- ``r_type`` (:func:`type_reward`): 1.0 when the product is of the wanted type; 0.5 when the
  title overlap is at most 0.2 and neither the search query nor two categories match; 0.1
  when the title overlap is below 0.1; 0.0 when it is 0. The title overlap is the share of the
  goal title's *type words* (:func:`type_words`) found among the purchased title's.
- An attribute (:func:`attribute_reward`) matches when one of the product's attributes is a
  fuzzy match (``token_set_ratio > 85``) or, failing that, when the attribute text occurs in
  the title, the bullet points or the description (lowercased).
- An option (:func:`option_reward`) matches a chosen option by the same fuzzy test after both
  are reduced to their first colour word (WebShop's ``normalize_color``).
- The price term is 1 when the price is at most ``price_upper`` (goals always have one).

Where this differs from WebShop's code, and why:

- **Type words** are not spaCy's nouns. WebShop tags titles with spaCy (``en_core_web_lg``
  in its first release, ``en_core_web_sm`` in the code the reference clones); neither model
  installs here. :func:`type_words` is a documented stand-in: the title's content words
  (not a number, not a function word, not an audience word like *mens*), which reproduces
  every value of WebShop's own ``tests/web-agent-site/engine/test_goal.py``. On other titles it
  may count a word spaCy would not (an adjective) and so give a different overlap; ``r_type``
  only moves where the overlap crosses 0.2, 0.1 or 0.
- **Size options match exactly** (case and surrounding spaces aside). WebShop matches every
  option fuzzily, which scores ``large`` against ``x-large`` (and ``small`` against
  ``x-small``) at 100: a size that is not the one asked for would count as found.
- **Option values are compared as values.** Given a goal's options as a name -> value dict,
  WebShop fuzzes each chosen value against the text of the ``(name, value)`` pair; we compare
  it with the value (the name decides only whether the exact size rule applies).
- **Fuzzy scores** come from ``rapidfuzz`` with thefuzz's processing (non-ASCII dropped,
  lowercased, punctuation to spaces) and thefuzz's rounding to an integer before the
  ``> 85`` test, as ``thefuzz.fuzz.token_set_ratio`` does.

The functions take WebShop's own dictionaries (keys ``query``, ``product_category``,
``name``, ``Attributes``, ``Title``, ``BulletPoints``, ``Description`` for a product;
``query``, ``product_category``, ``name``, ``attributes``, ``goal_options``, ``price_upper``
for a goal), so WebShop's test cases apply unchanged.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from rapidfuzz import fuzz
from rapidfuzz.utils import default_process

#: WebShop's fuzzy-match threshold (a match scores strictly more)
FUZZY_THRESHOLD = 85

#: WebShop's colour words (``normalize.py``): an option is reduced to the first one it holds
COLOR_SET = (
    "alabaster", "apricot", "aqua", "ash", "asphalt", "azure", "banana", "beige", "black",
    "blue", "blush", "bordeaux", "bronze", "brown", "burgundy", "camel", "camo", "caramel",
    "champagne", "charcoal", "cheetah", "chestnut", "chocolate", "christmas", "coffee",
    "cognac", "copper", "coral", "cranberry", "cream", "crystal", "dark", "denim", "eggplant",
    "elephant", "espresso", "fuchsia", "gold", "granite", "grape", "graphite", "grass", "gray",
    "green", "grey", "heather", "indigo", "ivory", "ivy", "khaki", "lavender", "lemon",
    "leopard", "light", "lilac", "lime", "magenta", "maroon", "mauve", "merlot", "midnight",
    "mint", "mocha", "multicolor", "mushroom", "mustard", "natural", "navy", "nude", "olive",
    "orange", "peach", "pewter", "pink", "plum", "purple", "rainbow", "red", "rose", "royal",
    "rust", "sand", "sapphire", "seashell", "silver", "skull", "slate", "steel", "stone",
    "stonewash", "sunflower", "tan", "taupe", "teal", "tiger", "turquoise", "violet", "walnut",
    "wheat", "white", "wine", "yellow",
)  # fmt: skip

# Words that link or determine rather than name: never a product type.
_FUNCTION_WORDS = frozenset(
    """a an the and or nor but for with without of in on at by to from into onto as per via
    vs plus than that this these those it its your our their my his her is are be was were
    has have had do does not no all any each every some""".split()
)
# Who a product is for (spaCy tags these inconsistently: "Mens" is a noun in one title and a
# modifier in the next); they say nothing of what the product is.
_AUDIENCE_WORDS = frozenset(
    """men mens men's women womens women's woman man boy boys boy's girl girls girl's kid kids
    kid's baby babies toddler toddlers unisex adult adults""".split()
)
_TOKEN = re.compile(r"[^\s,;:()\[\]{}/&+|\"!?*]+")


def fuzzy_score(a: Any, b: Any) -> int:
    """``thefuzz.fuzz.token_set_ratio(a, b)``: both texts (``str()`` of anything else) keep
    their ASCII characters only, are lowercased with punctuation turned to spaces, then
    rapidfuzz's token-set ratio is rounded to an integer. 0 when either text is empty after
    that, as in thefuzz."""
    pa = default_process(_ascii_only(str(a)))
    pb = default_process(_ascii_only(str(b)))
    if not pa or not pb:
        return 0
    return int(round(fuzz.token_set_ratio(pa, pb)))


def _ascii_only(text: str) -> str:
    return "".join(ch for ch in text if ord(ch) < 128)


def normalize_color(option: str) -> str:
    """The first colour word of :data:`COLOR_SET` contained in ``option`` (in the set's
    order, as a substring: ``"navy blue"`` -> ``"blue"``, since *blue* is listed first), or
    ``option`` unchanged when it holds none."""
    for color in COLOR_SET:
        if color in option:
            return color
    return option


def type_words(title: str) -> list[str]:
    """The stand-in for spaCy's nouns of a title (see the module docstring): its lowercased
    tokens (split at spaces and at ``, ; : ( ) [ ] { } / & + | " ! ? *``; a lone ``-`` is
    dropped) that hold a letter and no digit (model numbers, sizes and counts such as ``4K``
    or ``2pcs`` are not types) and are neither function nor audience words. Repeats are kept:
    WebShop divides by the length of this list, duplicates included."""
    words = []
    for token in _TOKEN.findall(title.lower()):
        token = token.strip("-'.") if token.count(".") < 2 else token  # keep "d.o.n."
        if any(ch.isdigit() for ch in token) or not any(ch.isalpha() for ch in token):
            continue
        if token not in _FUNCTION_WORDS and token not in _AUDIENCE_WORDS:
            words.append(token)
    return words


def type_reward(purchased: Mapping[str, Any], goal: Mapping[str, Any]) -> dict[str, Any]:
    """``r_type`` with its parts: ``query_match`` (same search query), ``category_match``
    (at least two of the ``›``-separated category levels in common, in any order),
    ``title_score`` (share of the goal title's type words among the purchased title's; 0.2
    when the goal title has none)."""
    query_match = purchased["query"] == goal["query"]
    bought_levels = {x.strip() for x in purchased["product_category"].split("›")}
    goal_levels = {x.strip() for x in goal["product_category"].split("›")}
    category_match = len(bought_levels & goal_levels) >= 2

    bought = set(type_words(purchased["name"]))
    wanted = type_words(goal["name"])
    title_score = 0.2 if not wanted else len(bought & set(wanted)) / len(wanted)

    r_type = 1.0
    if not (query_match or category_match or title_score > 0.2):
        r_type = 0.5
    if title_score < 0.1:
        r_type = 0.1
    if title_score == 0.0:
        r_type = 0.0
    return {
        "r_type": r_type,
        "query_match": query_match,
        "category_match": category_match,
        "title_score": title_score,
    }


def attribute_reward(purchased: Mapping[str, Any], goal: Mapping[str, Any]) -> tuple[float, int]:
    """(share of the goal's attributes found, how many). An attribute is found by a fuzzy
    match with one of the product's ``Attributes``, else as a substring of its lowercased
    title, bullet points (joined by spaces: a bullet list given as one string is joined
    character by character, as in WebShop) or description. Raises ZeroDivisionError for a
    goal without attributes (WebShop never builds one)."""
    wanted = goal["attributes"]
    found = sum(
        any(fuzzy_score(have, attr) > FUZZY_THRESHOLD for have in purchased["Attributes"])
        or attr in purchased["Title"].lower()
        or attr in " ".join(purchased["BulletPoints"]).lower()
        or attr in purchased["Description"].lower()
        for attr in wanted
    )
    return found / len(wanted), found


def _named(options: Mapping[str, str] | Sequence[str]) -> list[tuple[str | None, str]]:
    if isinstance(options, Mapping):
        return [(str(k), str(v)) for k, v in options.items()]
    return [(None, str(v)) for v in options]


def option_reward(
    purchased: Mapping[str, str] | Sequence[str], wanted: Mapping[str, str] | Sequence[str]
) -> tuple[float | None, int]:
    """(share of the wanted options among those chosen, how many; the share is None when
    nothing is wanted). Options are given as a name -> value mapping or a list of values; a
    wanted option whose name holds ``size`` matches a chosen value that equals it exactly
    (lowercased, stripped), any other matches by the fuzzy test after colour normalisation.
    Each wanted option counts once, however many chosen options match it."""
    chosen = _named(purchased)
    goal = _named(wanted)
    exact = {v.strip().lower() for _, v in chosen}
    fuzzy = [normalize_color(v) for _, v in chosen]
    matches = 0
    for name, value in goal:
        if name is not None and "size" in name.lower():
            matches += value.strip().lower() in exact
        else:
            target = normalize_color(value)
            matches += any(fuzzy_score(have, target) > FUZZY_THRESHOLD for have in fuzzy)
    return (matches / len(goal) if goal else None), matches


def purchase_reward(
    purchased: Mapping[str, Any],
    goal: Mapping[str, Any],
    price: float,
    options: Mapping[str, str],
) -> tuple[float, dict[str, Any]]:
    """WebShop's reward for buying ``purchased`` at ``price`` with ``options`` (the options
    chosen on its page, name -> value) against ``goal``, in [0, 1], with its parts
    (``r_type``, ``r_att``, ``r_option`` (None without goal options), ``r_price``,
    ``title_score``, ``query_match``, ``category_match``). Nothing chosen counts as no option
    matched."""
    type_info = type_reward(purchased, goal)
    r_price = price <= goal["price_upper"]
    r_att, n_att = attribute_reward(purchased, goal)
    r_option, n_opt = option_reward(options, goal["goal_options"])
    denominator = len(goal["attributes"]) + len(goal["goal_options"]) + 1
    total = (n_att + n_opt + int(r_price)) / denominator * type_info["r_type"]
    return total, {**type_info, "r_att": r_att, "r_option": r_option, "r_price": r_price}
