"""``alpacaeval`` (L2, judge-based): AlpacaEval 2.0, the paper's level-2 task.

Graded (private): the 805 AlpacaEval 2.0 instructions, each model output judged pairwise
against ``gpt4_turbo``'s (gpt-4-1106-preview) reference output on any OpenAI-compatible
endpoint, by one of two judge configs (``--task-opt judge=NAME``; the judge is part of the
evaluation hash, so the two judges' scores never compare):

- ``annotators_gpt52_fn`` (version 2's default): the reference implementation's evaluation
  config, whence the paper's AlpacaEval numbers (docs/paper-fidelity.md): GPT-5.2 ranking the
  two outputs by function call (:mod:`agent2rl.scoring.judges.ranking` says what is copied
  from AlpacaEval's ``alpaca_eval_gpt4_turbo_fn`` annotator and what is assumed);
- ``weighted_alpaca_eval_gpt4_turbo`` (version 1's judge): AlpacaEval 2.0's official annotator,
  GPT-4 Turbo's logprobs (:mod:`agent2rl.scoring.judges.protocol`): the model the reference's
  task text names, and the judge of AlpacaEval's public leaderboard numbers.

The score (``metric``) is the length-controlled win rate (``lc``, the default, the
reference's: refused without ``df_gamed.csv`` in the task store, :meth:`AlpacaEval.metric`) or
the raw win rate (``raw``), chosen explicitly; the two never compare
(:class:`agent2rl.scoring.judges.scorer.Judge`). Generation runs in the reference's
4,096-token context under ``--protocol reference``
(:data:`~agent2rl.inference.decoding.REFERENCE_CONTEXT`, applied by the vLLM backend).

Public: the first 2,000 rows of ``tatsu-lab/alpaca``, as the reference gives them; rows
2,000-2,099 are the validation split (never graded or shown; judged against Alpaca's own
outputs). Neither holds an eval instruction. The data come from the hub on first use
(:func:`download`), or offline through ``agent2rl data import alpacaeval DIR``
(:func:`find_files`).

Prompting (greedy, 512 new tokens, the reference's setting): chat models get the instruction
alone as one user message (AlpacaEval's setting); a model without a chat template gets it raw
(``base_prompt=raw``, version 2's default, as the reference does) or in the Alpaca prompt
(``base_prompt=alpaca``, version 1's: :data:`BASE_TEMPLATE`, cut at the next
``### Instruction:``). Version 1's protocol exactly: ``--task-opt
judge=weighted_alpaca_eval_gpt4_turbo base_prompt=alpaca``."""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from agent2rl.dataset import JsonlSplits, PreparedTask, Sample
from agent2rl.errors import UserError
from agent2rl.files import write_json_atomic, write_jsonl
from agent2rl.scoring.judges import CACHE_RELPATH, USAGE_FILE, openai_judge
from agent2rl.scoring.judges import protocol as judge_protocol
from agent2rl.scoring.judges import ranking as judge_ranking
from agent2rl.scoring.judges.scorer import LC, RAW, Judge
from agent2rl.scoring.judges.win_rates import read_df_gamed
from agent2rl.scoring.llm_client import DEFAULT_BASE_URL
from agent2rl.settings import load_settings
from agent2rl.solvers import Generate, PromptFormat
from agent2rl.tasks.base import Task, example_block
from agent2rl.tasks.options import TaskOptions, option
from agent2rl.tasks.registry import task
from agent2rl.tasks.shared.store import building, read_rows

EVAL_REPO = "tatsu-lab/alpaca_eval"
EVAL_FILE = "alpaca_eval_gpt4_baseline.json"
GAMED_FILE = "df_gamed.csv"
ALPACA_REPO = "tatsu-lab/alpaca"
#: an Alpaca row's fields, in the order the public split stores them (after ``id``)
ALPACA_FIELDS = ("instruction", "input", "output")
#: the eval set's size
EVAL_SIZE = 805
#: alpaca rows [0, PUBLIC_SIZE) are public, the next VALIDATION_SIZE the validation split
PUBLIC_SIZE = 2000
VALIDATION_SIZE = 100
#: file names an offline import recognises as the eval set (the hub's name, the name in
#: ``../shared/data/alpaca_eval``, and AlpacaEval's repository layout)
EVAL_NAMES = (EVAL_FILE, "reference_outputs_gpt4_1106_preview.json")
EVAL_REPO_PATH = ("gpt4_1106_preview", "model_outputs.json")

