"""``gsm8k`` (L1, rule-based): grade-school math word problems, the paper's GSM8K setting.

Data: ``openai/gsm8k`` (config ``main``). The 1,319 test items are the private split; of the
7,473 train items the last :data:`VALIDATION_SIZE` (200) are the harness's validation split
(never graded or shown: every task has one, so that no default is tuned on graded items) and
the first 7,273 the public split. ``--task-opt public=reference`` shows all 7,473, as the
reference does (the validation split then overlaps the agent's data:
:mod:`agent2rl.tasks.shared.public_view`). The data are downloaded through ``datasets`` on
first use, or converted by ``agent2rl data import gsm8k PATH`` from the official files (the
hub's parquet files, or the ``train.jsonl`` and ``test.jsonl`` of OpenAI's grade-school-math
repository) on an air-gapped machine.

Two evaluation protocols (the ``protocol`` option), both stated in ``description.md`` and
``data/eval_format.json``:

- ``opencompass`` (the default; the paper's): OpenCompass's ``gsm8k_gen_1d7fe4``, through
  which the reference implementation grades (:func:`opencompass_format`). Graded by
  :class:`~agent2rl.scoring.OpenCompassGsm8k`: the reply's last number (before any
  "Question:"), compared with the gold after "#### " by OpenCompass's rule.
- ``agent2rl``: chat models get one zero-shot user message; base models a fixed few-shot
  prompt of the first ``num_fewshot`` train items. The final answer (after ``####``, else the
  last number) is compared by :func:`agent2rl.scoring.answers_match` (math-verify)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent2rl.dataset import JsonlSplits, PreparedTask, Sample, Split
from agent2rl.errors import UserError
from agent2rl.files import read_jsonl, write_json_atomic, write_jsonl
from agent2rl.scoring import FinalAnswer, OpenCompassGsm8k
from agent2rl.scoring.opencompass import gsm8k_dataset_postprocess
from agent2rl.solvers import Generate, PromptFormat
from agent2rl.tasks.base import Task, example_block
from agent2rl.tasks.options import TaskOptions, option
from agent2rl.tasks.registry import task
from agent2rl.tasks.shared import opencompass
from agent2rl.tasks.shared.interactive import count_lines
from agent2rl.tasks.shared.public_view import PUBLIC_VIEWS, reference_view
from agent2rl.tasks.shared.store import building, read_rows

HUB_ID, HUB_CONFIG = "openai/gsm8k", "main"
#: the official sizes; an import of other sizes is allowed (a subset) and says so
OFFICIAL_SIZES = {"train": 7473, "test": 1319}
#: train items held back (the last ones in file order) as the validation split; a smaller
#: import keeps a tenth of its train items back instead
VALIDATION_SIZE = 200

CHAT_TEMPLATE = (
    "Solve the following math problem step by step. At the end, write the final answer "
    "as a number after '####'.\n\n{question}"
)


def gold_answer(answer: str) -> str:
    """The number after the last ``####`` of a GSM8K answer, without thousands separators."""
    return answer.rsplit("####", 1)[1].strip().replace(",", "")


def gsm8k_sample(row: dict[str, Any]) -> Sample:
    """A row of a GSM8K-format split (``id``, ``question``, ``answer``) as a sample whose
    target is the gold number (:func:`gold_answer`)."""
    return Sample(row["id"], {"question": row["question"]}, gold_answer(row["answer"]))


#: GSM8K's splits on disk, shared by every task in its format
GSM8K_SPLITS = JsonlSplits(
    {"public": "train.jsonl", "private": "test.jsonl", "validation": "validation.jsonl"},
    gsm8k_sample,
)

#: the evaluation protocols (the ``protocol`` option), the paper's first
PROTOCOLS = ("opencompass", "agent2rl")


def opencompass_sample(row: dict[str, Any]) -> Sample:
    """A GSM8K row as a sample whose target is OpenCompass's gold
    (:func:`~agent2rl.scoring.opencompass.gsm8k_dataset_postprocess`: the text after the
    first ``"#### "``, commas removed). A row without ``"#### "`` (none of the official
    ones) falls back to :func:`gold_answer`."""
    try:
        target = gsm8k_dataset_postprocess(row["answer"])
    except IndexError:
        target = gold_answer(row["answer"])
    return Sample(row["id"], {"question": row["question"]}, target)


OPENCOMPASS_SPLITS = JsonlSplits(GSM8K_SPLITS.files, opencompass_sample)


