"""``arith-lite`` (L1, rule-based): arithmetic word problems in GSM8K's format, CPU-sized.

Problems are generated from fixed seeds: a public train split of 5,000 items, a private test
split of 300 items and a validation split of 300 (the harness's own, never graded or shown),
disjoint by question text. Each answer is a one-line worked step and the final answer after
``####``, like GSM8K. Grading extracts the final number and compares it with
:func:`agent2rl.scoring.answers_match`. Every split cycles through three difficulty tiers
(:data:`TIERS`), and the public split labels each row with its ``tier``: the material for a
curriculum, easy problems first.

The private split is reproducible from this source by design (the lite track must run
offline and identically everywhere); the sandbox keeps the harness source out of the agent's
reach."""

from __future__ import annotations

import random
from pathlib import Path

from agent2rl.dataset import PreparedTask
from agent2rl.files import write_jsonl
from agent2rl.scoring import FinalAnswer
from agent2rl.solvers import Generate, PromptFormat
from agent2rl.tasks.base import Task, example_block
from agent2rl.tasks.gsm8k import GSM8K_SPLITS
from agent2rl.tasks.registry import task

_NAMES = [
    "Ava",
    "Ben",
    "Chen",
    "Dara",
    "Eli",
    "Fatima",
    "Gus",
    "Hana",
    "Ivan",
    "Jade",
    "Kofi",
    "Lena",
    "Milo",
    "Nia",
    "Omar",
    "Pia",
    "Quinn",
    "Ravi",
    "Sara",
    "Tom",
]
_ITEMS = [
    "apples",
    "books",
    "coins",
    "pencils",
    "stickers",
    "marbles",
    "cards",
    "shells",
    "eggs",
    "cookies",
]

# (template, operation). Operands are drawn so every answer is a non-negative integer.
_TEMPLATES: list[tuple[str, str]] = [
    ("{n} has {a} {i}. {n} gets {b} more. How many {i} does {n} have now?", "+"),
    ("A box holds {a} {i} and another box holds {b} {i}. How many {i} are there in total?", "+"),
    ("{n} read {a} pages on Monday and {b} pages on Tuesday. How many pages did {n} read?", "+"),
    ("{n} had {a} {i} and gave {b} of them away. How many {i} does {n} have left?", "-"),
    ("There were {a} {i} on the shelf. {b} were sold. How many {i} are left?", "-"),
    ("{n} buys {a} bags with {b} {i} in each bag. How many {i} does {n} buy?", "*"),
]

TRAIN_SIZE = 5000
TEST_SIZE = 300
VALIDATION_SIZE = 300
TRAIN_SEED = 1
TEST_SEED = 2
VALIDATION_SEED = 3

#: Difficulty tiers, easiest first: what the operands of a tier's problems are. Every split
#: cycles through the tiers (item k has tier ``TIERS[k % 3]``), so the graded split holds
#: 100 problems of each and a score shows how far up the tiers a model got. Tier 3 is
#: version 1's hardest kind; the lower tiers give a small model something to learn within
#: minutes (the tiny model trained 2 minutes on the reference agent's SFT still solves few
#: tier-3 problems: benchmarks/lite_learning.py).
TIERS: dict[int, str] = {
    1: "one-digit operands (+, -)",
    2: "a two-digit and a one-digit operand (+, -), or two one-digit factors (*)",
    3: "two-digit operands (+, -)",
}

FORMAT = PromptFormat(
    template="Question: {question}\nAnswer:",
    chat_template="{question}\nShow the calculation, then give the final answer after '####'.",
    completion_template=" {answer}",
    stop=("\n\n", "Question:"),
    max_new_tokens=48,
)


def _operands(rng: random.Random, tier: int, op: str) -> tuple[int, int]:
    """Operands ``(a, b)`` of ``tier`` for ``op``; every answer is a non-negative integer."""
    if op == "*":  # only tier 2 multiplies
        return rng.randint(2, 9), rng.randint(2, 9)
    if tier == 1:
        if op == "-":
            a = rng.randint(2, 9)
            return a, rng.randint(1, a)
        return rng.randint(1, 9), rng.randint(1, 9)
    if tier == 2:
        a, b = rng.randint(10, 99), rng.randint(1, 9)
        return (a, b) if op == "-" or rng.random() < 0.5 else (b, a)
    a = rng.randint(10, 99)
    return a, rng.randint(10, a) if op == "-" else rng.randint(10, 99)