#: Alpaca's prompt without an input field, for models without a chat template
BASE_TEMPLATE = (
    "Below is an instruction that describes a task. Write a response that appropriately "
    "completes the request.\n\n### Instruction:\n{instruction}\n\n### Response:\n"
)

SPLIT_FILES = {"public": "train.jsonl", "private": "eval.jsonl", "validation": "validation.jsonl"}
#: the end of both judged tasks' description: what the agent may use to build its reward
OWN_LLM_NOTE = """\
- You **may** call your own LLM (the driver model of this run) through the run's metering
  proxy, e.g. to write or rank preference data for DPO: those tokens count against your
  token budget and show in the run report.
- The grading service tells you each submission's score; per-item judgments stay with the
  grader.
"""


def merged_instruction(row: dict[str, Any]) -> str:
    """An Alpaca row's instruction with its input (if any) after a blank line: how a row is
    asked when it is judged (the validation split)."""
    extra = str(row.get("input") or "").strip()
    return f"{row['instruction']}\n\n{extra}" if extra else str(row["instruction"])


def judged_row(
    row_id: str, index: int, instruction: str, dataset: str, reference: str, generator: str
) -> dict[str, Any]:
    """A row of a judged split (private or validation): the instruction and the reference
    output the model's is judged against."""
    return {
        "id": row_id,
        "index": index,
        "instruction": instruction,
        "dataset": dataset,
        "reference": reference,
        "reference_generator": generator,
    }


def alpacaeval_sample(row: dict[str, Any]) -> Sample:
    """A stored row as a sample: the instruction in, the reference output as the target.
    Eval and validation rows carry ``reference``; public (training) rows ``output``."""
    if "reference" in row:
        meta = {"index": row["index"], "group": row.get("dataset", "alpaca")}
        return Sample(row["id"], {"instruction": row["instruction"]}, row["reference"], meta)
    return Sample(row["id"], {"instruction": merged_instruction(row)}, row["output"])


SPLITS = JsonlSplits(SPLIT_FILES, alpacaeval_sample)  # type: ignore[arg-type]


# -- reading the official files ------------------------------------------------------------
def convert_eval(rows: list[dict[str, Any]], source: Path | str) -> list[dict[str, Any]]:
    """AlpacaEval's reference outputs (``instruction``, ``output``, ``dataset``,
    ``generator``) -> the private split's rows (``id``, ``index``, ``instruction``,
    ``dataset``, ``reference``, ``reference_generator``), in file order. Raises
    :class:`UserError` naming the first row without an instruction or an output, or a repeated
    instruction (the cache and the position swap key on it)."""
    out, seen = [], set()
    for i, row in enumerate(rows):
        ins, ref = row.get("instruction"), row.get("output")
        if not isinstance(ins, str) or not isinstance(ref, str):
            raise UserError(
                f"{source}: row {i} is not in AlpacaEval's schema (an 'instruction' and an "
                f"'output'): {json.dumps(row)[:200]}"
            )
        if ins in seen:
            raise UserError(f"{source}: row {i} repeats an instruction: {ins[:80]!r}")
        seen.add(ins)
        dataset = str(row.get("dataset") or "alpaca_eval")
        generator = str(row.get("generator") or "")
        out.append(judged_row(f"alpacaeval-{i:03d}", i, ins, dataset, ref, generator))
    return out


def convert_alpaca(rows: list[dict[str, Any]], source: Path | str) -> list[dict[str, Any]]:
    """Alpaca rows (``instruction``, ``input``, ``output``) -> ``id``, ``instruction``,
    ``input``, ``output``; :class:`UserError` naming the first row that lacks one."""
    out = []
    for i, row in enumerate(rows):
        if not all(isinstance(row.get(k), str) for k in ALPACA_FIELDS):
            raise UserError(
                f"{source}: row {i} is not in Alpaca's schema (string 'instruction', 'input' "
                f"and 'output'): {json.dumps(row)[:200]}"
            )
        out.append({"id": f"alpaca-{i:05d}", **{k: row[k] for k in ALPACA_FIELDS}})
    return out


