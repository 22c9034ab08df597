"""The transformers backend's decode thread policy on CPU: why a small decoding step runs on
one thread (``DECODE_SPLIT_MIN_FLOPS`` and ``DECODE_SPLIT_MIN_CACHE_BYTES`` in
``agent2rl.inference.transformers_backend``).

    python benchmarks/decode_threads.py [--out docs/figures/data/decode_threads.json]

Every measurement runs in a child process with the grader's environment
(``OMP_WAIT_POLICY=PASSIVE``: OpenMP threads sleep between operations), the thread counts
compared in the same child:

- ``steps``: one decoding step at 64 rows (the mean over 40 steps of ``generate`` with a
  static cache, minus the prompt's pass), on one thread and on all, for random Llama models
  of 1.1M (the tiny model's shape) to 17M weights, 4 layers each.
- ``generation``: the backend's ``generate`` with the tiny model, idle and with as many busy
  processes as cores beside it (an agent training on the same machine): arith-lite's 300
  test prompts (batch 64, its stop strings), the policy against every step on all threads;
  then 48 prompts of 64 to 472 tokens and 40 new tokens, one thread against all, with the
  key/value cache each step reads and what the policy picks. Completions are compared.

Figures are the best of 3 calls. JSON goes to ``--out`` with the command, commit, date and
machine.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from spine import machine, write_figures

ROOT = Path(__file__).resolve().parent.parent
#: (hidden size, MLP width) of the random 4-layer models timed per step
SHAPES = ((128, 512), (256, 1024), (384, 1536), (512, 2048))


def timed(model, ids, new: int) -> float:
    """Seconds for ``generate`` of exactly ``new`` tokens after ``ids`` (a static cache)."""
    import torch

    t = time.perf_counter()
    with torch.inference_mode():
        model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=new,
            min_new_tokens=new,
            do_sample=False,
            cache_implementation="static",
        )
    return time.perf_counter() - t


def child_steps() -> dict:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    threads = torch.get_num_threads()
    rows = []
    for hidden, mlp in SHAPES:
        config = LlamaConfig(
            vocab_size=648,
            hidden_size=hidden,
            intermediate_size=mlp,
            num_hidden_layers=4,
            num_attention_heads=hidden // 32,
            num_key_value_heads=hidden // 32,
            max_position_embeddings=512,
        )
        model = LlamaForCausalLM(config).eval()
        weights = sum(p.numel() for n, p in model.named_parameters() if "embed" not in n)
        ids = torch.randint(0, 648, (64, 30))
        row = {"weights": weights, "gflop_per_step": round(2 * 64 * weights / 1e9, 3)}
        for n in (threads, 1):
            torch.set_num_threads(n)
            timed(model, ids, 2)
            step = min((timed(model, ids, 41) - timed(model, ids, 1)) / 40 for _ in range(3))
            key = "step_ms_1_threads" if n == 1 else "step_ms_all_threads"
            row[key] = round(1e3 * step, 2)
        torch.set_num_threads(threads)
        row["one_thread_speedup"] = round(row["step_ms_all_threads"] / row["step_ms_1_threads"], 2)
        rows.append(row)
    return {"threads": threads, "shapes": rows}


def child_generate() -> dict:
    """The backend's ``generate`` with the tiny model: arith-lite's prompts (policy against
    all threads), then prompts of 64 to 472 tokens (one thread against all)."""
    import random

    from agent2rl.inference import load_backend, transformers_backend
    from agent2rl.inference.backend import GenerationSettings
    from agent2rl.models import resolve_model
    from agent2rl.settings import load_settings
    from agent2rl.tasks.arith_lite import FORMAT, TEST_SEED, generate_split

    tb = transformers_backend
    model = resolve_model("tiny", load_settings().model_store)
    backend = load_backend(model.path, "transformers")
    policy = (tb.DECODE_SPLIT_MIN_FLOPS, tb.DECODE_SPLIT_MIN_CACHE_BYTES)
    variants = {"policy": policy, "one_thread": (float("inf"),) * 2, "all_threads": (0, 0)}

    def compare(prompts: list[str], settings: GenerationSettings, labels: tuple) -> dict:
        best: dict = {}
        texts: dict = {}
        backend.generate(prompts[:8], settings)
        for _ in range(3):  # interleaved, so that drift falls on both
            for label in labels:
                tb.DECODE_SPLIT_MIN_FLOPS, tb.DECODE_SPLIT_MIN_CACHE_BYTES = variants[label]
                t = time.perf_counter()
                texts[label] = backend.generate(prompts, settings)
                best[label] = min(best.get(label, float("inf")), time.perf_counter() - t)
        tb.DECODE_SPLIT_MIN_FLOPS, tb.DECODE_SPLIT_MIN_CACHE_BYTES = policy
        a, b = labels
        return {
            f"{a}_s": round(best[a], 3),
            f"{b}_s": round(best[b], 3),
            "speedup": round(best[b] / best[a], 2),
            "identical_completions": texts[a] == texts[b],
        }

    items = generate_split(TEST_SEED, 300)
    prompts = [FORMAT.template.format(question=r["question"]) for r in items]
    arith = compare(
        prompts,
        GenerationSettings(max_new_tokens=FORMAT.max_new_tokens, stop=FORMAT.stop, batch_size=64),
        ("policy", "all_threads"),
    )
    words = "go to the drawer 1 open it take the mug from the shelf put it in 2".split()
    rng = random.Random(0)
    lengths = []
    for n in (64, 128, 256, 472):
        rows = [" ".join(rng.choice(words) for _ in range(n + 40)) for _ in range(48)]
        ids = backend.tokenizer(rows, add_special_tokens=False)["input_ids"]
        rows = [backend.tokenizer.decode(i[:n]) for i in ids]  # about n tokens each
        row = compare(
            rows,
            GenerationSettings(max_new_tokens=40, batch_size=64),
            ("one_thread", "all_threads"),
        )
        cache = backend._cache_bytes(48, n + 40)
        row |= {"prompt_tokens": n, "rows": 48, "cache_mib": round(cache / 2**20, 1)}
        row["policy"] = "one thread" if backend.decode_threads(48, n + 40) == 1 else "all"
        lengths.append(row)
    return {"arith": arith, "lengths": lengths}


def run_child(part: str, busy: int) -> dict:
    env = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE", "PYTHONPATH": str(ROOT / "src")}
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(busy)]
    try:
        proc = subprocess.run(
            [sys.executable, __file__, "--child", part],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--child", choices=("steps", "generate"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child_steps() if args.child == "steps" else child_generate()))
        return 0
    cores = os.cpu_count() or 1
    print(machine(), flush=True)
    steps = run_child("steps", 0)
    for row in steps["shapes"]:
        print(
            f"step at 64 rows, {row['weights'] / 1e6:.1f}M weights: all {steps['threads']} "
            f"threads {row['step_ms_all_threads']} ms, one {row['step_ms_1_threads']} ms",
            flush=True,
        )
    generation = {}
    for phase, busy in (("idle", 0), ("busy", cores)):
        generation[phase] = g = run_child("generate", busy)
        a = g["arith"]
        print(
            f"{phase}: arith-lite generation, policy {a['policy_s']} s, all threads "
            f"{a['all_threads_s']} s ({a['speedup']}x); identical: {a['identical_completions']}",
            flush=True,
        )
        for r in g["lengths"]:
            print(
                f"{phase}: 48 prompts of {r['prompt_tokens']} tokens ({r['cache_mib']} MiB of "
                f"cache), one thread {r['one_thread_s']} s, all {r['all_threads_s']} s "
                f"({r['speedup']}x), policy: {r['policy']}",
                flush=True,
            )
    if args.out:
        write_figures(
            args.out,
            {"busy_processes": cores, "steps": steps, "generation": generation},
        )
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
