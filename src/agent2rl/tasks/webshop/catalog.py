"""WebShop's catalog files, read as WebShop reads them, and the goals it builds from them.

Three files, in WebShop's own formats (``data/`` of the WebShop repository; the 1,000-product
set is what the reference code grades on):

``items_shuffle_1000.json``
    a list of products: ``asin``, ``name`` (the title), ``category``, ``query`` (the search
    that found it), ``product_category`` (``A › B › C``), ``full_description``,
    ``small_description`` (bullet points: a list, or one string), ``pricing`` (``"$12.99"``,
    ``"$10.00 - $20.00"``, empty or missing), ``customization_options`` (option name -> list
    of ``{"value", "image"}``, or null), ``images``, and Amazon fields WebShop drops.
``items_ins_v2_1000.json``
    asin -> ``{"attributes", "instruction", "instruction_attributes"}``: the product's
    attributes, and the synthetic instruction with the attributes it asks for.
``items_human_ins.json``
    asin -> a list of human-written instructions: ``{"asin", "instruction", "attributes",
    "options", "instruction_attributes", "instruction_options", "assignment_id",
    "worker_id"}``.

:func:`load_catalog` does what WebShop's ``load_products`` does: it skips ``nan`` and
over-long asins and repeated asins (first kept), lowercases option names and values and
writes a ``/`` inside a value as ``" | "``, parses the price text into a price or a range,
and gives a product without attributes the attribute ``DUMMY_ATTR``.

:func:`synthetic_goals` and :func:`human_goals` do what ``get_synthetic_goals`` and
``get_human_goals`` do. WebShop draws a ranged product's price and every goal's price cap
from Python's *unseeded* global random generator, so its goals' price caps (and the prices
of ranged products) change from one start to the next; here they come from
generators seeded from :data:`PRICE_SEED`, drawn product by product in catalog order, so
every start agrees. The goal order is then shuffled as WebShop shuffles it
(``random.seed(233); random.shuffle(goals)``, :func:`shuffle_goals`): the reference grades
sessions 0-99 of that order.
"""

from __future__ import annotations

import itertools
import json
import random
import re
from collections import Counter
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

#: the file names WebShop's code loads (``web_agent_site/utils.py``)
PRODUCTS_FILE = "items_shuffle_1000.json"
ATTRIBUTES_FILE = "items_ins_v2_1000.json"
HUMAN_FILE = "items_human_ins.json"
CATALOG_FILES = (PRODUCTS_FILE, ATTRIBUTES_FILE, HUMAN_FILE)

#: WebShop's price caps: a goal's cap is one of the first four above the product's price
PRICE_RANGE = [10.0 * i for i in range(1, 100)]
#: the seed WebShop shuffles its goals with (``SimServer.__init__``)
GOAL_SHUFFLE_SEED = 233
#: our seed for the draws WebShop leaves unseeded (ranged prices, price caps)
PRICE_SEED = 0


@dataclass
class Product:
    """One product as WebShop's engine holds it after ``load_products``."""

    asin: str
    title: str
    category: str
    query: str
    product_category: str
    description: str
    bullet_points: list[str]
    #: one price, or the two ends of a range
    pricing: list[float]
    #: the price as the pages show it (``$12.99``, ``$10.0 to $20.0``)
    price_tag: str
    #: option name (lowercased) -> values (lowercased, ``/`` written as ``" | "``)
    options: dict[str, list[str]]
    attributes: list[str]
    instruction: str | None = None
    instruction_attributes: list[str] | None = None
    human_instructions: list[dict[str, Any]] = field(default_factory=list)

    def reward_view(self) -> dict[str, Any]:
        """The product as :mod:`~agent2rl.tasks.webshop.reward` reads it (WebShop's keys)."""
        return {
            "query": self.query,
            "product_category": self.product_category,
            "name": self.title,
            "Title": self.title,
            "Attributes": self.attributes,
            "BulletPoints": self.bullet_points,
            "Description": self.description,
        }


@dataclass
class Catalog:
    """The products in file order, by asin, with the price each is sold at."""

    products: list[Product]
    by_asin: dict[str, Product]
    prices: dict[str, float]


def parse_pricing(text: str | None) -> tuple[list[float], str]:
    """(prices, price tag) from WebShop's price text: every ``$``-separated number (other
    characters dropped), the first two of a range; no text gives ``[100.0]`` and
    ``$100.0`` as in WebShop. Raises ValueError for a ``$`` piece with no number."""
    if not text:
        return [100.0], "$100.0"
    prices = [float(Decimal(re.sub(r"[^\d.]", "", piece))) for piece in text.split("$")[1:]]
    if not prices:
        raise ValueError(f"price text {text!r} holds no $ amount")
    if len(prices) == 1:
        return prices, f"${prices[0]}"
    return prices[:2], f"${prices[0]} to ${prices[1]}"


def read_json(path: Path) -> Any:
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def load_catalog(folder: Path) -> Catalog:
    """The catalog in ``folder`` (the three files of :data:`CATALOG_FILES`; the human
    instructions file may be missing). Raises FileNotFoundError naming a missing file,
    ValueError for a product lacking a field WebShop needs."""
    folder = Path(folder)
    raw = read_json(folder / PRODUCTS_FILE)
    attrs: dict[str, Any] = read_json(folder / ATTRIBUTES_FILE)
    human_path = folder / HUMAN_FILE
    human: dict[str, Any] = read_json(human_path) if human_path.exists() else {}
    products: list[Product] = []
    seen: set[str] = set()
    for p in raw:
        asin = str(p.get("asin"))
        if asin == "nan" or len(asin) > 10 or asin in seen:
            continue
        seen.add(asin)
        try:
            products.append(_product(p, attrs.get(asin), human.get(asin)))
        except KeyError as err:
            raise ValueError(f"product {asin} has no field {err}") from None
    rng = random.Random(PRICE_SEED)
    prices = {  # WebShop's generate_product_prices, in catalog order
        p.asin: p.pricing[0] if len(p.pricing) == 1 else rng.uniform(*p.pricing[:2])
        for p in products
    }
    return Catalog(products, {p.asin: p for p in products}, prices)


