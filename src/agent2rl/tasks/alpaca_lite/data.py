"""The item generator of ``alpaca-lite``: simple instructions, good answers, weak references.

Every item is drawn from small fact tables (capitals, opposites, plurals, animal sounds and
foods, colours, categories, sums) and asked in one of several phrasings per kind, each at
least six words long: the leak scanner and the contamination check find a private item by
its word 6-grams, so a shorter instruction could never be traced. A row
holds the ``instruction``, a ``good`` answer (one complete, correct sentence: what the
public split trains on) and a ``weak`` answer (a hedge, a non-answer or a bare fragment:
what the graded and validation splits hold as the reference). The weak references are
deliberately beatable: a policy that learns to answer in complete sentences from the public
pairs wins against them, while a model that emits noise loses.

Splits are disjoint by instruction text (the judge's cache and position swap key on it).
Everything is a pure function of the seed, so the data is the same on every machine."""

from __future__ import annotations

import random
from collections.abc import Callable

_CAPITALS = {
    "France": "Paris",
    "Italy": "Rome",
    "Spain": "Madrid",
    "Germany": "Berlin",
    "Japan": "Tokyo",
    "Egypt": "Cairo",
    "Canada": "Ottawa",
    "Peru": "Lima",
    "Kenya": "Nairobi",
    "Norway": "Oslo",
    "Greece": "Athens",
    "Russia": "Moscow",
    "China": "Beijing",
    "India": "New Delhi",
    "Ireland": "Dublin",
    "Portugal": "Lisbon",
    "Austria": "Vienna",
    "Sweden": "Stockholm",
    "Poland": "Warsaw",
    "Chile": "Santiago",
    "Cuba": "Havana",
    "Thailand": "Bangkok",
    "Finland": "Helsinki",
    "Hungary": "Budapest",
}
_OPPOSITES = {
    "hot": "cold",
    "big": "small",
    "fast": "slow",
    "happy": "sad",
    "light": "dark",
    "tall": "short",
    "old": "young",
    "hard": "soft",
    "full": "empty",
    "early": "late",
    "open": "closed",
    "rich": "poor",
    "wet": "dry",
    "loud": "quiet",
    "strong": "weak",
    "up": "down",
    "day": "night",
    "clean": "dirty",
    "thick": "thin",
    "high": "low",
    "near": "far",
    "heavy": "light",
    "begin": "end",
    "win": "lose",
}
_PLURALS = {
    "cat": "cats",
    "dog": "dogs",
    "box": "boxes",
    "child": "children",
    "mouse": "mice",
    "foot": "feet",
    "tooth": "teeth",
    "man": "men",
    "woman": "women",
    "city": "cities",
    "leaf": "leaves",
    "knife": "knives",
    "bus": "buses",
    "baby": "babies",
    "goose": "geese",
    "sheep": "sheep",
    "fish": "fish",
    "person": "people",
    "wolf": "wolves",
    "berry": "berries",
    "glass": "glasses",
    "church": "churches",
}
#: animal -> (sound verb, what it eats)
_ANIMALS = {
    "dog": ("barks", "meat and dog food"),
    "cat": ("meows", "fish and meat"),
    "cow": ("moos", "grass"),
    "sheep": ("baas", "grass"),
    "duck": ("quacks", "seeds and small insects"),
    "lion": ("roars", "meat"),
    "horse": ("neighs", "hay and grass"),
    "pig": ("oinks", "almost anything"),
    "owl": ("hoots", "mice and insects"),
    "frog": ("croaks", "insects"),
    "bee": ("buzzes", "nectar"),
    "snake": ("hisses", "mice and eggs"),
    "goat": ("bleats", "grass and leaves"),
    "rabbit": ("squeaks", "carrots and grass"),
    "monkey": ("chatters", "fruit and leaves"),
    "panda": ("bleats", "bamboo"),
}
_COLOURS = {
    "grass": "green",
    "snow": "white",
    "the sky on a clear day": "blue",
    "a ripe banana": "yellow",
    "coal": "black",
    "a ripe tomato": "red",
    "an orange": "orange",
    "milk": "white",
    "a lemon": "yellow",
    "blood": "red",
    "the sea": "blue",
    "chocolate": "brown",
    "a carrot": "orange",
    "a frog": "green",
    "a crow": "black",
    "a strawberry": "red",
}
_CATEGORIES = {
    "fruits": ["apples", "bananas", "cherries", "grapes", "pears", "plums", "mangoes"],
    "colours": ["red", "blue", "green", "yellow", "purple", "orange", "pink"],
    "animals": ["dogs", "cats", "horses", "lions", "rabbits", "bears", "goats"],
    "vegetables": ["carrots", "peas", "onions", "beans", "potatoes", "leeks", "cabbages"],
    "sports": ["football", "tennis", "golf", "rugby", "hockey", "cricket", "boxing"],
    "musical instruments": ["the piano", "the guitar", "the violin", "the drum", "the flute"],
    "planets": ["Mars", "Venus", "Earth", "Jupiter", "Saturn", "Mercury", "Neptune"],
    "tools": ["a hammer", "a saw", "a drill", "a wrench", "a screwdriver", "pliers"],
    "drinks": ["water", "milk", "tea", "coffee", "juice", "lemonade"],
    "birds": ["robins", "eagles", "owls", "crows", "ducks", "parrots", "swans"],
}

