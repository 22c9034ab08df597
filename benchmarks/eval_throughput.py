"""Evaluation throughput: our transformers backend against lm-evaluation-harness.

    python benchmarks/eval_throughput.py [--n 300] [--batch-size 64] [--max-new-tokens 48]
                                         [--repeats 5] [--sft-steps 100] [--model tiny]

Both harnesses run in this one process, on the same model directory, the same arith-lite
test items (GSM8K format) and the same protocol: arith-lite's prompt template, its stop
strings, greedy decoding, left padding, the same max new tokens and batch size, float32 on
CPU, and the same OpenMP wait policy (the grader's workers run with
``OMP_WAIT_POLICY=PASSIVE``: set it to compare in their conditions; the machine line
records it). The repeats alternate which harness goes first, so drift in a shared
machine's load falls on both sides; the figures are medians over repeats, and the ratio is
the median of the per-repeat ratios.

- ours: ``load_backend(model_dir, "transformers").generate(prompts, settings)``.
- lm_eval: the ``hf`` model (built once, as ``simple_evaluate(model="hf", ...)`` would) and
  a custom ``generate_until`` task written as YAML to a temp dir, run with
  ``lm_eval.simple_evaluate``. Its generation time is that of ``generate_until`` alone;
  its end-to-end time is the whole ``simple_evaluate`` (task loading, requests, filters,
  metrics) plus the model load.

The built-in tiny model has random weights and answers every prompt with the same 48
colons, which would make the agreement check vacuous and never trigger a stop string. So
by default it is first fine-tuned for ``--sft-steps`` steps on arith-lite's train split
(under a minute on two idle cores): it then writes varied answers and stops at a stop
string. ``--sft-steps 0`` measures the untouched tiny model. Nothing under AGENT2RL_HOME or the
Hugging Face cache is touched: the model, data and datasets cache live in a temp dir, and
the Hugging Face hub is never contacted.

Needs lm-eval: ``pip install -e .[bench]``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import logging
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

TASK_NAME = "arith_lite_bench"


def machine() -> str:
    import torch

    cpu = platform.processor() or platform.machine()
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else "?"
    return (
        f"{platform.node()} ({os.cpu_count()} cores, {usable} usable, {cpu}); "
        f"torch {torch.__version__} with {torch.get_num_threads()} threads, "
        f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', 'unset')}"
    )


def quiet() -> None:
    """Silence progress bars and INFO logs from lm_eval, datasets and transformers."""
    import datasets
    import transformers

    datasets.disable_progress_bars()
    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    for name in ("lm_eval", "lm-eval", "datasets", "transformers"):
        logging.getLogger(name).setLevel(logging.ERROR)


def build_model(spec: str, work: Path, sft_steps: int, seed: int = 0) -> Path:
    """The model directory to measure: ``tiny`` (built into ``work``, then fine-tuned for
    ``sft_steps`` steps when > 0) or an existing local Hugging Face model directory."""
    from agent2rl.models.resolve import check_model_dir
    from agent2rl.models.tiny import build_tiny

    if spec != "tiny":
        path = Path(spec).expanduser().resolve()
        check_model_dir(path)
        return path
    path = build_tiny(work / "tiny", seed=seed)
    if sft_steps <= 0:
        return path
    return sft_tiny(path, work / "tiny-sft", sft_steps, seed)


def sft_tiny(src: Path, dest: Path, steps: int, seed: int) -> Path:
    """Fine-tune ``src`` on arith-lite train problems for ``steps`` steps into ``dest``.

    Each training text is one problem in the eval format followed by the blank line and
    "Question:" that the stop strings catch, so the model learns to end its answers.
    """
    import random

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from agent2rl.tasks.arith_lite import FORMAT, TRAIN_SEED, generate_split

    rows = generate_split(TRAIN_SEED, 2000)
    texts = [FORMAT.template.format(**r) + FORMAT.completion_template.format(**r) for r in rows]
    tok = AutoTokenizer.from_pretrained(src)
    tok.padding_side = "right"
    model = AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    rng = random.Random(seed)
    torch.manual_seed(seed)
    for _ in range(steps):
        batch = [t + "\n\nQuestion:" for t in rng.sample(texts, 16)]
        enc = tok(batch, return_tensors="pt", padding=True, add_special_tokens=False)
        labels = enc["input_ids"].masked_fill(enc["attention_mask"] == 0, -100)
        loss = model(**enc, labels=labels).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
    model.eval()
    model.save_pretrained(dest, safe_serialization=True)
    tok.save_pretrained(dest)
    print(f"tiny model fine-tuned for {steps} steps (final loss {loss.item():.2f})")
    return dest


def write_lm_eval_task(
    root: Path, rows: list[dict[str, Any]], template: str, stop: list[str], max_new: int
) -> Path:
    """A GSM8K-style ``generate_until`` task over ``rows`` (a local jsonl) as lm_eval YAML.

    ``template`` uses ``str.format`` fields ({question}); it becomes the Jinja ``doc_to_text``.
    """
    import yaml

    root.mkdir(parents=True, exist_ok=True)
    data = root / "test.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    config = {
        "task": TASK_NAME,
        "dataset_path": "json",
        "dataset_kwargs": {"data_files": {"test": str(data)}},
        "output_type": "generate_until",
        "test_split": "test",
        "doc_to_text": template.replace("{question}", "{{question}}"),
        "doc_to_target": "{{answer.split('####')[-1].strip()}}",
        "num_fewshot": 0,
        "generation_kwargs": {"until": stop, "max_gen_toks": max_new, "do_sample": False},
        "filter_list": [
            {
                "name": "strict-match",
                "filter": [
                    {"function": "regex", "regex_pattern": r"#### (\-?[0-9\.\,]+)"},
                    {"function": "take_first"},
                ],
            }
        ],
        "metric_list": [{"metric": "exact_match", "aggregation": "mean", "higher_is_better": True}],
        "metadata": {"version": 1.0},
    }
    (root / f"{TASK_NAME}.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    return root


class LmEvalSide:
    """lm_eval's ``hf`` model and the task manager, built once; :meth:`run` evaluates."""

    def __init__(self, model_dir: Path, task_dir: Path, batch_size: int) -> None:
        import lm_eval.api.registry
        from lm_eval.tasks import TaskManager

        start = time.perf_counter()
        # What simple_evaluate(model="hf", model_args=..., batch_size=..., device=...) does.
        self.lm = lm_eval.api.registry.get_model("hf").create_from_arg_string(
            f"pretrained={model_dir},dtype=float32",
            {"batch_size": batch_size, "max_batch_size": None, "device": "cpu"},
        )
        self.load_s = time.perf_counter() - start
        start = time.perf_counter()
        self.task_manager = TaskManager(include_path=str(task_dir))
        self.index_s = time.perf_counter() - start
        self.gen_s: list[float] = []
        self.completions: dict[str, str] = {}
        self._generate_until: Callable = self.lm.generate_until
        self.lm.generate_until = self._timed_generate_until

    def _timed_generate_until(self, requests: list, disable_tqdm: bool = False) -> list[str]:
        start = time.perf_counter()
        out = self._generate_until(requests, disable_tqdm=True)
        self.gen_s.append(time.perf_counter() - start)
        self.completions = {r.args[0]: s for r, s in zip(requests, out, strict=True)}
        return out

    def run(self, limit: int | None = None) -> tuple[float, float, float]:
        """One evaluation: (generation seconds, simple_evaluate seconds, exact match)."""
        import lm_eval

        start = time.perf_counter()
        results = lm_eval.simple_evaluate(
            model=self.lm,
            tasks=[TASK_NAME],
            task_manager=self.task_manager,
            limit=limit,
            bootstrap_iters=0,
            log_samples=False,
        )
        total = time.perf_counter() - start
        acc = results["results"][TASK_NAME]["exact_match,strict-match"]
        return self.gen_s[-1], total, acc


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter
    )
    ap.add_argument("--n", type=int, default=300, help="items (arith-lite test split, max 300)")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--max-new-tokens", type=int, default=None, help="default: arith-lite's (48)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument(
        "--sft-steps",
        type=int,
        default=100,
        help="fine-tune the tiny model first (0: random weights)",
    )
    ap.add_argument("--model", default="tiny", help="'tiny' or a local HF model directory")
    ap.add_argument(
        "--out", type=Path, default=None, help="write the figures as JSON (docs/figures/data/)"
    )
    args = ap.parse_args()

    if importlib.util.find_spec("lm_eval") is None:
        sys.exit("lm-eval is not installed: run `pip install -e .[bench]` (or `make bench`)")

    work = Path(tempfile.mkdtemp(prefix="agent2rl-evalbench-"))
    # Before any Hugging Face import: local files only, datasets cache in the temp dir.
    os.environ.update(
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        HF_DATASETS_CACHE=str(work / "hf-datasets"),
        HF_DATASETS_DISABLE_PROGRESS_BARS="1",
        TOKENIZERS_PARALLELISM="false",
        TQDM_DISABLE="1",
    )
    from agent2rl.errors import UserError

    try:
        run(args, work)
    except UserError as err:  # e.g. --model is not a model directory
        sys.exit(str(err))
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run(args: argparse.Namespace, work: Path) -> None:
    quiet()
    from agent2rl.inference import GenerationSettings, load_backend
    from agent2rl.tasks.arith_lite import FORMAT, TEST_SEED, TEST_SIZE, generate_split

    max_new = args.max_new_tokens or FORMAT.max_new_tokens
    n = min(args.n, TEST_SIZE)
    print(f"machine: {machine()}")
    model_dir = build_model(args.model, work, args.sft_steps)
    rows = generate_split(TEST_SEED, TEST_SIZE)[:n]
    prompts = [FORMAT.template.format(question=r["question"]) for r in rows]
    settings = GenerationSettings(
        max_new_tokens=max_new, stop=FORMAT.stop, batch_size=args.batch_size
    )
    task_dir = write_lm_eval_task(
        work / "lm_eval_tasks", rows, FORMAT.template, list(FORMAT.stop), max_new
    )
    print(
        f"protocol: {n} arith-lite test items, template {json.dumps(FORMAT.template)}, "
        f"stop {json.dumps(list(FORMAT.stop))}, max {max_new} new tokens, greedy, "
        f"batch size {args.batch_size}, float32, {args.repeats} repeats"
    )

    start = time.perf_counter()
    ours = load_backend(model_dir, "transformers")
    ours_load = time.perf_counter() - start
    theirs = LmEvalSide(model_dir, task_dir, args.batch_size)

    # Warm-up: first calls pay one-off costs (lazy imports, allocator, dataset build).
    ours.generate(prompts[: args.batch_size], settings)
    theirs.run(limit=args.batch_size)

    ours_gen: list[float] = []
    theirs_gen: list[float] = []
    theirs_total: list[float] = []
    completions: list[str] = []
    loads: list[float] = []
    acc = 0.0
    sides = ("ours", "lm_eval")
    for rep in range(args.repeats):
        loads.append(os.getloadavg()[0])
        for side in sides if rep % 2 == 0 else sides[::-1]:
            if side == "ours":
                start = time.perf_counter()
                completions = ours.generate(prompts, settings)
                ours_gen.append(time.perf_counter() - start)
            else:
                gen, total, acc = theirs.run()
                theirs_gen.append(gen)
                theirs_total.append(total)
        print(
            f"  repeat {rep + 1}: ours {ours_gen[-1]:.2f}s, "
            f"lm_eval generate_until {theirs_gen[-1]:.2f}s "
            f"(simple_evaluate {theirs_total[-1]:.2f}s), load {loads[-1]:.1f}"
        )

    tok = ours.tokenizer  # type: ignore[attr-defined]
    agree = report_agreement(
        rows,
        prompts,
        completions,
        theirs.completions,
        lambda text: len(tok(text, add_special_tokens=False)["input_ids"]),
        max_new,
        acc,
    )

    og, tg, tt = (statistics.median(x) for x in (ours_gen, theirs_gen, theirs_total))
    print()
    print(
        f"{'harness':<12} {'timed (median over repeats)':<30} {'items':>5} {'seconds':>8} "
        f"{'items/s':>8}"
    )
    rows_out = [
        ("ours", "load_backend", None, ours_load),
        ("ours", "generate", n, og),
        ("lm_eval", "hf model load", None, theirs.load_s),
        ("lm_eval", "TaskManager(include_path) once", None, theirs.index_s),
        ("lm_eval", "generate_until", n, tg),
        ("lm_eval", "simple_evaluate (all of it)", n, tt),
    ]
    for name, what, items, secs in rows_out:
        rate = f"{items / secs:>8.1f}" if items else f"{'':>8}"
        print(f"{name:<12} {what:<30} {items or '':>5} {secs:>8.2f} {rate}")
    print("ratio ours / lm_eval in items/s (median of the per-repeat ratios, min-max):")
    ratio_out: dict[str, Any] = {}
    for key, label, theirs_s in (
        ("generation", "generation (generate vs generate_until)", theirs_gen),
        ("whole_simple_evaluate", "generate vs the whole simple_evaluate", theirs_total),
    ):
        ratios = sorted(t / o for t, o in zip(theirs_s, ours_gen, strict=True))
        ratio_out[key] = {"median": statistics.median(ratios), "min": ratios[0], "max": ratios[-1]}
        print(f"  {label:<42} {statistics.median(ratios):.2f}x ({ratios[0]:.2f}-{ratios[-1]:.2f})")
    e2e = (theirs.load_s + tt) / (ours_load + og)
    print(f"  {'one evaluation with model load (medians)':<42} {e2e:.2f}x")
    ours.close()
    if args.out:
        data = {
            "benchmark": "eval_throughput",
            "command": " ".join(["python", *sys.argv]),
            "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "machine": machine(),
            "load_average_per_repeat": loads,
            "items": n,
            "batch_size": args.batch_size,
            "max_new_tokens": max_new,
            "repeats": args.repeats,
            "sft_steps": args.sft_steps,
            "seconds": {
                "ours_generate": ours_gen,
                "lm_eval_generate_until": theirs_gen,
                "lm_eval_simple_evaluate": theirs_total,
            },
            "ratios_ours_over": ratio_out,
            "one_evaluation_with_load_ratio": e2e,
            "identical_to_lm_eval": f"{agree}/{len(prompts)}",
        }
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(data, indent=2) + "\n")
        print(f"wrote {args.out}")