def find_files(source: Path) -> tuple[Path, Path, Path | None]:
    """The files of an offline import under ``source`` (searched recursively), in this order:

    - the eval set: ``alpaca_eval_gpt4_baseline.json`` (the hub's), or
      ``reference_outputs_gpt4_1106_preview.json``, or ``gpt4_1106_preview/model_outputs.json``
      (AlpacaEval's repository layout);
    - the Alpaca rows: the one JSON, JSON-lines or parquet file whose rows have ``instruction``,
      ``input`` and ``output`` (the hub's ``train-*.parquet`` of ``tatsu-lab/alpaca``, or
      stanford_alpaca's ``alpaca_data.json``);
    - ``df_gamed.csv``, or None (optional: without it only ``metric=raw`` can grade).

    Raises :class:`UserError` naming what is missing or ambiguous and how to get it."""
    source = source.expanduser()
    if not source.is_dir():
        raise UserError(f"{source} is not a directory: pass the folder holding the files")
    files = sorted(p for p in source.rglob("*") if p.is_file())
    evals = [p for p in files if p.name in EVAL_NAMES or tuple(p.parts[-2:]) == EVAL_REPO_PATH]
    gamed = [p for p in files if p.name == GAMED_FILE]
    if not evals:
        raise UserError(
            f"no AlpacaEval reference outputs under {source}: add {EVAL_FILE} from the "
            f"Hugging Face dataset {EVAL_REPO} (or results/gpt4_1106_preview/model_outputs.json "
            "of the alpaca_eval repository)"
        )
    if len(evals) > 1 or len(gamed) > 1:
        many = ", ".join(str(p) for p in (evals if len(evals) > 1 else gamed))
        raise UserError(f"several candidate files under {source}: {many}; keep one")
    alpaca = [p for p in files if p not in evals and set(ALPACA_FIELDS) <= _columns(p)]
    if not alpaca:
        raise UserError(
            f"no Alpaca training rows under {source}: add the parquet file of the Hugging "
            f"Face dataset {ALPACA_REPO} (data/train-00000-of-00001-*.parquet) or "
            "stanford_alpaca's alpaca_data.json"
        )
    if len(alpaca) > 1:
        raise UserError(
            f"several Alpaca files under {source}: {', '.join(map(str, alpaca))}; keep one"
        )
    return evals[0], alpaca[0], gamed[0] if gamed else None


def _columns(path: Path) -> set[str]:
    """A parquet file's columns, or the keys of the first object of a JSON list or JSON-lines
    file (empty for anything else): enough to recognise a file's schema without parsing a
    large non-Alpaca file in full."""
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        return set(pq.read_schema(path).names)
    if path.suffix not in (".json", ".jsonl"):
        return set()
    try:
        with open(path, encoding="utf-8") as fh:
            if path.suffix == ".jsonl":
                row = json.loads(fh.readline())
            else:
                head = fh.read(1 << 16).lstrip()
                if not head.startswith("["):
                    return set()
                row, _ = json.JSONDecoder().raw_decode(head[1:].lstrip())
    except (OSError, ValueError, UnicodeDecodeError):
        return set()
    return set(row) if isinstance(row, dict) else set()