#: phrasings per kind: (instruction template, good answer template)
_PHRASINGS: dict[str, list[tuple[str, str]]] = {
    "capital": [
        ("What is the capital of {x}?", "The capital of {x} is {y}."),
        ("Which city is the capital of {x}?", "{y} is the capital of {x}."),
        ("Please name the capital city of {x}.", "The capital city of {x} is {y}."),
        ("Can you tell me the capital of {x}?", "The capital of {x} is {y}."),
    ],
    "opposite": [
        ("What is the opposite of {x}?", "The opposite of {x} is {y}."),
        ("Give a word that means the opposite of {x}.", "The opposite of {x} is {y}."),
        ("What is an antonym of {x}?", "An antonym of {x} is {y}."),
    ],
    "plural": [
        ("What is the plural of {x}?", "The plural of {x} is {y}."),
        ("Write the plural form of the word {x}.", "The plural form of {x} is {y}."),
        ("How do you say more than one {x}?", "More than one {x} are called {y}."),
    ],
    "sound": [
        ("What sound does a {x} usually make?", "A {x} {y}."),
        ("What noise does a {x} make when it calls?", "A {x} {y}."),
    ],
    "food": [
        ("What kind of food does a {x} eat?", "A {x} eats {y}."),
        ("What is the usual food of a {x}?", "A {x} mostly eats {y}."),
    ],
    "colour": [
        ("Can you tell me what colour {x} is?", "{X} is {y}."),
        ("Please tell me the colour of {x}.", "The colour of {x} is {y}."),
    ],
    "list": [
        ("Please name three different kinds of {x}.", "Three {x} are {a}, {b} and {c}."),
        ("Can you list three examples of {x}?", "Here are three {x}: {a}, {b} and {c}."),
        ("Give me three examples of {x}, please.", "Three examples of {x} are {a}, {b} and {c}."),
    ],
    "sum": [
        ("What number do you get from {a} plus {b}?", "{a} plus {b} is {c}."),
        ("Please add the two numbers {a} and {b}.", "{a} and {b} add up to {c}."),
        ("What do you get when you add {a} to {b}?", "When you add {a} to {b} you get {c}."),
    ],
}

#: weak references: a hedge, a non-answer, or a fragment ({z}: a related but wrong word)
_WEAK = [
    "I am not sure.",
    "I do not know.",
    "That is a good question.",
    "Maybe {z}?",
    "Hmm, {z}.",
    "It depends.",
    "I cannot answer that.",
    "Let me think about it.",
    "Something like {z}, I guess.",
    "No idea, sorry.",
]

KINDS = tuple(_PHRASINGS)
#: draws in a row that may hit a used instruction before a split is declared impossible (the
#: smallest kind has 30 instructions: 5,000 misses in a row mean it is used up)
_MAX_MISSES = 5000


