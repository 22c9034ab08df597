"""How fast the built-in tiny model learns arith-lite: SFT steps against accuracy on the
*validation* split (never the graded one: this benchmark chooses the tiny model, its
tokenizer and the reference agent's SFT settings), per difficulty tier, for each variant.

    python benchmarks/lite_learning.py [--variants bpe] [--schedules constant decay]
        [--lr 2e-3] [--batch 32] [--checkpoints 150 300 600 900] [--order shuffled|tiers]

A variant is a tokenizer and an architecture (see VARIANTS): ``bpe`` is the shipped tiny
model (agent2rl.models.tiny), ``char`` version 1's character-level tokenizer on the same
architecture, the others change one thing. Training runs the reference agent's own ``sft()``
(common.py, trl's SFTTrainer) on the agent's prompt/completion rows; at each checkpoint the
model is graded on the 300 validation problems exactly as the grader grades (greedy, the
task's stop strings). ``--order tiers`` trains on the rows sorted easy tier first (a
curriculum; the data loader then reads them in order), ``shuffled`` as the trainer shuffles.

Steps, not seconds, so that variants compare on a shared machine; the seconds per step are
printed too, because the demo trains for a time, not a step count. Each variant runs in its
own process (the agent's code reads its workspace from the environment at import). Uses the
default AGENT2RL_HOME for the task data.

The figure (the defaults): the shipped tiny model at a constant rate and with the rate
decaying linearly to 0 by the last checkpoint (``--schedules``), one training each (a
checkpoint's accuracy is one sample; the seconds per step, too). ``--quick``: 4 steps, one
schedule.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import provenance
from agent_workspace import enter_workspace

# As the harness sets it for agents: with OpenMP's default spin-waiting, two threads on two
# shared cores ran a training step 10-20x slower than one thread (measured here under load).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


#: variant -> (tokenizer kind, architecture overrides of agent2rl.models.tiny.ARCHITECTURE)
VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "bpe": ("bpe", {}),
    "char": ("char", {}),
    "bpe-2layers": ("bpe", {"num_hidden_layers": 2}),
    "bpe-6layers": ("bpe", {"num_hidden_layers": 6}),
    "bpe-wide": ("bpe", {"hidden_size": 192, "intermediate_size": 768}),
}


def char_tokenizer():
    """Version 1's tokenizer: one token per printable-ASCII character (kept here to compare)."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    special = ["<pad>", "<s>", "</s>", "<unk>"]
    chars = ["\n", "\t"] + [chr(c) for c in range(32, 127)]
    core = Tokenizer(
        models.WordLevel(vocab={t: i for i, t in enumerate(special + chars)}, unk_token="<unk>")
    )
    core.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    core.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(
        tokenizer_object=core,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        pad_token="<pad>",
        model_max_length=512,
    )


def _tiers(prepared) -> dict[str, int]:
    with open(prepared.validation / "validation.jsonl") as fh:
        return {r["id"]: r["tier"] for r in map(json.loads, fh)}


def one(variant: str, args: argparse.Namespace, work: Path) -> list[dict]:
    """Train one variant in this process, grading it at each checkpoint; one dict each."""
    from agent2rl.inference import load_backend
    from agent2rl.models.resolve import ModelRef
    from agent2rl.models.tiny import save_model
    from agent2rl.models.tokenizer import build_tokenizer
    from agent2rl.settings import load_settings
    from agent2rl.tasks import get_task, prepare_task

    kind, overrides = VARIANTS[variant]
    settings = load_settings()
    task = get_task("arith-lite")
    prepared = prepare_task(task, settings.task_store)
    tok = build_tokenizer() if kind == "bpe" else char_tokenizer()
    base = save_model(work / "base", tok, name=f"tiny-{variant}", **overrides)
    paths = enter_workspace(work, task, prepared, ModelRef(variant, base, "unused"))
    import torch
    from common import load, prompt_completion_rows, sft
    from transformers import TrainerCallback

    torch.manual_seed(args.seed)
    model, tokenizer = load(str(base))
    rows = prompt_completion_rows(tokenizer)
    if args.order == "tiers":
        tier_of = {json.dumps(r["question"]): r["tier"] for r in _train_rows(paths.data)}
        rows.sort(key=lambda r: tier_of.get(json.dumps(_question(r["prompt"])), 0))
    tiers = _tiers(prepared)
    tokens = [len(tokenizer(r["prompt"] + r["completion"]).input_ids) for r in rows[:500]]
    n_params = sum(p.numel() for p in model.parameters())
    results: list[dict] = []
    started = time.time()
    train_s = 0.0

    class Grade(TrainerCallback):
        def on_step_end(self, targs, state, control, model=None, **kwargs):
            nonlocal train_s
            if state.global_step not in args.checkpoints:
                return control
            train_s += time.time() - started - train_s - sum(r["eval_s"] for r in results)
            out = work / f"step{state.global_step}"
            model.save_pretrained(out)
            tokenizer.save_pretrained(out)
            t0 = time.time()
            backend = load_backend(out, "transformers")
            try:
                res = task.evaluate(backend, prepared, split="validation")
            finally:
                backend.close()
            per_tier = {}
            for t in sorted(set(tiers.values())):
                items = [i for i in res.items if tiers[i.id] == t]
                per_tier[t] = round(100 * sum(i.correct for i in items) / max(1, len(items)), 1)
            results.append(
                {
                    "variant": variant,
                    "params": n_params,
                    "vocab": len(tokenizer),
                    "tokens_per_row": round(sum(tokens) / len(tokens), 1),
                    "step": state.global_step,
                    "train_s": round(train_s, 1),
                    "score": round(res.score, 2),
                    "tiers": per_tier,
                    "eval_s": round(time.time() - t0, 1),
                }
            )
            print("CHECKPOINT " + json.dumps(results[-1]), flush=True)
            model.train()
            return control

    sft(
        model,
        tokenizer,
        rows,
        seconds=1e9,
        lr=args.lr,
        seed=args.seed,
        batch_size=args.batch,
        decay=args.decay,
        max_steps=max(args.checkpoints),
        callbacks=(Grade(),),
        shuffle=args.order != "tiers",
    )
    return results