def write_store(
    root: Path,
    eval_rows: list[dict[str, Any]],
    alpaca_rows: list[dict[str, Any]],
    gamed: Path | None,
    source: str,
) -> str:
    """Write the three splits (and ``df_gamed.csv`` when given) under ``root``, replacing any
    earlier data atomically; returns a summary line. The public split is the first
    :data:`PUBLIC_SIZE` Alpaca rows and the validation split the next :data:`VALIDATION_SIZE`;
    an import of fewer than 2,100 rows keeps a tenth of them back for validation instead and
    says it is not the official setting. Alpaca rows whose instruction is an eval instruction
    are dropped (and counted)."""
    private = convert_eval(eval_rows, source)
    alpaca = convert_alpaca(alpaca_rows, source)
    n_total = PUBLIC_SIZE + VALIDATION_SIZE
    n_public = PUBLIC_SIZE if len(alpaca) >= n_total else len(alpaca) - max(1, len(alpaca) // 10)
    public, validation = alpaca[:n_public], alpaca[n_public:n_total]
    graded = {r["instruction"].strip() for r in private}
    overlap = [r for r in public + validation if merged_instruction(r).strip() in graded]
    public = [r for r in public if r not in overlap]
    validation = [r for r in validation if r not in overlap]
    val_rows = [
        judged_row(r["id"], i, merged_instruction(r), "alpaca", r["output"], "text-davinci-003")
        for i, r in enumerate(validation)
    ]
    if gamed is not None:
        try:
            df = read_df_gamed(gamed)
        except ValueError as err:
            raise UserError(str(err)) from None
        missing = sorted(set(range(len(private))) - set(df["index"].astype(int)))
        if missing:
            raise UserError(
                f"{gamed} does not cover the eval set (no instruction_difficulty for index "
                f"{missing[:5]}): import the df_gamed.csv that belongs to these reference outputs"
            )
    with building(root) as tmp:
        for side, rows in (("public", public), ("private", private), ("validation", val_rows)):
            write_jsonl(tmp / side / SPLIT_FILES[side], rows)
        if gamed is not None:
            (tmp / "private" / GAMED_FILE).write_bytes(gamed.read_bytes())
        official = len(private) == EVAL_SIZE and len(alpaca) >= n_total
        manifest = {
            "source": source,
            "train": len(public),
            "validation": len(val_rows),
            "eval": len(private),
            "eval_datasets": dict(Counter(r["dataset"] for r in private)),
            "reference_generators": sorted({r["reference_generator"] for r in private}),
            "length_controlled": gamed is not None,
            "official_sizes": official,
            "dropped_overlap": len(overlap),
        }
        write_json_atomic(tmp / "manifest.json", manifest)
    note = "" if official else " (not the official 805 / 2,000 / 100: a subset?)"
    metric = (
        "LC win rate (df_gamed.csv present)"
        if gamed
        else "raw win rate only (no df_gamed.csv: the default metric=lc is refused, run with "
        "--task-opt metric=raw or import df_gamed.csv)"
    )
    return (
        f"alpacaeval: {len(public)} train / {len(val_rows)} validation / {len(private)} eval "
        f"items from {source}{note}; score: {metric}"
    )


def download(root: Path) -> str:
    """Fetch ``alpaca_eval_gpt4_baseline.json`` and ``df_gamed.csv`` (``huggingface_hub``) and
    ``tatsu-lab/alpaca`` (``datasets``) from the hub into ``root``; :class:`UserError` naming
    the offline import when the hub cannot be reached. ``df_gamed.csv`` is optional here
    (:meth:`AlpacaEval.metric`)."""
    fix = (
        "On a machine without network, fetch them elsewhere and run: agent2rl data import "
        f"alpacaeval DIR (DIR holding {EVAL_FILE}, optionally {GAMED_FILE}, and the Alpaca rows)"
    )
    if os.environ.get("AGENT2RL_OFFLINE"):
        raise UserError(f"alpacaeval's data is not in the task store (offline). {fix}")
    try:
        from datasets import load_dataset
        from huggingface_hub import hf_hub_download

        eval_path = Path(hf_hub_download(EVAL_REPO, EVAL_FILE, repo_type="dataset"))
        alpaca = load_dataset(ALPACA_REPO, split=f"train[:{PUBLIC_SIZE + VALIDATION_SIZE}]")
    except Exception as err:
        raise UserError(
            f"alpacaeval's data is not in the task store and the hub could not be reached "
            f"({type(err).__name__}). {fix}"
        ) from None
    try:
        gamed: Path | None = Path(hf_hub_download(EVAL_REPO, GAMED_FILE, repo_type="dataset"))
    except Exception:  # the task still works, on the raw win rate
        gamed = None
    rows = [dict(r) for r in alpaca]
    return write_store(root, read_rows(eval_path), rows, gamed, f"{EVAL_REPO} + {ALPACA_REPO}")


@dataclass(frozen=True)
class AlpacaEvalOptions(TaskOptions):
    """``alpacaeval``'s options. An empty ``judge_model`` becomes the judge config's own
    model when the options are built (so ``run.json`` and the eval hash name the model)."""

    judge: str = option(
        judge_ranking.NAME,
        "The judge's AlpacaEval evaluator config, one of "
        f"{', '.join(f'`{k}`' for k in judge_ranking.JUDGE_CONFIGS)} (the first is the "
        "reference implementation's).",
    )
    judge_model: str = option(
        "", "The judge model's name at `judge_base_url`; empty: the judge config's own model."
    )
    base_prompt: str = option(
        "raw",
        "How a model without a chat template is prompted: `raw` (the reference's: the "
        "instruction as written) or `alpaca` (the Alpaca template).",
    )
    judge_base_url: str = option(
        DEFAULT_BASE_URL, "The OpenAI-compatible endpoint that serves the judge model."
    )
    max_new_tokens: int = option(512, "The most new tokens the model generates per answer.")
    batch_size: int = option(16, "Prompts per forward pass when grading (speed only).")
    metric: str = option(
        "lc",
        "The score: `lc` the length-controlled win rate (the reference's; needs AlpacaEval's "
        "df_gamed.csv in the task store, refused without it) or `raw` the raw win rate, "
        "chosen explicitly.",
        choices=("lc", "raw"),
    )

    def __post_init__(self) -> None:
        if self.judge not in judge_ranking.JUDGE_CONFIGS:
            known = ", ".join(judge_ranking.JUDGE_CONFIGS)
            raise UserError(f"alpacaeval: judge {self.judge!r} is not one of {known}")
        if self.base_prompt not in ("raw", "alpaca"):
            raise UserError("alpacaeval: base_prompt must be raw (the reference's) or alpaca")
        if not self.judge_model:  # the config's own model unless one is named
            object.__setattr__(self, "judge_model", judge_ranking.JUDGE_CONFIGS[self.judge][0])


@task
class AlpacaEval(Task):
    name = "alpacaeval"
    level = 2
    version = "2"
    summary = (
        "AlpacaEval 2.0: 805 instructions judged against GPT-4-turbo by an LLM judge "
        "(LC win rate); 2,000 Alpaca rows to train on"
    )
    eval_timeout_s = 3 * 3600.0
    Options = AlpacaEvalOptions
    config: AlpacaEvalOptions
    splits = SPLITS
    #: the graded instructions and their baseline outputs, and the judge's template
    denied_packages = ("alpaca-eval",)
    denied_hub_repos = (EVAL_REPO,)

    def prepare(self, root: Path) -> PreparedTask:
        prepared = PreparedTask(root / "public", root / "private", root / "validation")
        if not all((prepared.split(s) / f).exists() for s, f in SPLIT_FILES.items()):
            download(root)
        return prepared

    def import_data(self, source: Path, root: Path) -> str:
        eval_file, alpaca_file, gamed = find_files(source)
        rows = read_rows(eval_file), read_rows(alpaca_file)
        return write_store(root, *rows, gamed, str(source.expanduser().resolve()))

    def prompt_format(self, prepared: PreparedTask) -> PromptFormat:
        raw = self.config.base_prompt == "raw"
        return PromptFormat(
            template="{instruction}" if raw else BASE_TEMPLATE,
            chat_template="{instruction}",
            completion_template="{output}",
            stop=() if raw else ("### Instruction:",),
            chat_stop=(),
            max_new_tokens=self.config.max_new_tokens,
        )

    def solver(self, prepared: PreparedTask, split: str = "private") -> Generate:
        return Generate(self.prompt_format(prepared), batch_size=self.config.batch_size)

    def denied_llm_prompts(self) -> dict[str, tuple[str, ...]]:
        """The judge model may not be sent the judge's template: its sentences of 60
        characters or more (what stays the same around the placeholders). Empty when the
        alpaca-eval package is missing (the task cannot grade then anyway)."""
        try:
            fn = self.config.judge == judge_ranking.NAME
            text = judge_ranking.template() if fn else judge_protocol.template()
        except UserError:
            return {}
        pieces = re.split(r"\{(?:instruction|output_1|output_2)\}", text)
        lines = [ln.strip() for piece in pieces for ln in piece.splitlines()]
        return {self.config.judge_model: tuple(ln for ln in lines if len(ln) >= 60)}

    def scorer(self, prepared: PreparedTask) -> Judge:
        """The judge at ``judge_base_url``, cached under ``AGENT2RL_HOME`` and metered into
        the evaluation's grading directory (:attr:`record_dir`, set by the grading worker),
        with the LC GLM when ``df_gamed.csv`` is in the store."""
        build = (
            judge_ranking.ranking_judge if self.config.judge == judge_ranking.NAME else openai_judge
        )
        judge = build(
            self.config.judge_model,
            self.config.judge_base_url,
            cache_path=load_settings().home / CACHE_RELPATH,
            usage_path=self.record_dir / USAGE_FILE if self.record_dir else None,
        )
        lc = self.metric(prepared) == LC
        return Judge(judge, read_df_gamed(prepared.private / GAMED_FILE) if lc else None)

    def private_paths(self) -> list[Path]:
        """The judgment cache (under ``AGENT2RL_HOME``) and the installed ``alpaca-eval``
        distribution's ``METADATA`` (:func:`_readme_path`): the grader's, never the agent's."""
        paths = (load_settings().home / CACHE_RELPATH.parent, _readme_path())
        return [p for p in paths if p is not None]

    def metric(self, prepared: PreparedTask) -> str:
        """The declared score: :data:`~agent2rl.scoring.judges.scorer.LC` (``metric=lc``,
        the default) or :data:`~agent2rl.scoring.judges.scorer.RAW` (``metric=raw``).
        :class:`UserError` for ``lc`` when the store has no ``df_gamed.csv``: the raw win
        rate is never put in its place silently."""
        if self.config.metric == "raw":
            return RAW
        if not (prepared.private / GAMED_FILE).exists():
            raise UserError(
                f"alpacaeval's length-controlled win rate needs AlpacaEval's {GAMED_FILE} "
                f"(from the hub dataset {EVAL_REPO}), which the task store lacks: import it "
                f"with `agent2rl data import alpacaeval DIR` (DIR holding {GAMED_FILE} beside "
                f"{EVAL_FILE} and the Alpaca rows), or score the raw win rate with "
                "--task-opt metric=raw"
            )
        return LC

    def description(self, prepared: PreparedTask) -> str:
        manifest = json.loads((prepared.public.parent / "manifest.json").read_text())
        metric = (
            "the **length-controlled (LC) win rate** against the reference, AlpacaEval 2.0's "
            "headline metric: a logistic model of the judge's preferences that predicts the "
            "win rate your outputs would have at the reference's length, so longer answers "
            "alone do not raise it"
            if self.metric(prepared) == LC
            else "the **win rate** against the reference (the mean of the judge's preference "
            "for your output; the run chose it over the length-controlled win rate with "
            "`--task-opt metric=raw`)"
        )
        base_line = (
            "- A model without a chat template gets the instruction alone, as raw text "
            "(no Alpaca prompt around it)."
            if self.config.base_prompt == "raw"
            else "- Base models get Alpaca's prompt format (the format of `data/train.jsonl`); "
            "an example with an `input` would add it after the instruction, but "
            "evaluation instructions have none."
        )
        judge_line = (
            f"- The judge ({self.config.judge_model}) sees the instruction and two answers "
            "in an order fixed per instruction and ranks them by a function call: each "
            "instruction's preference is 1 (yours better) or 0 (reference better)."
            if self.config.judge == judge_ranking.NAME
            else "- The judge is AlpacaEval 2.0's `weighted_alpaca_eval_gpt4_turbo` annotator "
            f"({self.config.judge_model}): it sees the instruction and two answers in an "
            "order fixed per instruction, and its next-token probabilities give a "
            "preference between 0 (reference better) and 1 (yours better) for every "
            "instruction."
        )
        return f"""# Task: alpacaeval (level 2, judge-based reward)

Improve the base model's instruction following as judged by an LLM: AlpacaEval 2.0. There is
no rule that computes the reward: an LLM judge compares each of your model's answers with a
strong reference answer (GPT-4-turbo's) and says which it prefers.

## Data
- `data/train.jsonl`: {manifest["train"]} instruction-tuning examples (the first rows of the
  Alpaca dataset), one JSON object per line with `id`, `instruction`, `input` (often empty)
  and `output` (text-davinci-003's answer). All of it is yours to use.
- The {manifest["eval"]} evaluation instructions (AlpacaEval 2.0: {
            ", ".join(f"{k} {v}" for k, v in manifest["eval_datasets"].items())
        }) and their reference answers are
  never shown to you; the grading service generates your model's answers and has them judged.

{example_block(prepared.public / SPLIT_FILES["public"])}

## How your model is evaluated
{self.prompt_format(prepared).describe()}
{base_line}
{judge_line}
- Score: {metric}, in percent (50 = as good as the reference).

## What you may use
- You may **not** use the grading judge: not its endpoint, its API key or its cache of
  judgments. They are the grader's and are not in your environment.
{OWN_LLM_NOTE}"""


def _readme_path() -> Path | None:
    """The ``METADATA`` file of the installed ``alpaca-eval`` distribution, or None. It is the
    package's README, which quotes a graded item: the eval instruction "How did US states get
    their names?" (helpful_base) with its gpt4_1106_preview reference output, in its example
    of ``annotations.json``. The agent's interpreter has the package installed (the judge's
    template comes from it), so every agent sandbox masks this file (it then reads as empty:
    ``importlib.metadata`` finds no name or version for the package there)."""
    try:
        dist = metadata.distribution("alpaca-eval")
    except metadata.PackageNotFoundError:
        return None
    for file in dist.files or ():
        if file.name == "METADATA" and file.parent.name.endswith(".dist-info"):
            path = Path(str(file.locate())).resolve()
            return path if path.is_file() else None
    return None
