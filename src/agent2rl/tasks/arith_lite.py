"""``arith-lite`` (L1, rule-based): arithmetic word problems in GSM8K's format, CPU-sized.

Problems are generated from fixed seeds: a public train split of 5,000 items and a private
test split of 300 items, disjoint by question text. Each answer is a one-line worked step and
the final answer after ``####``, like GSM8K. Grading extracts the final number and compares
it with :func:`agent2rl.scoring.answers_match`.

The private split is reproducible from this source by design (the lite track must run
offline and identically everywhere); the sandbox keeps the harness source out of the agent's
reach.
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path
from typing import Any

from agent2rl.inference.backend import Backend
from agent2rl.tasks.base import EvalResult, PreparedTask, Task
from agent2rl.tasks.gsm8k import grade_final_answers
from agent2rl.tasks.prompt_format import PromptFormat, read_jsonl, write_jsonl

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
TRAIN_SEED = 1
TEST_SEED = 2

FORMAT = PromptFormat(
    template="Question: {question}\nAnswer:",
    chat_template="{question}\nShow the calculation, then give the final answer after '####'.",
    completion_template=" {answer}",
    stop=("\n\n", "Question:"),
    max_new_tokens=48,
)


def make_problem(rng: random.Random) -> dict[str, str]:
    """One problem: ``question`` and a GSM8K-style ``answer`` ("a + b = c\\n#### c")."""
    template, op = rng.choice(_TEMPLATES)
    if op == "*":
        a, b = rng.randint(2, 9), rng.randint(2, 9)
        c = a * b
    elif op == "-":
        a = rng.randint(10, 99)
        b = rng.randint(1, a)
        c = a - b
    else:
        a, b = rng.randint(1, 99), rng.randint(1, 99)
        c = a + b
    question = template.format(n=rng.choice(_NAMES), i=rng.choice(_ITEMS), a=a, b=b)
    return {"question": question, "answer": f"{a} {op} {b} = {c}\n#### {c}"}


def generate_split(seed: int, size: int, exclude: set[str] = frozenset()) -> list[dict[str, str]]:
    """``size`` distinct problems from ``seed`` whose questions are not in ``exclude``."""
    rng = random.Random(seed)
    seen = set(exclude)
    out: list[dict[str, str]] = []
    while len(out) < size:
        p = make_problem(rng)
        if p["question"] in seen:
            continue
        seen.add(p["question"])
        out.append({"id": f"{seed}-{len(out):05d}", **p})
    return out


class ArithLite(Task):
    name = "arith-lite"
    level = 1
    version = "1"
    summary = "Arithmetic word problems in GSM8K format (CPU-sized, offline)"
    eval_timeout_s = 300.0

    def prepare(self, root: Path) -> PreparedTask:
        public, private = root / "public", root / "private"
        if (public / "train.jsonl").exists() and (private / "test.jsonl").exists():
            return PreparedTask(public, private)
        test = generate_split(TEST_SEED, TEST_SIZE)
        train = generate_split(TRAIN_SEED, TRAIN_SIZE, exclude={p["question"] for p in test})
        write_jsonl(private / "test.jsonl", test)
        write_jsonl(public / "train.jsonl", train)
        return PreparedTask(public, private)

    def prompt_format(self, prepared: PreparedTask) -> PromptFormat:
        return FORMAT

    def eval_settings(self) -> dict[str, Any]:
        return {**super().eval_settings(), "format": FORMAT.to_dict(), "n": TEST_SIZE}

    def description(self, prepared: PreparedTask) -> str:
        sample = json.loads((prepared.public / "train.jsonl").open().readline())
        return f"""# Task: arith-lite (level 1, rule-based reward)

Improve the base model's accuracy on arithmetic word problems written in GSM8K's format.

## Data
- `data/train.jsonl`: {TRAIN_SIZE} training problems, one JSON object per line with `id`,
  `question` and `answer`. The answer shows the calculation, then the final answer after `####`.
- The held-out test set ({TEST_SIZE} problems of the same kind) is never shown to you; the
  grading service scores your submissions on it.

Example:
```json
{json.dumps(sample)}
```

## How your model is evaluated
{FORMAT.describe()}
- Score: accuracy (percent) of the final answer. The grader takes the number after the last
  `####` in the completion (or, if there is none, the last number in it) and compares it
  numerically with the reference answer.
"""

    def evaluate(
        self, backend: Backend, prepared: PreparedTask, limit: int | None = None
    ) -> EvalResult:
        started = time.time()
        rows = read_jsonl(prepared.private / "test.jsonl", limit)
        prompts = [FORMAT.prompt(backend, {"question": r["question"]}) for r in rows]
        completions = backend.generate(prompts, FORMAT.generation(backend))
        items = grade_final_answers(rows, completions)
        return EvalResult.from_items(items, seconds=time.time() - started)