def _product(p: dict[str, Any], attrs: dict[str, Any] | None, human: list | None) -> Product:
    bullets = p["small_description"]
    options = {
        name.lower(): [c["value"].strip().replace("/", " | ").lower() for c in contents]
        for name, contents in (p.get("customization_options") or {}).items()
        if contents is not None
    }
    pricing, tag = parse_pricing(p.get("pricing"))
    attrs = attrs or {}
    return Product(
        asin=str(p["asin"]),
        title=p["name"],
        category=p["category"],
        query=p["query"].lower().strip(),
        product_category=p["product_category"],
        description=p["full_description"],
        bullet_points=bullets if isinstance(bullets, list) else [bullets],
        pricing=pricing,
        price_tag=tag,
        options=options,
        attributes=attrs.get("attributes") or ["DUMMY_ATTR"],
        instruction=attrs.get("instruction"),
        instruction_attributes=attrs.get("instruction_attributes"),
        human_instructions=list(human or []),
    )


def _price_cap(price: float, rng: random.Random) -> tuple[float, str]:
    above = [p for p in PRICE_RANGE if p > price][:4]
    if len(above) >= 2:
        _, upper = sorted(rng.sample(above, 2))
        return upper, f", and price lower than {upper:.2f} dollars"
    return 1000000.0, ""


def _goal(
    prod: Product,
    text: str,
    instruction: str,
    attributes: list[str],
    upper: float,
    options: dict[str, str],
) -> dict[str, Any]:
    """A goal row for ``prod`` (:func:`synthetic_goals`' keys but ``weight``, in its order)."""
    return {
        "asin": prod.asin,
        "category": prod.category,
        "query": prod.query,
        "name": prod.title,
        "product_category": prod.product_category,
        "instruction_text": text,
        "instruction": instruction,
        "attributes": attributes,
        "price_upper": upper,
        "goal_options": options,
    }


def synthetic_goals(catalog: Catalog) -> list[dict[str, Any]]:
    """WebShop's synthetic goals (``human_goals`` off: what the reference grades): for every
    product with an instruction, one goal per combination of its option values (options in
    name order), the instruction followed by ``" with name: value, and name: value"`` and
    the price cap. A goal: ``asin``, ``category``, ``query``, ``name``, ``product_category``,
    ``instruction_text``, ``attributes``, ``price_upper``, ``goal_options`` (name -> value),
    ``instruction`` (the product's instruction alone: ours, for the expert's search),
    ``weight`` (WebShop's sampling weight, the mean of 1 / attribute frequency)."""
    rng = random.Random(PRICE_SEED + 1)
    goals = []
    counts: Counter[str] = Counter()
    for prod in catalog.products:
        if not prod.instruction:
            continue
        attributes = list(prod.instruction_attributes or [])
        if not attributes:
            raise ValueError(f"product {prod.asin}: an instruction without attributes")
        upper, price_text = _price_cap(catalog.prices[prod.asin], rng)
        names = sorted(prod.options)
        for combo in itertools.product(*(prod.options[n] for n in names)):
            chosen = dict(zip(names, combo, strict=True))
            text = ", and ".join(f"{k}: {v}" for k, v in chosen.items())
            full = prod.instruction + (f" with {text}" if text else "") + price_text
            goals.append(_goal(prod, full, prod.instruction, attributes, upper, chosen))
            counts.update(attributes)
    for g in goals:
        g["weight"] = sum(1.0 / counts[a] for a in g["attributes"]) / len(g["attributes"])
    return goals


def human_goals(catalog: Catalog) -> list[dict[str, Any]]:
    """WebShop's human goals (``get_human_goals``): one per human instruction with at least
    one attribute, the instruction (final periods dropped) plus the price cap. The wanted
    options, a list of values in the file, become name -> value by the product's option
    that offers each value (``option 1``, ``option 2``... for a value it does not offer), so
    that a wanted size is known as one."""
    rng = random.Random(PRICE_SEED + 2)
    goals = []
    for prod in catalog.products:
        for ins in prod.human_instructions:
            attributes = list(ins.get("instruction_attributes") or [])
            if not attributes:
                continue
            upper, price_text = _price_cap(catalog.prices[prod.asin], rng)
            named: dict[str, str] = {}
            for i, value in enumerate(ins.get("instruction_options") or [], 1):
                # the first option, in the product's order, that offers the value
                offers = (name for name, values in prod.options.items() if value in values)
                name = next(offers, None) or f"option {i}"
                named[name if name not in named else f"{name} {i}"] = value
            instruction = ins["instruction"].strip(".")
            goal = _goal(prod, instruction + price_text, instruction, attributes, upper, named)
            goals.append({**goal, "weight": 1.0})
    return goals


def shuffle_goals(goals: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The goals in WebShop's session order: ``random.seed(233); random.shuffle(goals)``
    (the same permutation for the same number of goals, whatever they hold)."""
    out = list(goals)
    random.Random(GOAL_SHUFFLE_SEED).shuffle(out)
    return out