def report_agreement(
    rows: list[dict[str, Any]],
    prompts: list[str],
    ours: list[str],
    theirs: dict[str, str],
    count_tokens: Callable[[str], int],
    max_new: int,
    acc: float,
) -> int:
    """Print how many completions are identical, how varied ours are, and both accuracies;
    returns the number identical."""
    from agent2rl.scoring import FinalAnswer
    from agent2rl.solvers import Output
    from agent2rl.tasks.gsm8k import gsm8k_sample

    missing = [p for p in prompts if p not in theirs]
    if missing:
        print(
            f"WARNING: lm_eval sent {len(missing)} prompts that differ from ours, e.g. "
            f"{json.dumps(missing[0])}"
        )
    same = sum(theirs.get(p) == o for p, o in zip(prompts, ours, strict=True))
    early = sum(count_tokens(o) < max_new for o in ours)
    samples = [gsm8k_sample(r) for r in rows]
    correct = sum(i.correct for i in FinalAnswer().score(samples, [Output(o) for o in ours]))
    print(
        f"agreement: {same}/{len(prompts)} completions identical "
        f"({100 * same / len(prompts):.1f}%); ours: {len(set(ours))} distinct, {early} ended "
        f"before the token limit, accuracy {100 * correct / len(rows):.1f}% "
        f"(lm_eval strict exact_match {100 * acc:.1f}%)"
    )
    for p, o in zip(prompts, ours, strict=True):
        if theirs.get(p) != o:
            print(
                f"  first difference: ours {json.dumps(o)} vs lm_eval {json.dumps(theirs.get(p))}"
            )
            break
    return same


if __name__ == "__main__":
    main()
