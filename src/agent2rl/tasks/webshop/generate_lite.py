"""webshop-lite's catalog generator: a few hundred fictional products in WebShop's own file
formats (:mod:`~agent2rl.tasks.webshop.catalog`), deterministic from a seed.

Five categories (beauty, grocery, fashion, electronics, home), five product types each (the
type is the product's ``query``, as WebShop's scraped products carry the search that found
them), a pool of attributes per category and option schemas per category (scent, flavor,
color, style, size; sizes such as ``8 fl oz`` or ``pack of 6`` are the options WebShop's
reward matches exactly). A product gets a fictional brand, three or four attributes of its
category, one or two options with two to four values each, a price in its type's band, and a
title, description and bullet points that mention its attributes, as scraped listings do.

Its synthetic instruction (``items_ins_v2``) names its type and two of its attributes, as
WebShop's do ("i am looking for a sulfate free and paraben free shampoo"); the goals are then
built from the catalog exactly as for the real data (:func:`~agent2rl.tasks.webshop.catalog.
synthetic_goals`: one per option combination, with a price cap). A few products also get
human-style instructions (``items_human_ins``), so that every file of the format is there.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from agent2rl.files import write_json_atomic
from agent2rl.tasks.webshop.catalog import ATTRIBUTES_FILE, HUMAN_FILE, PRODUCTS_FILE

#: bump whenever the generated data changes (the task store keys on it)
GENERATOR_VERSION = "3"

# category -> (top-level Amazon-style category, {type: (sub-category, (low, high) price, the
# nouns its titles carry after the type, as listings add "Pullover Sweatshirt")}, attribute
# pool, option schema: name -> values)
_CATEGORIES: dict[str, tuple[str, dict[str, tuple[str, tuple[int, int], str]], list[str], dict]] = {
    "beauty": (
        "Beauty & Personal Care",
        {
            "shampoo": ("Hair Care", (6, 24), "Hair Wash"),
            "conditioner": ("Hair Care", (6, 24), "Hair Treatment"),
            "face cream": ("Skin Care", (9, 45), "Moisturizer"),
            "lip balm": ("Skin Care", (3, 12), "Lip Care Stick"),
            "body lotion": ("Skin Care", (5, 28), "Skin Moisturizer"),
        },
        ["paraben free", "sulfate free", "cruelty free", "long lasting", "natural ingredients",
         "sensitive skin", "fragrance free", "dry skin"],
        {"scent": ["lavender", "coconut", "mint", "rose", "vanilla"],
         "size": ["2 fl oz", "8 fl oz", "16 fl oz"]},
    ),
    "grocery": (
        "Grocery & Gourmet Food",
        {
            "coffee": ("Beverages", (7, 30), "Ground Beans"),
            "green tea": ("Beverages", (4, 18), "Tea Bags"),
            "granola": ("Breakfast Foods", (4, 16), "Breakfast Cereal"),
            "dark chocolate": ("Snacks & Sweets", (3, 20), "Candy Bar"),
            "trail mix": ("Snacks & Sweets", (5, 22), "Nut Snack"),
        },
        ["gluten free", "sugar free", "non gmo", "low calorie", "keto friendly", "usda organic",
         "high protein", "individually wrapped"],
        {"flavor": ["vanilla", "caramel", "honey", "original", "berry"],
         "size": ["pack of 2", "pack of 6", "pack of 12"]},
    ),
    "fashion": (
        "Clothing, Shoes & Jewelry",
        {
            "t-shirt": ("Tops & Tees", (9, 30), "Crew Neck Tee"),
            "sneakers": ("Shoes", (25, 90), "Running Shoes"),
            "hoodie": ("Fashion Hoodies & Sweatshirts", (18, 55), "Pullover Sweatshirt"),
            "jeans": ("Jeans", (20, 70), "Denim Pants"),
            "rain jacket": ("Coats, Jackets & Vests", (30, 95), "Shell Coat"),
        },
        ["machine wash", "slim fit", "quick drying", "moisture wicking", "button closure",
         "rubber sole", "long sleeve", "water resistant"],
        {"color": ["black", "navy", "white", "grey", "red", "green"],
         "size": ["small", "medium", "large", "x-large"]},
    ),
    "electronics": (
        "Electronics",
        {
            "headphones": ("Headphones", (15, 80), "Over Ear Headset"),
            "phone charger": ("Chargers & Power Adapters", (8, 35), "Wall Adapter"),
            "usb cable": ("Cables", (5, 18), "Charging Cord"),
            "bluetooth speaker": ("Portable Speakers", (20, 90), "Portable Audio"),
            "power bank": ("Portable Power Banks", (12, 50), "Battery Pack"),
        },
        ["fast charging", "noise cancelling", "high speed", "easy to use", "plug and play",
         "long battery life", "wireless bluetooth", "compact design"],
        {"color": ["black", "white", "blue", "pink"], "style": ["standard", "pro", "mini"]},
    ),
    "home": (
        "Home & Kitchen",
        {
            "throw pillow": ("Decorative Pillows", (9, 35), "Cushion Cover"),
            "blanket": ("Throws", (15, 60), "Fleece Throw"),
            "desk lamp": ("Lamps", (14, 55), "Reading Light"),
            "wall clock": ("Wall Clocks", (12, 45), "Quartz Timepiece"),
            "storage basket": ("Storage Baskets", (10, 40), "Woven Bin"),
        },
        ["easy clean", "living room", "space saving", "non slip", "eco friendly",
         "easy assemble", "heavy duty", "dining room"],
        {"color": ["beige", "grey", "blue", "white", "brown"],
         "size": ["small", "medium", "large"]},
    ),
}  # fmt: skip

_BRANDS = [
    "acorna", "bellwin", "corvex", "dunmore", "elvara", "fenwick", "glimra", "harlow", "istria",
    "jorvik", "kestra", "lumio", "morrow", "nordell", "orlan", "pemberly", "quillon", "rovena",
    "solvik", "tamsin", "ulvano", "verano", "wexley", "yarrow", "zephra",
]  # fmt: skip
_INSTRUCTIONS = [
    "i need a {a} and {b} {t}",
    "i am looking for a {t} that is {a} and {b}",
    "find me a {a} {t} with {b}",
    "i want to buy a {t} which is {a} and {b}",
]
_HUMAN = [
    "i want a {a} {t} in {v}",
    "looking for {b} {t}, {v} please",
]


#: at most this many products per type (two digits of the id)
MAX_PER_TYPE = 100


def _asin(type_index: int, number: int) -> str:
    """A short WebShop-style id, numbered like a shop's SKUs: ``B0``, the product type's two
    digits, then the product's number within its type (``B00312``: type 3, product 12).
    WebShop keeps asins of at most ten characters. Why not random: measured with the tiny
    model after ten minutes of SFT on the walkthroughs, random ids (``B0`` and four capitals
    or digits, or four digits) were never copied right, so no session reached a purchase;
    with a type prefix a model can tie the id to the kind of product it was asked for, and
    a near miss is still a product of that kind on the page."""
    return f"B0{type_index:02d}{number:02d}"


def generate_catalog(
    seed: int, n_products: int
) -> tuple[list[dict[str, Any]], dict[str, Any], dict[str, Any]]:
    """(products, attributes, human instructions) in the formats of ``items_shuffle_1000``,
    ``items_ins_v2_1000`` and ``items_human_ins``: ``n_products`` products, the categories and
    types taken in turn so that every type has about as many products. Deterministic for a
    seed. Raises ValueError for ``n_products < 1``."""
    if n_products < 1:
        raise ValueError("generate at least one product")
    rng = random.Random(seed)
    kinds = [(c, t) for c, (_, types, _, _) in _CATEGORIES.items() for t in types]
    if n_products > len(kinds) * MAX_PER_TYPE:
        raise ValueError(f"at most {len(kinds) * MAX_PER_TYPE} products (their ids are numbered)")
    products, attributes, human = [], {}, {}
    for i in range(n_products):
        category, ptype = kinds[i % len(kinds)]
        top, types, pool, schema = _CATEGORIES[category]
        sub, (low, high), nouns = types[ptype]
        asin = _asin(i % len(kinds), i // len(kinds))
        brand = rng.choice(_BRANDS).capitalize()
        attrs = rng.sample(pool, rng.choice((3, 4)))
        names = rng.sample(sorted(schema), rng.choice((1, 2)))
        options = {
            n: sorted(rng.sample(schema[n], min(len(schema[n]), rng.randint(2, 4))),
                      key=schema[n].index)
            for n in sorted(names)
        }  # fmt: skip
        price = rng.randint(low, high) + rng.choice((0.49, 0.95, 0.99))
        # The type's own nouns outweigh the one attribute in the title, so that another
        # type sharing the attribute is not taken for this one (WebShop's r_type counts
        # title words).
        title = f"{brand} {attrs[0].title()} {ptype.title()} {nouns}"
        products.append(
            {
                "asin": asin,
                "name": title,
                "category": category,
                "query": ptype,
                "product_category": f"{top} › {sub} › {ptype.title()}",
                "full_description": (
                    f"The {brand} {ptype} is {attrs[0]}, {attrs[1]} and {attrs[2]}. "
                    f"Made for everyday use."
                ),
                "small_description": [f"{a.capitalize()}" for a in attrs[1:]],
                "pricing": f"${price:.2f}",
                "customization_options": {
                    n: [{"value": v, "image": None} for v in vs] for n, vs in options.items()
                },
                "images": [f"https://example.invalid/{asin}.jpg"],
                "brand": brand,
            }
        )
        a, b = rng.sample(attrs, 2)
        attributes[asin] = {
            "attributes": attrs,
            "instruction": rng.choice(_INSTRUCTIONS).format(a=a, b=b, t=ptype),
            "instruction_attributes": [a, b],
        }
        if i % 10 == 0:
            name, values = next(iter(options.items()))
            v = rng.choice(values)
            human[asin] = [
                {
                    "asin": asin,
                    "instruction": rng.choice(_HUMAN).format(a=a, b=b, t=ptype, v=v) + ".",
                    "attributes": attrs,
                    "options": [f"{name}: {v}"],
                    "instruction_attributes": [a],
                    "instruction_options": [v],
                    "assignment_id": f"lite{i:05d}",
                    "worker_id": f"lite{seed}",
                }
            ]
    return products, attributes, human


def write_catalog(folder: Path, seed: int, n_products: int) -> None:
    """Write the three catalog files of :func:`generate_catalog` into ``folder``."""
    products, attributes, human = generate_catalog(seed, n_products)
    folder.mkdir(parents=True, exist_ok=True)
    write_json_atomic(folder / PRODUCTS_FILE, products)
    write_json_atomic(folder / ATTRIBUTES_FILE, attributes)
    write_json_atomic(folder / HUMAN_FILE, human)


def vocabulary() -> list[str]:
    """Every word the generated catalog and instructions can hold (for a tokenizer's
    training corpus)."""
    words: set[str] = set()
    for top, types, pool, schema in _CATEGORIES.values():
        named = [text for sub, _, nouns in types.values() for text in (sub, nouns)]
        for text in [top, *types, *named, *pool]:
            words.update(text.lower().split())
        for name, values in schema.items():
            words.add(name)
            for v in values:
                words.update(v.split())
    for text in _BRANDS + _INSTRUCTIONS + _HUMAN:
        words.update(w for w in text.split() if "{" not in w)
    return sorted(words)
