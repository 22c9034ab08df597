"""deepsearch-lite's generator: an encyclopedia of fictional entities with linked facts, and
multi-hop questions over it, deterministic from a seed.

The world is a set of *regions*. A region has two rivers, five towns (each on one of the
rivers, with its founding year), three societies (each founded by one of the region's people
in one of its towns, in a year, with three or four members) and thirteen people (each born in
one of its towns, with a trade; some founded a society, most belong to one). Names are
made of invented syllables, so no pretrained model knows a fact; a person's name is one word
of two syllables (version 2; version 1's two-word names took about twice as many tokens,
which the tiny model, whose tokenizer spells such names a letter or two a token, copies
from a search result less often: see the README's *Figures*). Every entity is one page
of the corpus (``id``, ``title``, ``text``, ``region``); every fact is one sentence, which a
query naming the page and the relation finds (see :mod:`.search`).

Every question takes two searches: the first finds the bridge entity, the second the
answer. Five templates (the question's ``category``, in :func:`_questions`): three single
answers (``founder-birthplace``, ``birthplace-river`` for six people a region,
``society-town-year``) and two sets (``founded-members``, ``river-towns``).

A question row: ``game_id``, ``question``, ``answer`` (a set answer's items joined by
``", "``), ``answer_type`` (``single`` / ``set``), ``category``, ``region`` and ``plan`` (the
expert's two queries, each with the text its results must show). Questions of a region only
use facts of that region, so splitting by region keeps the facts behind graded questions
out of every public question and walkthrough.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

#: changes whenever the generated world or questions change (part of the store's path)
GENERATOR_VERSION = "2"

_ONSETS = ["b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "br", "dr",
           "gr", "kr", "tr", "th", "sk", "st", "vr", "qu"]  # fmt: skip
_VOWELS = ["a", "e", "i", "o", "u", "ae", "ei", "ou", "y"]
_CODAS = ["", "", "n", "r", "l", "s", "m", "th", "rk", "nd", "x"]
_TOWN_ENDS = ["wick", "mere", "holt", "stead", "ford", "by", "thorpe", "moor"]
_TRADES = ["glassblower", "cartographer", "clockmaker", "weaver", "stonemason", "brewer",
           "bookbinder", "luthier", "tanner", "dyer", "chandler", "cooper"]  # fmt: skip
_ADJECTIVES = ["Amber", "Silver", "Copper", "Crimson", "Ivory", "Cobalt", "Saffron",
               "Jade", "Ashen", "Golden", "Umber", "Scarlet", "Pewter", "Indigo"]  # fmt: skip
_NOUNS = ["Loom", "Lantern", "Anvil", "Compass", "Quill", "Kiln", "Spindle", "Chisel",
          "Bellows", "Lens", "Harp", "Kettle", "Ledger", "Oar"]  # fmt: skip
_KINDS = ["Society", "Guild", "Circle", "Fellowship"]
_CRAFTS = ["instrument makers", "mapmakers", "glassworkers", "weavers", "printers",
           "metalworkers", "brewers", "potters"]  # fmt: skip
_BAD_WORDS = {"a", "an", "the", "and", "or", "of", "in", "on", "to", "is"}

PEOPLE_PER_REGION = 13
TOWNS_PER_REGION = 5
RIVERS_PER_REGION = 2
SOCIETIES_PER_REGION = 3
#: birthplace-river questions per region (about the region's first people)
RIVER_QUESTIONS_PER_REGION = 6


@dataclass
class World:
    """The corpus (one page per entity) and every question, in generation order."""

    documents: list[dict[str, Any]]
    questions: list[dict[str, Any]]


class _Names:
    """Unique invented names (never one of the words the answer normalisation drops)."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.used: set[str] = set()

    def word(self, syllables: int) -> str:
        while True:
            w = "".join(
                self.rng.choice(_ONSETS) + self.rng.choice(_VOWELS) + self.rng.choice(_CODAS)
                for _ in range(syllables)
            )
            if 3 <= len(w) <= 9 and w not in _BAD_WORDS:
                return w.capitalize()

    def fresh(self, make: Any) -> str:
        while True:
            name = make()
            if name.lower() not in self.used:
                self.used.add(name.lower())
                return name


