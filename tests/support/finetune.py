"""A real, small fine-tune of a model directory (plain torch AdamW on arith-lite's public split),
for tests that need a genuinely trained submission rather than perturbed weights."""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from agent2rl.tasks.arith_lite import generate_splits


def training_texts(n: int = 500) -> list[str]:
    """``Question/Answer`` texts of the first ``n`` rows of arith-lite's public split, which
    holds no question of the test or validation split."""
    return [f"Question: {p['question']}\nAnswer: {p['answer']}" for p in generate_splits()[0][:n]]


def fine_tune(base: Path, dest: Path, steps: int, lr: float = 2e-3, batch: int = 16) -> Path:
    """Train ``base`` for ``steps`` AdamW steps at ``lr`` on :func:`training_texts` and save
    it (weights, tokenizer, generation config) into ``dest``."""
    rows = training_texts()
    tok = AutoTokenizer.from_pretrained(base)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    rng = random.Random(0)
    model.train()
    for _ in range(steps):
        enc = tok(rng.sample(rows, batch), return_tensors="pt", padding=True)
        labels = enc["input_ids"].masked_fill(enc["attention_mask"] == 0, -100)
        ids, mask = enc["input_ids"], enc["attention_mask"]
        model(input_ids=ids, attention_mask=mask, labels=labels).loss.backward()
        opt.step()
        opt.zero_grad()
    model.save_pretrained(dest, safe_serialization=True)
    tok.save_pretrained(dest)
    for f in Path(base).glob("generation_config.json"):
        shutil.copy(f, Path(dest) / f.name)
    return Path(dest)
