"""``gsm8k`` (L1, rule-based): grade-school math word problems, the paper's GSM8K setting.

Data: ``openai/gsm8k`` (config ``main``). The 7,473 train items are the public split, the 1,319
test items the private split. With network the task downloads them through ``datasets`` on
first use; on an air-gapped machine ``agent2rl data import gsm8k PATH`` converts the official
files (the hub's parquet files, or the ``train.jsonl``/``test.jsonl`` of OpenAI's
grade-school-math repository) into the task store.

Prompting: models with a chat template get one zero-shot user message; base models get a
fixed few-shot prompt built from the first ``num_fewshot`` train items. Both are stated in
``description.md`` and ``data/eval_format.json``. Grading extracts the final answer (after
``####``, else the last number) and compares it with :func:`agent2rl.scoring.answers_match`.
"""

from __future__ import annotations

import json
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from agent2rl.errors import UserError
from agent2rl.inference.backend import Backend
from agent2rl.rundir import swap_in_dir, write_json_atomic
from agent2rl.scoring import answers_match, extract_final_answer
from agent2rl.tasks.base import EvalResult, ItemResult, PreparedTask, Task
from agent2rl.tasks.prompt_format import PromptFormat, read_jsonl, write_jsonl

HUB_ID, HUB_CONFIG = "openai/gsm8k", "main"
#: the official sizes; an import of other sizes is allowed (a subset) and says so
OFFICIAL_SIZES = {"train": 7473, "test": 1319}
_SUFFIXES = (".parquet", ".jsonl")

CHAT_TEMPLATE = (
    "Solve the following math problem step by step. At the end, write the final answer "
    "as a number after '####'.\n\n{question}"
)


def gold_answer(answer: str) -> str:
    """The number after the last ``####`` of a GSM8K answer, without thousands separators."""
    return answer.rsplit("####", 1)[1].strip().replace(",", "")


def grade_final_answers(rows: list[dict[str, Any]], completions: list[str]) -> list[ItemResult]:
    """One ItemResult per GSM8K-format row (``id``, ``answer``) and its completion: correct
    when the completion's final answer (see :func:`extract_final_answer`) matches the number
    after ``####``. Used by every task in GSM8K's format."""
    items = []
    for row, completion in zip(rows, completions, strict=True):
        gold = gold_answer(row["answer"])
        ok = answers_match(gold, extract_final_answer(completion))
        items.append(
            ItemResult(
                id=row["id"], prediction=completion, target=gold, correct=ok, score=float(ok)
            )
        )
    return items


def convert_rows(rows: list[dict[str, Any]], split: str) -> list[dict[str, str]]:
    """Rows of the raw schema (``question``, ``answer``) -> ours (``id``, ``question``,
    ``answer``). Ids are ``<split>-<index>`` in file order.

    Raises :class:`UserError` naming the first row that lacks a field or a ``####`` answer.
    """
    out = []
    for i, row in enumerate(rows):
        q, a = row.get("question"), row.get("answer")
        if not isinstance(q, str) or not isinstance(a, str) or "####" not in a:
            raise UserError(
                f"GSM8K {split} row {i} is not in the official schema (a 'question' and an "
                f"'answer' ending in '#### <number>'): {json.dumps(row)[:200]}"
            )
        out.append({"id": f"{split}-{i:04d}", "question": q, "answer": a})
    return out


def find_split_files(source: Path) -> dict[str, list[Path]]:
    """The train and test files under ``source`` (a directory, searched recursively).

    A file belongs to a split when its name starts with the split's name (``train.jsonl``,
    ``train-00000-of-00001.parquet``). Files under a ``socratic`` directory (the other
    config) are ignored. Raises :class:`UserError` when a split is missing or ambiguous.
    """
    source = source.expanduser()
    if not source.is_dir():
        raise UserError(
            f"{source} is not a directory: pass the folder holding GSM8K's train and test "
            "files (parquet or jsonl)"
        )
    found: dict[str, list[Path]] = {"train": [], "test": []}
    for path in sorted(source.rglob("*")):
        if not path.is_file() or path.suffix not in _SUFFIXES:
            continue
        if "socratic" in (p.lower() for p in path.relative_to(source).parts):
            continue
        for split in found:
            if path.name.lower().startswith(split):
                found[split].append(path)
    for split, files in found.items():
        if not files:
            raise UserError(
                f"no GSM8K {split} file under {source}: expected e.g. {split}.jsonl or "
                f"main/{split}-00000-of-00001.parquet"
            )
        if len({f.suffix for f in files}) > 1:
            raise UserError(f"GSM8K {split} files of mixed formats under {source}: keep one")
    return found


def load_files(files: list[Path]) -> list[dict[str, Any]]:
    """Rows of parquet (read with pyarrow) or JSON-lines files, in file order.

    Read directly rather than through ``datasets`` so an import writes nothing outside the
    task store (no dataset cache). A corrupt file raises :class:`UserError` naming it.
    """
    rows: list[dict[str, Any]] = []
    for path in files:
        try:
            if path.suffix == ".parquet":
                import pyarrow.parquet as pq

                rows += pq.read_table(path).to_pylist()
            else:
                with open(path, encoding="utf-8") as fh:
                    rows += [json.loads(line) for line in fh if line.strip()]
        except Exception as err:  # pyarrow and json raise many kinds for a corrupt file
            raise UserError(f"could not read {path}: {type(err).__name__}: {err}") from None
    return rows