def opencompass_format(max_new_tokens: int) -> PromptFormat:
    """``gsm8k_gen_1d7fe4``'s prompt (:mod:`agent2rl.tasks.shared.opencompass`): the four
    worked examples as chat turns (for a model without a chat template, OpenCompass's plain
    rendering of the same turns: joined by newlines), then "Question: ...\\nLet's think step
    by step\\nAnswer:"; no stop string (the model's end of sequence only, as the reference)."""
    return PromptFormat(
        template=opencompass.plain_rendering(opencompass.GSM8K_SHOTS, opencompass.GSM8K_QUESTION),
        chat_template=opencompass.chat_user(opencompass.GSM8K_QUESTION),
        # a base model continues after "Answer:" on a new line, as the exemplars' answers do
        completion_template="\n{answer}",
        stop=(),
        max_new_tokens=max_new_tokens,
        chat_shots=opencompass.chat_shots(opencompass.GSM8K_SHOTS),
    )


def convert_rows(rows: list[dict[str, Any]], split: str) -> list[dict[str, str]]:
    """Rows of the raw schema (``question``, ``answer``) -> ours (``id``, ``question``,
    ``answer``), ids ``<split>-<index>`` in file order. :class:`UserError` naming the first
    row that lacks a field or a ``####`` answer."""
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
    """The train and test files under ``source`` (a directory, searched recursively). A file
    belongs to a split when its name starts with the split's name (``train.jsonl``,
    ``train-00000-of-00001.parquet``). Files under a ``socratic`` directory (the other
    config) are ignored. Raises :class:`UserError` when a split is missing or ambiguous."""
    source = source.expanduser()
    if not source.is_dir():
        raise UserError(
            f"{source} is not a directory: pass the folder holding GSM8K's train and test "
            "files (parquet or jsonl)"
        )
    found: dict[str, list[Path]] = {"train": [], "test": []}
    for path in sorted(source.rglob("*")):
        socratic = "socratic" in (p.lower() for p in path.relative_to(source).parts)
        if not path.is_file() or path.suffix not in (".parquet", ".jsonl") or socratic:
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
    """Convert and write the three splits under ``root`` (replacing any earlier data
    atomically: the new tree is built next to it and swapped in). Returns a summary line. The
    validation split is the last :data:`VALIDATION_SIZE` train rows (a tenth of them for an
    import of fewer than 2,000), so the public split is the train file less those."""
    train, test = convert_rows(raw["train"], "train"), convert_rows(raw["test"], "test")
    n_val = min(VALIDATION_SIZE, len(train) // 10)
    public, validation = train[: len(train) - n_val], train[len(train) - n_val :]
    overlap = {r["question"] for r in train} & {r["question"] for r in test}
    with building(root) as tmp:
        write_jsonl(tmp / "public" / "train.jsonl", public)
        write_jsonl(tmp / "private" / "test.jsonl", test)
        write_jsonl(tmp / "validation" / "validation.jsonl", validation)
        manifest = {
            "source": source,
            "train": len(public),
            "validation": len(validation),
            "test": len(test),
            "official_sizes": [len(train), len(test)] == list(OFFICIAL_SIZES.values()),
            "train_test_overlap": len(overlap),
        }
        write_json_atomic(tmp / "manifest.json", manifest)
    note = "" if manifest["official_sizes"] else " (not the official 7473/1319: a subset?)"
    return (
        f"gsm8k: {len(public)} train / {len(validation)} validation / {len(test)} test items "
        f"from {source}{note}"
    )


@dataclass(frozen=True)
class Gsm8kOptions(TaskOptions):
    """``gsm8k``'s options."""

    protocol: str = option(
        "opencompass",
        "The prompt protocol: `opencompass` is the paper's (OpenCompass's gsm8k_gen_1d7fe4, "
        "four fixed worked examples); `agent2rl` is agent2rl's few-shot prompt.",
        choices=PROTOCOLS,
    )
    max_new_tokens: int = option(
        opencompass.GSM8K_MAX_OUT_LEN, "The most new tokens the model generates per answer."
    )
    num_fewshot: int = option(
        5, "Worked examples before the question in the `agent2rl` protocol's base-model prompt."
    )
    batch_size: int = option(64, "Prompts per forward pass when grading (speed only).")
    public: str = option(
        "heldout",
        "What the agent sees: `heldout` keeps the last 200 train items back as the validation "
        "split; `reference` shows all 7,473, as the reference does.",
        choices=PUBLIC_VIEWS,
    )


@task
class Gsm8k(Task):
    name = "gsm8k"
    level = 1
    # 3: the paper's protocol (OpenCompass's gsm8k_gen_1d7fe4) became the default
    version = "3"
    summary = "GSM8K grade-school math (7,273 train / 1,319 graded), final-answer accuracy"
    eval_timeout_s = 3 * 3600.0
    Options = Gsm8kOptions
    config: Gsm8kOptions
    splits = GSM8K_SPLITS
    #: the graded test split: families (every repo whose name holds ``gsm8k``, its legacy id,
    #: mirrors and variants included, and the name of OpenAI's original repository)
    denied_hub_repos = (HUB_ID, "grade-school-math")

    @property
    def paper_protocol(self) -> bool:
        return self.config.protocol == "opencompass"

    def samples(
        self, prepared: PreparedTask, split: Split, limit: int | None = None
    ) -> list[Sample]:
        """The split's items; under the opencompass protocol each target is OpenCompass's
        gold (:func:`opencompass_sample`), else :func:`gold_answer`."""
        splits = OPENCOMPASS_SPLITS if self.paper_protocol else GSM8K_SPLITS
        return splits.read(prepared, split, limit)

    def prepare(self, root: Path) -> PreparedTask:
        prepared = PreparedTask(root / "public", root / "private", root / "validation")
        if not all((prepared.split(s) / f).exists() for s, f in GSM8K_SPLITS.files.items()):
            write_splits(root, download(), f"{HUB_ID} ({HUB_CONFIG}) via datasets")
        if self.config.public == "reference":
            return reference_view(prepared, "train.jsonl", "validation.jsonl")
        return prepared

    def import_data(self, source: Path, root: Path) -> str:
        files = find_split_files(source)
        raw = {split: [r for p in paths for r in read_rows(p)] for split, paths in files.items()}
        return write_splits(root, raw, str(source.expanduser().resolve()))

    def prompt_format(self, prepared: PreparedTask) -> PromptFormat:
        if self.paper_protocol:
            return opencompass_format(self.config.max_new_tokens)
        shots = [
            f"Question: {row['question']}\nAnswer: {row['answer']}\n\n"
            for row in read_jsonl(prepared.public / "train.jsonl", self.config.num_fewshot)
        ]
        # Braces in the exemplars are literal text, not format fields.
        prefix = "".join(shots).replace("{", "{{").replace("}", "}}")
        return PromptFormat(
            template=prefix + "Question: {question}\nAnswer:",
            chat_template=CHAT_TEMPLATE,
            completion_template=" {answer}",
            stop=("\n\n", "Question:"),
            chat_stop=(),
            max_new_tokens=self.config.max_new_tokens,
        )

    def solver(self, prepared: PreparedTask, split: str = "private") -> Generate:
        return Generate(self.prompt_format(prepared), batch_size=self.config.batch_size)

    def scorer(self, prepared: PreparedTask) -> FinalAnswer | OpenCompassGsm8k:
        return OpenCompassGsm8k() if self.paper_protocol else FinalAnswer()

    def description(self, prepared: PreparedTask) -> str:
        manifest = json.loads((prepared.public.parent / "manifest.json").read_text())
        n_train = count_lines(prepared.public / "train.jsonl")
        return f"""# Task: gsm8k (level 1, rule-based reward)

Improve the base model's accuracy on GSM8K, grade-school math word problems that need a few
steps of reasoning.

## Data
- `data/train.jsonl`: {n_train} training problems, one JSON object per line with `id`,
  `question` and `answer`. The answer is a worked solution (with `<<a*b=c>>` calculator notes)
  whose last line is the final answer after `####`.
- The held-out test set ({manifest["test"]} problems) is never shown to you; the grading
  service scores your submissions on it.

{example_block(prepared.public / "train.jsonl")}

## How your model is evaluated
{self.prompt_format(prepared).describe()}
{self._grading_notes()}"""

    def _grading_notes(self) -> str:
        """The protocol's shots and grading rule, as description bullets."""
        if self.paper_protocol:
            return f"""- The protocol is the paper's: OpenCompass's `{opencompass.GSM8K_CONFIG}`
  (OpenCompass {opencompass.OPENCOMPASS_VERSION}), as the reference implementation grades. Chat
  models get its {len(opencompass.GSM8K_SHOTS)} fixed worked examples (each answer ends
  `The answer is N`) as earlier turns, then the question. A model without a chat template gets
  the same turns as one text, joined by newlines.
- Score: accuracy (percent). The grader removes any `<think>...</think>` reasoning, cuts the
  reply at its first `Question:`, takes the last number left (`-?\\d+\\.\\d+` or `-?\\d+`: a
  thousands separator splits a number, so write `1234`, not `1,234`), and counts it correct
  when it equals the gold (the number after `#### `, commas removed) within 1e-6.
"""
        k = self.config.num_fewshot
        return f"""- For base models the prompt starts with {k} fixed worked examples:
  the first {k} items of `data/train.jsonl`, each as `Question: ...\\nAnswer: <answer>`
  followed by a blank line.
- Score: accuracy (percent) of the final answer. The grader takes the number after the last
  `####` in the completion (or, if there is none, the last number in it) and checks that it
  equals the reference answer (numerically, via math-verify).
"""