def _train_rows(data: Path) -> list[dict]:
    with open(data / "train.jsonl") as fh:
        return [json.loads(line) for line in fh]


def _question(prompt: str) -> str:
    return prompt.removeprefix("Question: ").removesuffix("\nAnswer:")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--variants", nargs="+", default=["bpe"], choices=sorted(VARIANTS))
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument(
        "--schedules", nargs="+", choices=["constant", "decay"], default=["constant", "decay"]
    )
    ap.add_argument("--decay", action="store_true", help=argparse.SUPPRESS)  # a child's
    ap.add_argument("--checkpoints", nargs="+", type=int, default=[150, 300, 600, 900])
    ap.add_argument("--order", choices=["shuffled", "tiers"], default="shuffled")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--one", help=argparse.SUPPRESS)
    provenance.add_arguments(ap, "lite_learning")
    args = ap.parse_args()
    if args.one:
        with tempfile.TemporaryDirectory() as work:
            one(args.one, args, Path(work))
        return
    if args.quick:
        args.checkpoints, args.schedules = [4], ["decay"]
    rec = provenance.Recorder(args)
    print(
        f"SFT at lr {args.lr:g}, batch {args.batch}, {args.order} rows, seed {args.seed};"
        " validation accuracy (tiers 1/2/3)"
    )
    checkpoints: list[dict[str, Any]] = []
    for variant, schedule in [(v, s) for v in args.variants for s in args.schedules]:
        cmd = [sys.executable, __file__, "--one", variant, "--lr", str(args.lr)]
        cmd += ["--batch", str(args.batch), "--order", args.order, "--seed", str(args.seed)]
        cmd += ["--checkpoints", *map(str, args.checkpoints)]
        cmd += ["--decay"] if schedule == "decay" else []
        proc = subprocess.run(cmd, capture_output=True, text=True)
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("CHECKPOINT ")]
        if proc.returncode or not lines:
            raise SystemExit(f"{variant} ({schedule}): failed\n{proc.stderr[-3000:]}")
        for line in lines:
            r = json.loads(line[len("CHECKPOINT ") :])
            checkpoints.append(
                {
                    "variant": r["variant"],
                    "schedule": schedule,
                    "step": r["step"],
                    "accuracy": r["score"],
                    **{f"tier_{t}": v for t, v in r["tiers"].items()},
                    "s_per_step": round(r["train_s"] / r["step"], 3),
                }
            )
            tiers = "/".join(f"{v:.0f}" for v in r["tiers"].values())
            print(
                f"{r['variant']:12s} ({r['params'] / 1e6:.2f}M params, vocab {r['vocab']},"
                f" {r['tokens_per_row']:.0f} tokens/row) step {r['step']:5d}:"
                f" {r['score']:5.1f} ({tiers}) after {r['train_s']:.0f}s of training"
                f" ({r['train_s'] / r['step']:.2f} s/step)"
            )
    rec.write(
        {"lr": args.lr, "batch": args.batch, "order": args.order, "checkpoints": checkpoints},
        repeats=1,
        split="validation",
    )


if __name__ == "__main__":
    main()