def make_problem(rng: random.Random, tier: int = 3) -> dict[str, str | int]:
    """One problem of ``tier`` (see :data:`TIERS`): ``question``, a GSM8K-style ``answer``
    ("a + b = c\\n#### c") and its ``tier``. Raises ``KeyError`` for an unknown tier."""
    TIERS[tier]  # noqa: B018 - fail early on an unknown tier
    templates = [t for t in _TEMPLATES if tier == 2 or t[1] != "*"]
    template, op = rng.choice(templates)
    a, b = _operands(rng, tier, op)
    c = a * b if op == "*" else a - b if op == "-" else a + b
    question = template.format(n=rng.choice(_NAMES), i=rng.choice(_ITEMS), a=a, b=b)
    return {"question": question, "answer": f"{a} {op} {b} = {c}\n#### {c}", "tier": tier}


def generate_split(
    seed: int, size: int, exclude: set[str] = frozenset()
) -> list[dict[str, str | int]]:
    """``size`` distinct problems from ``seed`` whose questions are not in ``exclude``, the
    tiers in turn (item ``k`` has tier ``k % 3 + 1``): each row has ``id``, ``question``,
    ``answer`` and ``tier``. Deterministic; ``size`` 0 gives an empty list."""
    rng = random.Random(seed)
    seen = set(exclude)
    tiers = sorted(TIERS)
    out: list[dict[str, str | int]] = []
    while len(out) < size:
        p = make_problem(rng, tiers[len(out) % len(tiers)])
        if p["question"] in seen:
            continue
        seen.add(p["question"])
        out.append({"id": f"{seed}-{len(out):05d}", **p})
    return out


def generate_splits() -> tuple[list[dict[str, str | int]], ...]:
    """The task's (train, test, validation) splits: test first, validation without test's
    questions, train without either's (what a trainer may see holds no graded question)."""
    test = generate_split(TEST_SEED, TEST_SIZE)
    val = generate_split(VALIDATION_SEED, VALIDATION_SIZE, exclude={p["question"] for p in test})
    train = generate_split(TRAIN_SEED, TRAIN_SIZE, exclude={p["question"] for p in test + val})
    return train, test, val


@task
class ArithLite(Task):
    name = "arith-lite"
    level = 1
    version = "2"
    summary = (
        "Arithmetic word problems in GSM8K format, three difficulty tiers (CPU-sized, offline)"
    )
    eval_timeout_s = 300.0
    splits = GSM8K_SPLITS

    def prepare(self, root: Path) -> PreparedTask:
        prepared = PreparedTask(root / "public", root / "private", root / "validation")
        files = [prepared.split(s) / f for s, f in GSM8K_SPLITS.files.items()]  # train, test, val
        if not all(f.exists() for f in files):
            for path, rows in zip(files, generate_splits(), strict=True):
                write_jsonl(path, rows)
        return prepared

    def prompt_format(self, prepared: PreparedTask) -> PromptFormat:
        return FORMAT

    def solver(self, prepared: PreparedTask, split: str = "private") -> Generate:
        return Generate(FORMAT)

    def scorer(self, prepared: PreparedTask) -> FinalAnswer:
        return FinalAnswer()

    def description(self, prepared: PreparedTask) -> str:
        tiers = "\n".join(f"  - tier {k}: {what}" for k, what in TIERS.items())
        return f"""# Task: arith-lite (level 1, rule-based reward)

Improve the base model's accuracy on arithmetic word problems written in GSM8K's format.

## Data
- `data/train.jsonl`: {TRAIN_SIZE} training problems, one JSON object per line with `id`,
  `question`, `answer` and `tier`. The answer shows the calculation, then the final answer
  after `####`.
- Three difficulty tiers, in equal shares in every split (item k has tier k % 3 + 1):
{tiers}
- The held-out test set ({TEST_SIZE} problems of the same kinds, {TEST_SIZE // 3} per tier) is
  never shown to you; the grading service scores your submissions on it.

{example_block(prepared.public / "train.jsonl")}

## How your model is evaluated
{FORMAT.describe()}
- Score: accuracy (percent) of the final answer. The grader takes the number after the last
  `####` in the completion (or, if there is none, the last number in it) and compares it
  numerically with the reference answer.
"""
