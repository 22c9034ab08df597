"""What the ``tiny`` model's tokenizer learns (``agent2rl.models.tokenizer``), as JSON.

Builds the tokenizer as the model store does (:func:`build_tokenizer` at its default
``VOCAB_SIZE``) and writes: the vocabulary size asked for, the size learned (training stops
when the corpus has no pair left to merge twice), the merges learned, and tokens per
character on text the tokenizer was not trained on (the same generators, another seed):
arith-lite prompts as the grader writes them and alfworld-lite-style transcripts.
Deterministic: the same figures on every machine (only ``machine`` and the time differ).

    python benchmarks/tiny_tokenizer.py

One build (deterministic, so repeats would give the same figures; ``build_s`` is one
sample). ``--quick`` is the same run (it takes seconds).
"""

from __future__ import annotations

import argparse
import json
import random
import time

import provenance

from agent2rl.models import tokenizer as tk
from agent2rl.tasks.arith_lite import FORMAT, generate_split

#: a seed the corpus (tokenizer._CORPUS_SEED) does not use, and how many texts of each kind
HELD_OUT_SEED = 1234
N = 500


def tokens_per_char(tok, texts: list[str]) -> float:
    chars = sum(map(len, texts))
    tokens = sum(len(tok.encode(t, add_special_tokens=False)) for t in texts)
    return round(tokens / chars, 4)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    provenance.add_arguments(ap, "tiny_tokenizer")
    args = ap.parse_args()
    rec = provenance.Recorder(args)
    start = time.perf_counter()
    tok = tk.build_tokenizer()
    built_s = time.perf_counter() - start
    base = 256 + len(tk.SPECIAL_TOKENS)
    prompts = [FORMAT.template.format(**row) for row in generate_split(HELD_OUT_SEED, N)]
    rng = random.Random(HELD_OUT_SEED)
    transcripts = [tk._alfworld_snippet(rng) for _ in range(N)]
    data = {
        "vocab_size_asked": tk.VOCAB_SIZE,
        "vocab_size_learned": len(tok),
        "merges_learned": len(tok) - base,
        "tokens_per_char": {
            "arith_lite_prompts": tokens_per_char(tok, prompts),
            "alfworld_lite_transcripts": tokens_per_char(tok, transcripts),
        },
        "held_out_texts_each": N,
        "build_s": round(built_s, 2),
    }
    print(json.dumps(data, indent=2))
    rec.write(data, repeats=1, split="none")


if __name__ == "__main__":
    main()
