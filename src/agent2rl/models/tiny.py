"""The built-in ``tiny`` base model: offline, deterministic, CPU-sized.

A ~1.1M-parameter Llama-architecture causal LM (4 layers, hidden size 128) with random weights
from a fixed seed and the small byte-level BPE of :mod:`agent2rl.models.tokenizer` (single-digit
tokens, whole words). We use a Llama config on purpose: a ``qwen2`` model type makes
``AutoTokenizer`` swap in Qwen2's byte-level pre-tokenizer, which would silently change the
ids (the saved tokenizer is loaded as it was built: digits stay single tokens).

Version 2 replaced version 1's character-level tokenizer: with it, the reference agent's
SFT warm-up reached more on arith-lite's validation split in the same time (why:
:mod:`agent2rl.models.tokenizer`; ``benchmarks/lite_learning.py``, docs/figures.md).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

from agent2rl.models.tokenizer import build_tokenizer

#: keys the model store (``tiny-v<version>``): bump whenever the weights, the config or the
#: tokenizer change
TINY_VERSION = "2"
#: the architecture; the vocabulary size comes from the tokenizer
ARCHITECTURE: dict[str, Any] = {
    "hidden_size": 128,
    "intermediate_size": 512,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "max_position_embeddings": 512,
    "tie_word_embeddings": True,
}


def tiny_config(tokenizer, **overrides: Any):
    """The tiny model's ``LlamaConfig`` for ``tokenizer`` (:data:`ARCHITECTURE`, with
    ``overrides`` replacing any of its fields: benchmarks compare variants this way)."""
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=len(tokenizer),
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        **{**ARCHITECTURE, **overrides},
    )


def build_tiny(dest: Path, seed: int = 0) -> Path:
    """Build the tiny model into ``dest`` (atomically: temp dir + rename) and return it.

    Idempotent: an existing complete ``dest`` is returned untouched.
    """
    dest = Path(dest)
    if (dest / "config.json").exists() and (dest / "model.safetensors").exists():
        return dest
    return save_model(dest, build_tokenizer(), seed=seed)


def save_model(dest: Path, tokenizer, seed: int = 0, name: str = "tiny", **overrides: Any) -> Path:
    """A randomly initialised (from ``seed``) model for ``tokenizer`` with :func:`tiny_config`
    (plus ``overrides``), saved with its tokenizer into ``dest`` atomically; replaces an
    existing ``dest``."""
    import torch
    from transformers import LlamaForCausalLM

    dest = Path(dest)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(tiny_config(tokenizer, **overrides)).to(torch.float32)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".tiny-", dir=dest.parent))
    try:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        (tmp / "agent2rl_model.json").write_text(
            json.dumps({"name": name, "version": TINY_VERSION, "seed": seed}) + "\n"
        )
        for f in tmp.iterdir():
            f.chmod(0o644)
        tmp.chmod(0o755)  # mkdtemp makes 0700; agents may run as another user
        if dest.exists():
            shutil.rmtree(dest)
        tmp.rename(dest)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return dest