def _join(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def generate_world(seed: int, n_regions: int) -> World:
    """The world and questions of the module docstring (``n_regions`` regions), the same for
    the same arguments."""
    rng = random.Random(f"deepsearch-lite:{seed}")
    names = _Names(rng)
    docs: list[dict[str, Any]] = []
    questions: list[dict[str, Any]] = []
    for r in range(n_regions):
        region = names.fresh(lambda: names.word(2)) + " Vale"
        rivers = [names.fresh(lambda: names.word(1)) + " River" for _ in range(RIVERS_PER_REGION)]
        towns = [
            {
                "name": names.fresh(lambda: names.word(1) + rng.choice(_TOWN_ENDS)),
                "river": rivers[i % RIVERS_PER_REGION],
                "year": rng.randint(1100, 1750),
            }
            for i in range(TOWNS_PER_REGION)
        ]
        people = [
            {
                "name": names.fresh(lambda: names.word(2)),
                "town": rng.choice(towns)["name"],
                "year": rng.randint(1760, 1890),
                "trade": rng.choice(_TRADES),
                "society": None,
                "founded": None,
            }
            for _ in range(PEOPLE_PER_REGION)
        ]
        societies = []
        order = list(range(PEOPLE_PER_REGION))
        rng.shuffle(order)
        founders = order[:SOCIETIES_PER_REGION]
        rest = order[SOCIETIES_PER_REGION:]
        for s, f in enumerate(founders):
            name = names.fresh(
                lambda: f"{rng.choice(_ADJECTIVES)} {rng.choice(_NOUNS)} {rng.choice(_KINDS)}"
            )
            town = rng.choice(towns)["name"]
            n_members = 3 if s < SOCIETIES_PER_REGION - 1 else len(rest) - 3 * s
            members = [people[i]["name"] for i in rest[3 * s : 3 * s + n_members]]
            for i in rest[3 * s : 3 * s + n_members]:
                people[i]["society"] = name
            people[f]["founded"] = name
            societies.append(
                {"name": name, "founder": people[f]["name"], "town": town, "members": members,
                 "year": rng.randint(1790, 1910), "craft": rng.choice(_CRAFTS)}
            )  # fmt: skip
        rid = f"r{r:02d}"
        for p in people:
            name = p["name"]
            text = f"{name} was a {p['trade']} born in {p['town']} in {p['year']}."
            if p["society"]:
                text += f" {name} was a member of the {p['society']}."
            if p["founded"]:
                s = next(x for x in societies if x["name"] == p["founded"])
                text += f" {name} founded the {p['founded']} in {s['year']}."
            docs.append({"title": p["name"], "text": text, "kind": "person", "region": rid})
        for t in towns:
            docs.append(
                {"title": t["name"],
                 "text": f"{t['name']} is a town in {region}. It was established in "
                         f"{t['year']}. The town lies on the {t['river']}.",
                 "kind": "town", "region": rid}
            )  # fmt: skip
        for river in rivers:
            on = [x["name"] for x in towns if x["river"] == river]
            docs.append(
                {"title": river,
                 "text": f"The {river} flows through {_join(on)}. It rises in the hills of "
                         f"{region}.",
                 "kind": "river", "region": rid}
            )  # fmt: skip
        for s in societies:
            docs.append(
                {"title": s["name"],
                 "text": f"The {s['name']} is a society of {s['craft']}. It was founded by "
                         f"{s['founder']} in {s['town']} in {s['year']}. Its members include "
                         f"{_join(s['members'])}.",
                 "kind": "society", "region": rid}
            )  # fmt: skip
        questions += _questions(rid, people, towns, societies)
    docs = [{"id": f"d{i:05d}", **d} for i, d in enumerate(docs)]
    return World(docs, questions)


def _questions(
    rid: str, people: list[dict[str, Any]], towns: list[dict[str, Any]], societies: list[dict]
) -> list[dict[str, Any]]:
    by_person = {p["name"]: p for p in people}
    by_town = {t["name"]: t for t in towns}
    out: list[dict[str, Any]] = []

    def add(category: str, question: str, answer: list[str] | str, plan: list[list[str]]):
        kind = "set" if isinstance(answer, list) else "single"
        out.append(
            {"question": question, "answer": ", ".join(answer) if kind == "set" else answer,
             "answer_type": kind, "category": category, "region": rid, "plan": plan}
        )  # fmt: skip

    for s in societies:
        founder = by_person[s["founder"]]
        add(
            "founder-birthplace",
            f"In which town was the founder of the {s['name']} born?",
            founder["town"],
            [[f"{s['name']} founded", s["founder"]], [f"{s['founder']} born", founder["town"]]],
        )
        add(
            "society-town-year",
            f"In what year was the town where the {s['name']} was founded established?",
            str(by_town[s["town"]]["year"]),
            [[f"{s['name']} founded", s["town"]],
             [f"{s['town']} established", str(by_town[s["town"]]["year"])]],
        )  # fmt: skip
        add(
            "founded-members",
            f"Name all members of the society that {s['founder']} founded.",
            list(s["members"]),
            [[f"{s['founder']} founded", s["name"]], [f"{s['name']} members", s["members"][-1]]],
        )
    for p in people[:RIVER_QUESTIONS_PER_REGION]:
        river = by_town[p["town"]]["river"]
        add(
            "birthplace-river",
            f"On which river lies the town where {p['name']} was born?",
            river,
            [[f"{p['name']} born", p["town"]], [f"{p['town']} river", river]],
        )
    for t in towns:
        on = [x["name"] for x in towns if x["river"] == t["river"]]
        add(
            "river-towns",
            f"Which towns lie on the river that flows through {t['name']}?",
            on,
            [[f"{t['name']} river", t["river"]], [f"{t['river']} flows", on[-1]]],
        )
    return out