def _fact(kind: str, rng: random.Random) -> tuple[dict[str, str], str]:
    """Fields for one fact of ``kind`` and a wrong-but-related word for a weak reference."""
    pick: Callable[[dict], str] = lambda table: rng.choice(sorted(table))  # noqa: E731
    if kind == "capital":
        x = pick(_CAPITALS)
        z = _CAPITALS[pick({k: v for k, v in _CAPITALS.items() if k != x})]
        return {"x": x, "y": _CAPITALS[x]}, z
    if kind == "opposite":
        x = pick(_OPPOSITES)
        return {"x": x, "y": _OPPOSITES[x]}, x
    if kind == "plural":
        x = pick(_PLURALS)
        return {"x": x, "y": _PLURALS[x]}, x + "s" if _PLURALS[x] != x + "s" else x
    if kind in ("sound", "food"):
        x = pick(_ANIMALS)
        other = _ANIMALS[pick({k: v for k, v in _ANIMALS.items() if k != x})]
        col = 0 if kind == "sound" else 1  # _ANIMALS: (sound verb, food)
        return {"x": x, "y": _ANIMALS[x][col]}, other[col]
    if kind == "colour":
        x = pick(_COLOURS)
        z = rng.choice(sorted({c for c in _COLOURS.values() if c != _COLOURS[x]}))
        return {"x": x, "X": x[0].upper() + x[1:], "y": _COLOURS[x]}, z
    if kind == "list":
        x = pick(_CATEGORIES)
        a, b, c = rng.sample(_CATEGORIES[x], 3)
        return {"x": x, "a": a, "b": b, "c": c}, a
    if kind == "sum":
        a, b = rng.randint(1, 20), rng.randint(1, 20)
        return {"a": str(a), "b": str(b), "c": str(a + b)}, str(a + b + rng.choice([-2, -1, 1, 2]))
    raise KeyError(kind)


def make_item(rng: random.Random, kind: str) -> dict[str, str]:
    """One item of ``kind``: ``kind``, ``instruction``, ``good`` (a complete correct
    sentence) and ``weak`` (a hedge or a fragment). Raises ``KeyError`` for an unknown
    kind."""
    fields, wrong = _fact(kind, rng)
    instruction, good = rng.choice(_PHRASINGS[kind])
    weak = rng.choice(_WEAK).format(z=wrong)
    return {
        "kind": kind,
        "instruction": instruction.format(**fields),
        "good": good.format(**fields),
        "weak": weak,
    }


def generate_items(
    seed: int, size: int, exclude: frozenset[str] | set[str] = frozenset(), *, distinct: bool = True
) -> list[dict[str, str]]:
    """``size`` items whose instructions are not in ``exclude``, the kinds in turn (item
    ``k`` is of kind ``KINDS[k % len(KINDS)]``), each with an ``id``; deterministic in
    ``seed``. ``distinct`` also keeps every instruction to one item (the graded and
    validation splits); without it an instruction may recur with another answer (the
    public split, larger than the tables' distinct instructions of some kinds). Raises
    ``ValueError`` when the tables cannot give ``size`` such items (rather than loop
    forever)."""
    rng = random.Random(seed)
    seen = set(exclude)
    out: list[dict[str, str]] = []
    misses = 0  # in a row: a kind whose instructions are used up misses every time
    while len(out) < size:
        item = make_item(rng, KINDS[len(out) % len(KINDS)])
        if item["instruction"] in seen:
            misses += 1
            if misses > _MAX_MISSES:
                raise ValueError(f"cannot draw {size} items with new instructions from seed {seed}")
            continue
        misses = 0
        if distinct:
            seen.add(item["instruction"])
        out.append({"id": f"lite-{seed}-{len(out):05d}", **item})
    return out


#: the degradations the judge's validation applies to a reference output
DEGRADATIONS = ("empty", "truncated", "shuffled")


def degrade(text: str, how: str, seed: int = 0) -> str:
    """``text`` made worse: ``empty`` (""), ``truncated`` (the first half of its words,
    rounded down but at least one; a single word loses the second half of its letters) or
    ``shuffled`` (its words in a seeded random order that differs from the original; a
    single word is spelled backwards). Raises ``ValueError`` for another ``how``."""
    words = text.split()
    if how == "empty":
        return ""
    if how == "truncated":
        if len(words) > 1:
            return " ".join(words[: len(words) // 2])
        return text[: max(1, len(text) // 2)]
    if how == "shuffled":
        if len(set(words)) < 2:
            return text[::-1]
        rng = random.Random(f"{seed}:{text}")
        order = words[:]
        while order == words:
            rng.shuffle(order)
        return " ".join(order)
    raise ValueError(f"unknown degradation {how!r}: one of {', '.join(DEGRADATIONS)}")
