"""The model-identity check's statistics on real fine-tunes and on unrelated models.

    python benchmarks/identity_check.py [--steps 5,300,1500] [--threads 2]

Builds the built-in ``tiny`` base model and, in a temp dir: full fine-tunes of it (AdamW at
the reference agent's learning rate 2e-3, batch 32, on arith-lite's public split as
``Question: ...\\nAnswer: ...`` text) after each number of ``--steps``; the longest one again at
a 5x higher rate with weight decay 0.1 (the hardest fine-tune tried); a rank-8 LoRA trained on
the attention and MLP projections for 300 steps and merged into the base; ``tiny`` built
with another seed (an unrelated model of the same architecture and tokenizer); and the base
with each tensor's elements shuffled. Each is compared with the base by
:func:`agent2rl.integrity.identity.check_identity` and one table row printed: median, min
cosine, the share of parameters above ``MIN_COSINE`` and the decision. The thresholds in
``agent2rl/integrity/identity.py`` are chosen from this table.

Uses the public split only (``generate_split`` with the train seed); nothing under
AGENT2RL_HOME is touched.
"""

from __future__ import annotations

import argparse
import random
import shutil
import tempfile
import time
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import nn
from transformers import AutoModelForCausalLM, AutoTokenizer

from agent2rl.integrity.identity import MIN_COSINE, check_identity
from agent2rl.models.tiny import build_tiny
from agent2rl.tasks.arith_lite import TRAIN_SEED, generate_split


def texts(n: int = 2000) -> list[str]:
    return [
        f"Question: {p['question']}\nAnswer: {p['answer']}" for p in generate_split(TRAIN_SEED, n)
    ]


def batches(tokenizer, rows: list[str], batch: int, seed: int):
    rng = random.Random(seed)
    while True:
        chunk = rng.sample(rows, batch)
        enc = tokenizer(chunk, return_tensors="pt", padding=True)
        labels = enc["input_ids"].masked_fill(enc["attention_mask"] == 0, -100)
        yield enc["input_ids"], enc["attention_mask"], labels


def save(model, tokenizer, src: Path, dest: Path) -> Path:
    model.save_pretrained(dest, safe_serialization=True)
    tokenizer.save_pretrained(dest)
    for f in src.glob("generation_config.json"):
        shutil.copy(f, dest / f.name)
    return dest


def train(model, tokenizer, rows, steps: int, lr: float, wd: float, params=None) -> None:
    opt = torch.optim.AdamW(params or model.parameters(), lr=lr, weight_decay=wd)
    model.train()
    data = batches(tokenizer, rows, 32, seed=steps)
    for _ in range(steps):
        ids, mask, labels = next(data)
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
    model.eval()


def fine_tune(base: Path, dest: Path, rows, steps: int, lr: float, wd: float = 0.0) -> Path:
    tok = AutoTokenizer.from_pretrained(base)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    train(model, tok, rows, steps, lr, wd)
    return save(model, tok, base, dest)


class LoRA(nn.Module):
    """``W + B @ A * scale`` as a weight parametrisation (``W`` frozen)."""

    def __init__(self, out_f: int, in_f: int, rank: int = 8, alpha: float = 16.0) -> None:
        super().__init__()
        self.A = nn.Parameter(torch.randn(rank, in_f) / in_f**0.5)
        self.B = nn.Parameter(torch.zeros(out_f, rank))
        self.scale = alpha / rank

    def forward(self, w: torch.Tensor) -> torch.Tensor:
        return w + self.B @ self.A * self.scale


def lora(base: Path, dest: Path, rows, steps: int, lr: float) -> Path:
    from torch.nn.utils import parametrize

    tok = AutoTokenizer.from_pretrained(base)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    for p in model.parameters():
        p.requires_grad_(False)
    adapters = []
    for name, mod in model.named_modules():
        if isinstance(mod, nn.Linear) and name.split(".")[-1].endswith("proj"):
            adapter = LoRA(*mod.weight.shape)
            parametrize.register_parametrization(mod, "weight", adapter)
            adapters += [adapter.A, adapter.B]
    train(model, tok, rows, steps, lr, 0.0, params=adapters)
    for mod in model.modules():
        if parametrize.is_parametrized(mod):
            parametrize.remove_parametrizations(mod, "weight", leave_parametrized=True)
    return save(model, tok, base, dest)


def shuffled(base: Path, dest: Path) -> Path:
    shutil.copytree(base, dest)
    g = torch.Generator().manual_seed(0)
    tensors = load_file(base / "model.safetensors")
    out = {
        k: v.flatten()[torch.randperm(v.numel(), generator=g)].view_as(v)
        for k, v in tensors.items()
    }
    save_file(out, dest / "model.safetensors", metadata={"format": "pt"})
    return dest


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--steps", default="5,300,1500", help="full fine-tune lengths, comma-separated")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    steps = [int(s) for s in args.steps.split(",")]
    rows = texts()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        base = build_tiny(root / "base", seed=0)
        cases: list[tuple[str, Path]] = []
        for n in steps:
            t0 = time.time()
            cases.append(
                (
                    f"full fine-tune, {n} steps at lr 2e-3",
                    fine_tune(base, root / f"ft{n}", rows, n, 2e-3),
                )
            )
            print(f"  trained {n} steps in {time.time() - t0:.0f}s", flush=True)
        n = max(steps)
        cases.append(
            (
                f"full fine-tune, {n} steps, lr 1e-2, wd .1",
                fine_tune(base, root / "hot", rows, n, 1e-2, 0.1),
            )
        )
        cases.append(
            ("base + trained rank-8 LoRA, merged", lora(base, root / "lora", rows, 300, 2e-3))
        )
        cases.append(("tiny built with seed 1 (not derived)", build_tiny(root / "seed1", seed=1)))
        cases.append(("base weights permuted within each tensor", shuffled(base, root / "perm")))
        print(
            f"\n{'submission':44s} {'median cos':>10s} {'min cos':>8s} {'rel L2':>7s} "
            f"{'share>=' + str(MIN_COSINE):>12s} derived  seconds"
        )
        for label, path in cases:
            r = check_identity(path, base)
            print(
                f"{label:44s} {r.median_cosine:10.3f} {r.min_cosine:8.3f} {r.median_rel_l2:7.3f} "
                f"{r.related_share:12.2f} {str(r.derived):7s} {r.seconds:7.3f}"
            )


if __name__ == "__main__":
    main()
