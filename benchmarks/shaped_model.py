"""A randomly initialised model with the layers of a real model, for latency figures on a
machine that cannot reach the Hugging Face hub.

    python benchmarks/shaped_model.py DEST [--shape qwen2.5-0.5b] [--seed 0]

The model is the tiny model's Llama architecture (:func:`agent2rl.models.tiny.save_model`)
with the hidden size, depth, heads and MLP width of the named model, and the tiny model's
tokenizer (648 tokens): the layers cost what the real model's cost, the embeddings and
output head far less (Qwen2.5's vocabulary is 151,936). Its text is noise and it never stops
early, so every completion runs to the task's output limit: a worst case for generation time.
Weights are saved in float32 (the backend casts them to bfloat16 on a GPU).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

#: the layer shapes of the models the paper grades (their config.json files)
SHAPES: dict[str, dict[str, int]] = {
    "qwen2.5-0.5b": {
        "hidden_size": 896,
        "intermediate_size": 4864,
        "num_hidden_layers": 24,
        "num_attention_heads": 14,
        "num_key_value_heads": 2,
        "head_dim": 64,
    },
    "qwen2.5-1.5b": {
        "hidden_size": 1536,
        "intermediate_size": 8960,
        "num_hidden_layers": 28,
        "num_attention_heads": 12,
        "num_key_value_heads": 2,
        "head_dim": 128,
    },
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dest", type=Path)
    ap.add_argument("--shape", choices=sorted(SHAPES), default="qwen2.5-0.5b")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    from agent2rl.models.tiny import save_model
    from agent2rl.models.tokenizer import build_tokenizer

    path = save_model(
        args.dest,
        build_tokenizer(),
        seed=args.seed,
        name=f"shaped-{args.shape}",
        max_position_embeddings=4096,
        **SHAPES[args.shape],
    )
    n = json.loads((path / "config.json").read_text())
    size = (path / "model.safetensors").stat().st_size
    print(f"{path}: {args.shape} layers ({n['num_hidden_layers']}), {size / 4e9:.2f}B parameters")
    return 0


if __name__ == "__main__":
    sys.exit(main())
