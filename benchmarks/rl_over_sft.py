"""What GRPO adds over its own SFT warm-up on arith-lite, and why it adds little: the
measurements issue 17 asks for when no lite task shows RL gains.

    python benchmarks/rl_over_sft.py [--sft-steps 900] [--grpo-steps 200]
        [--variants grpo grpo-t0.7 grpo-beta0 grpo-g16 grpo-lr1e-5 sft-more] [--seeds 0]

All on the *validation* split (never the graded one), with the reference agent's own code
(``sft()`` and ``grpo()`` of common.py, the reward functions of grpo_train.py):

1. **SFT warm-up**: the tiny model trained ``--sft-steps`` steps at lr 2e-3 decaying to 0
   (the reference agent's warm-up, in steps rather than seconds so that a shared machine does
   not skew it). Graded greedily, as the grader grades.
2. **Reward sparsity at the warm-up's end**: ``--group`` completions sampled per validation
   question at each temperature of ``--temperatures``; the sampled accuracy and the share
   of groups whose rewards are all equal (all wrong or all right), which give GRPO's
   group-normalised advantage nothing to learn from.
3. **Variants**, each from the same warm-up checkpoint for ``--grpo-steps`` steps and each
   seed of ``--seeds``: the reference agent's GRPO (``grpo``: temperature 1.0, KL beta
   0.04, groups of 8, 4 prompts a step, lr 1e-4) and one change each (``-t0.7``, ``-beta0``,
   ``-g16`` with 2 prompts a step, ``-lr1e-5``, ``-lr1e-3``, ``-p16``: 16 prompts a step for a
   quarter of the steps), and a control, ``sft-more``:
   the same number of further SFT steps at GRPO's constant lr 1e-4 (does *any* further
   training at that rate lose what the decayed warm-up reached?).

Prints, per variant and seed: the greedy validation score and its paired difference from the
warm-up with a paired bootstrap 95% interval (the same per-item pairing the report uses),
the sampled accuracy at temperature 1.0 before and after (what GRPO optimises), the mean
share of zero-variance groups trl logged while training, the mean reward of the first and
last logging windows, and the last KL. Uses the default AGENT2RL_HOME for the task data.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import provenance  # the one writer of a figure's data file
from agent_workspace import enter_workspace
from provenance import machine  # the machine every figure names

# As the harness sets it for agents (see lite_learning.py).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


#: variant -> overrides of the reference agent's GRPO settings (REFERENCE_GRPO)
VARIANTS: dict[str, dict[str, Any]] = {
    "grpo": {},
    "grpo-t0.7": {"temperature": 0.7},
    "grpo-beta0": {"beta": 0.0},
    "grpo-g16": {"num_generations": 16, "prompts_per_step": 2},
    "grpo-lr1e-5": {"lr": 1e-5},
    "grpo-lr1e-3": {"lr": 1e-3},
    # 16 prompts a step (128 completions), for a quarter of the steps: the same samples in
    # fewer, less noisy updates
    "grpo-p16": {"prompts_per_step": 16, "steps_factor": 0.25},
    "sft-more": {},  # the control: SFT at GRPO's rate, no RL
}
REFERENCE_GRPO: dict[str, Any] = {
    "temperature": 1.0,
    "beta": 0.04,
    "num_generations": 8,
    "prompts_per_step": 4,
    "lr": 1e-4,
}


def workspace(work: Path):
    """The tiny model, arith-lite's prepared data and an agent workspace; sets the agent's
    environment so that the reference code can be imported. Returns (task, prepared, base)."""
    from agent2rl.models.resolve import ModelRef
    from agent2rl.models.tiny import save_model
    from agent2rl.models.tokenizer import build_tokenizer
    from agent2rl.settings import load_settings
    from agent2rl.tasks import get_task, prepare_task

    task = get_task("arith-lite")
    prepared = prepare_task(task, load_settings().task_store)
    base = save_model(work / "base", build_tokenizer(), name="tiny")
    enter_workspace(work, task, prepared, ModelRef("tiny", base, "unused"))
    return task, prepared, base


def greedy(task, prepared, model, tokenizer, out: Path) -> dict[str, float]:
    """Per-item correctness (1.0/0.0) on the validation split, graded as the grader grades."""
    from agent2rl.inference import load_backend

    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    backend = load_backend(out, "transformers")
    try:
        res = task.evaluate(backend, prepared, split="validation")
    finally:
        backend.close()
    model.train()
    return {i.id: 1.0 if i.correct else 0.0 for i in res.items}


def sampled(model, tokenizer, rows: list[dict], temperature: float, group: int, seed: int):
    """``group`` completions per row at ``temperature``, scored by the reference agent's
    ``correct`` reward. Returns (sampled accuracy, share of groups with all-equal rewards)."""
    import torch
    from common import eval_format
    from grpo_train import correct

    fmt = eval_format()
    torch.manual_seed(seed)
    model.eval()
    tokenizer.padding_side = "left"
    accs: list[float] = []
    flat = 0
    for lo in range(0, len(rows), 16):
        batch = rows[lo : lo + 16]
        enc = tokenizer(
            [fmt["template"].format(**r) for r in batch], return_tensors="pt", padding=True
        )
        with torch.no_grad():
            out = model.generate(
                **enc,
                do_sample=True,
                temperature=temperature,
                top_k=0,
                max_new_tokens=40,
                num_return_sequences=group,
                pad_token_id=tokenizer.pad_token_id,
            )
        texts = tokenizer.batch_decode(
            out[:, enc["input_ids"].shape[1] :], skip_special_tokens=True
        )
        for j, row in enumerate(batch):
            rewards = correct(texts[j * group : (j + 1) * group], [row["answer"]] * group)
            accs.append(sum(rewards) / group)
            flat += len(set(rewards)) == 1
    model.train()
    return sum(accs) / len(accs), flat / len(rows)


def paired(after: dict[str, float], before: dict[str, float]) -> tuple[float, tuple[float, float]]:
    from agent2rl.statistics import paired_bootstrap_ci

    ids = sorted(before)
    a = [after[i] for i in ids]
    b = [before[i] for i in ids]
    lo, hi = paired_bootstrap_ci(a, b)
    return 100 * (sum(a) - sum(b)) / len(ids), (100 * lo, 100 * hi)


def score(items: dict[str, float]) -> float:
    return 100 * sum(items.values()) / len(items)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sft-steps", type=int, default=900)
    ap.add_argument("--grpo-steps", type=int, default=200)
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    ap.add_argument("--seeds", nargs="+", type=int, default=[0])
    ap.add_argument("--temperatures", nargs="+", type=float, default=[0.3, 0.7, 1.0])
    ap.add_argument("--group", type=int, default=8)
    provenance.add_arguments(ap, "rl_over_sft")
    ap.add_argument(
        "--warmup",
        type=Path,
        help="keep the warm-up checkpoint here, and reuse it if it is there already"
        " (trained with the same --sft-steps)",
    )
    args = ap.parse_args()
    rec = provenance.Recorder(args)

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        task, prepared, base = workspace(work)
        import torch
        from common import grpo, load, prompt_completion_rows, sft
        from grpo_train import SFT_LR, correct, eos_token_ids, grpo_rows, well_formed_reward

        print(f"machine: {machine()}")
        with open(prepared.validation / "validation.jsonl") as fh:
            val_rows = [json.loads(line) for line in fh]
        results: dict[str, Any] = {"sft_steps": args.sft_steps, "grpo_steps": args.grpo_steps}

        # 1. the warm-up
        warm = args.warmup or work / "sft"
        marker = warm / "warmup.json"
        t0 = time.time()
        if marker.is_file() and json.loads(marker.read_text())["sft_steps"] == args.sft_steps:
            model, tokenizer = load(str(warm))
        else:
            torch.manual_seed(0)
            model, tokenizer = load(str(base))
            model = sft(
                model,
                tokenizer,
                prompt_completion_rows(tokenizer),
                1e9,
                SFT_LR,
                decay=True,
                max_steps=args.sft_steps,
            )
        before = greedy(task, prepared, model, tokenizer, warm)
        marker.write_text(json.dumps({"sft_steps": args.sft_steps}))
        results["sft"] = {"score": score(before), "train_s": round(time.time() - t0, 1)}
        print(
            f"SFT warm-up: {args.sft_steps} steps at lr {SFT_LR:g} decaying to 0"
            f" ({results['sft']['train_s']:.0f}s with its grading): validation {score(before):.2f}"
        )

        # 2. reward sparsity at the warm-up's end
        results["sparsity"] = {}
        for temp in args.temperatures:
            acc, flat = sampled(model, tokenizer, val_rows, temp, args.group, seed=0)
            results["sparsity"][temp] = {"sampled_accuracy": acc, "zero_variance_groups": flat}
            print(
                f"  sampled at T={temp:g}, groups of {args.group}: accuracy {100 * acc:.1f}%,"
                f" groups with all-equal rewards {100 * flat:.1f}%"
            )
        sampled_before = results["sparsity"].get(1.0, {}).get("sampled_accuracy")

        # 3. the variants, each from the warm-up checkpoint
        rows = grpo_rows(tokenizer)
        results["variants"] = []
        for name in args.variants:
            for seed in args.seeds:
                torch.manual_seed(seed)
                model, tokenizer = load(str(warm))
                t0 = time.time()
                row: dict[str, Any] = {"variant": name, "seed": seed}
                if name == "sft-more":
                    model = sft(
                        model,
                        tokenizer,
                        prompt_completion_rows(tokenizer),
                        1e9,
                        REFERENCE_GRPO["lr"],
                        seed=seed,
                        max_steps=args.grpo_steps,
                    )
                else:
                    cfg = {**REFERENCE_GRPO, **VARIANTS[name]}
                    lr = cfg.pop("lr")
                    steps = max(1, round(args.grpo_steps * cfg.pop("steps_factor", 1.0)))
                    rewards = [correct, well_formed_reward(eos_token_ids(model, tokenizer))]
                    model, stats = grpo(
                        model, tokenizer, rows, rewards, 1e9, lr, seed=seed, max_steps=steps, **cfg
                    )
                    logs = stats["logs"]
                    row["steps"] = steps
                    row["zero_variance_groups"] = (
                        statistics.mean(lg.get("frac_reward_zero_std", float("nan")) for lg in logs)
                        if logs
                        else None
                    )
                    row["reward_first"] = logs[0]["reward"] if logs else None
                    row["reward_last"] = logs[-1]["reward"] if logs else None
                    row["kl_last"] = logs[-1].get("kl") if logs else None
                row["train_s"] = round(time.time() - t0, 1)
                after = greedy(task, prepared, model, tokenizer, work / f"{name}-{seed}")
                delta, (lo, hi) = paired(after, before)
                acc_after, _ = sampled(model, tokenizer, val_rows, 1.0, args.group, seed=0)
                row.update(score=score(after), delta=delta, ci95=[lo, hi], sampled_after=acc_after)
                results["variants"].append(row)
                extra = ""
                if "reward_first" in row and row["reward_first"] is not None:
                    extra = (
                        f", zero-variance groups {100 * row['zero_variance_groups']:.0f}%,"
                        f" reward {row['reward_first']:.3f} -> {row['reward_last']:.3f}"
                    )
                    if row["kl_last"] is not None:
                        extra += f", kl {row['kl_last']:.4f}"
                sb = f"{100 * sampled_before:.1f} -> " if sampled_before is not None else ""
                print(
                    f"{name:12s} seed {seed}, {row.get('steps', args.grpo_steps)} steps:"
                    f" validation {score(after):6.2f}"
                    f" ({delta:+.2f}, paired 95% CI {lo:+.2f}..{hi:+.2f}),"
                    f" sampled T=1 {sb}{100 * acc_after:.1f}%{extra}"
                    f" ({row['train_s']:.0f}s)",
                    flush=True,
                )
        rec.write(results, repeats=len(args.seeds), split="validation")


if __name__ == "__main__":
    main()
