"""What the ``tiny`` model's tokenizer learns (``agent2rl.models.tokenizer``), as JSON.

Builds the tokenizer as the model store does (:func:`build_tokenizer` at its default
``VOCAB_SIZE``) and writes: the vocabulary size asked for, the size learned (training stops
when the corpus has no pair left to merge twice), the merges learned, and tokens per
character on text the tokenizer was not trained on (the same generators, another seed):
arith-lite prompts as the grader writes them and alfworld-lite-style transcripts.
Deterministic: the same figures on every machine (only ``machine`` and the time differ).

    python benchmarks/tiny_tokenizer.py [--out docs/figures/data/tiny_tokenizer.json]
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import time
from pathlib import Path

from spine import machine  # the machine line every benchmark prints

from agent2rl.models import tokenizer as tk
from agent2rl.tasks.arith_lite import FORMAT, generate_split

#: a seed the corpus (tokenizer._CORPUS_SEED) does not use, and how many texts of each kind
HELD_OUT_SEED = 1234
N = 500


def tokens_per_char(tok, texts: list[str]) -> float:
    chars = sum(map(len, texts))
    tokens = sum(len(tok.encode(t, add_special_tokens=False)) for t in texts)
    return round(tokens / chars, 4)


def git_commit() -> str:
    """The checkout's commit (``+dirty`` with uncommitted changes), or "unknown"."""
    try:
        rev = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "src/agent2rl/models"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return rev + ("+dirty" if dirty else "")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("docs/figures/data/tiny_tokenizer.json"))
    args = ap.parse_args()
    print(machine())
    start = time.perf_counter()
    tok = tk.build_tokenizer()
    built_s = time.perf_counter() - start
    base = 256 + len(tk.SPECIAL_TOKENS)
    prompts = [FORMAT.template.format(**row) for row in generate_split(HELD_OUT_SEED, N)]
    rng = random.Random(HELD_OUT_SEED)
    transcripts = [tk._alfworld_snippet(rng) for _ in range(N)]
    data = {
        "benchmark": "tiny_tokenizer",
        "command": " ".join(["python", "benchmarks/tiny_tokenizer.py", *sys.argv[1:]]),
        "commit": git_commit(),
        "machine": machine(),
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
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
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(data, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