def download() -> dict[str, list[dict[str, Any]]]:
    """Both splits from the hub via ``datasets``; :class:`UserError` when it is unreachable."""
    from datasets import load_dataset

    try:
        ds = load_dataset(HUB_ID, HUB_CONFIG)
    except Exception as err:
        raise UserError(
            f"GSM8K is not in the task store and {HUB_ID} could not be downloaded "
            f"({type(err).__name__}). On a machine without network, fetch its '{HUB_CONFIG}' "
            "train and test files (parquet) and run: agent2rl data import gsm8k DIR"
        ) from None
    return {split: [dict(r) for r in ds[split]] for split in OFFICIAL_SIZES}


def write_splits(root: Path, raw: dict[str, list[dict[str, Any]]], source: str) -> str:
    """Convert and write both splits under ``root`` (replacing any earlier data atomically:
    the new tree is built next to it and swapped in). Returns a summary line."""
    train, test = convert_rows(raw["train"], "train"), convert_rows(raw["test"], "test")
    overlap = {r["question"] for r in train} & {r["question"] for r in test}
    root.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{root.name}.", dir=root.parent))
    write_jsonl(tmp / "public" / "train.jsonl", train)
    write_jsonl(tmp / "private" / "test.jsonl", test)
    manifest = {
        "source": source,
        "train": len(train),
        "test": len(test),
        "official_sizes": [len(train), len(test)] == list(OFFICIAL_SIZES.values()),
        "train_test_overlap": len(overlap),
    }
    write_json_atomic(tmp / "manifest.json", manifest)
    swap_in_dir(tmp, root)
    note = "" if manifest["official_sizes"] else " (not the official 7473/1319: a subset?)"
    return f"gsm8k: {len(train)} train / {len(test)} test items from {source}{note}"


class Gsm8k(Task):
    name = "gsm8k"
    level = 1
    version = "1"
    summary = "GSM8K grade-school math (7,473 train / 1,319 graded), final-answer accuracy"
    eval_timeout_s = 3 * 3600.0
    options = {"max_new_tokens": 512, "num_fewshot": 5, "batch_size": 64}

    def prepare(self, root: Path) -> PreparedTask:
        public, private = root / "public", root / "private"
        if not ((public / "train.jsonl").exists() and (private / "test.jsonl").exists()):
            write_splits(root, download(), f"{HUB_ID} ({HUB_CONFIG}) via datasets")
        return PreparedTask(public, private)

    def import_data(self, source: Path, root: Path) -> str:
        files = find_split_files(source)
        raw = {split: load_files(paths) for split, paths in files.items()}
        return write_splits(root, raw, str(source.expanduser().resolve()))

    def prompt_format(self, prepared: PreparedTask) -> PromptFormat:
        shots = []
        with open(prepared.public / "train.jsonl") as fh:
            for line in fh:
                if len(shots) >= self.opts["num_fewshot"]:
                    break
                row = json.loads(line)
                shots.append(f"Question: {row['question']}\nAnswer: {row['answer']}\n\n")
        # Braces in the exemplars are literal text, not format fields.
        prefix = "".join(shots).replace("{", "{{").replace("}", "}}")
        return PromptFormat(
            template=prefix + "Question: {question}\nAnswer:",
            chat_template=CHAT_TEMPLATE,
            completion_template=" {answer}",
            stop=("\n\n", "Question:"),
            chat_stop=(),
            max_new_tokens=self.opts["max_new_tokens"],
        )

    def eval_settings(self) -> dict[str, Any]:
        return {**super().eval_settings(), "template": CHAT_TEMPLATE}

    def description(self, prepared: PreparedTask) -> str:
        manifest = json.loads((prepared.public.parent / "manifest.json").read_text())
        sample = json.loads((prepared.public / "train.jsonl").open().readline())
        fmt = self.prompt_format(prepared)
        k = self.opts["num_fewshot"]
        return f"""# Task: gsm8k (level 1, rule-based reward)

Improve the base model's accuracy on GSM8K, grade-school math word problems that need a few
steps of reasoning.

## Data
- `data/train.jsonl`: {manifest["train"]} training problems, one JSON object per line with `id`,
  `question` and `answer`. The answer is a worked solution (with `<<a*b=c>>` calculator notes)
  whose last line is the final answer after `####`.
- The held-out test set ({manifest["test"]} problems) is never shown to you; the grading
  service scores your submissions on it.

Example:
```json
{json.dumps(sample)}
```

## How your model is evaluated
{fmt.describe()}
- For base models the prompt starts with {k} fixed worked examples: the first {k} items of
  `data/train.jsonl`, each as `Question: ...\\nAnswer: <answer>` followed by a blank line.
- Score: accuracy (percent) of the final answer. The grader takes the number after the last
  `####` in the completion (or, if there is none, the last number in it) and checks that it
  equals the reference answer (numerically, via math-verify).
"""

    def evaluate(
        self, backend: Backend, prepared: PreparedTask, limit: int | None = None
    ) -> EvalResult:
        started = time.time()
        rows = read_jsonl(prepared.private / "test.jsonl", limit)
        fmt = self.prompt_format(prepared)
        prompts = [fmt.prompt(backend, {"question": r["question"]}) for r in rows]
        settings = replace(fmt.generation(backend), batch_size=self.opts["batch_size"])
        completions = backend.generate(prompts, settings)
        items = grade_final_answers(rows, completions)
        return EvalResult.from_items(items, seconds=time.time() - started)
