"""The built-in ``tiny`` base model: offline, deterministic, CPU-sized.

A ~1.1M-parameter Llama-architecture causal LM with random weights from a fixed seed and a
character-level tokenizer built offline (printable ASCII plus newline and tab). We use a Llama
config on purpose: a ``qwen2`` model type makes ``AutoTokenizer`` swap in Qwen2's byte-level
pre-tokenizer, which would silently change the ids.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

TINY_VERSION = "1"
_SPECIAL = ["<pad>", "<s>", "</s>", "<unk>"]
_CHARS = ["\n", "\t"] + [chr(c) for c in range(32, 127)]


def _build_tokenizer():
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate(_SPECIAL + _CHARS)}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    # Every character is its own token: digits stay digits, which arithmetic needs.
    core.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    core.decoder = decoders.Fuse()
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        pad_token="<pad>",
        model_max_length=512,
    )
    return tok


def build_tiny(dest: Path, seed: int = 0) -> Path:
    """Build the tiny model into ``dest`` (atomically: temp dir + rename) and return it.

    Idempotent: an existing complete ``dest`` is returned untouched.
    """
    dest = Path(dest)
    if (dest / "config.json").exists() and (dest / "model.safetensors").exists():
        return dest
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = _build_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=128,
        intermediate_size=512,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=512,
        tie_word_embeddings=True,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).to(torch.float32)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".tiny-", dir=dest.parent))
    try:
        model.save_pretrained(tmp, safe_serialization=True)
        tok.save_pretrained(tmp)
        (tmp / "agent2rl_model.json").write_text(
            json.dumps({"name": "tiny", "version": TINY_VERSION, "seed": seed}) + "\n"
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
