"""The transformers backend's decode thread policy on CPU: why a small decoding step runs on
one thread (``DECODE_SPLIT_MIN_FLOPS`` and ``DECODE_SPLIT_MIN_CACHE_BYTES`` in
``agent2rl.inference.transformers_backend``).

    python benchmarks/decode_threads.py

writes ``docs/figures/data/decode_threads.json`` (the figure as published); options:
``[--repeats 3] [--out PATH] [--quick]``.

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

Every timing is taken ``--repeats`` times (3), the variants compared interleaved in each
repeat so that drift falls on both; times are summaries (median and range from 3 samples, the
samples below) and speed-ups are the per-repeat ratios. Split ``none``: no item is graded
(the generation prompts are arith-lite's test prompts, timed, never scored). The file is
written through ``benchmarks/provenance.py`` (command, commit, date, machine, load).

``--quick``: the smallest model shape only, 16 arith-lite prompts, one prompt length (8 rows
of 64 tokens), one repeat (about a minute; the file is marked quick and is no figure).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import provenance

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


def child_steps(repeats: int, quick: bool) -> dict:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    threads = torch.get_num_threads()
    steps = 8 if quick else 40
    rows = []
    for hidden, mlp in SHAPES[:1] if quick else SHAPES:
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
        ms: dict[int, list[float]] = {threads: [], 1: []}
        for n in ms:  # warm-up, each thread count
            torch.set_num_threads(n)
            timed(model, ids, 2)
        for r in range(repeats):  # interleaved, so that drift falls on both
            for n in (threads, 1) if r % 2 == 0 else (1, threads):
                torch.set_num_threads(n)
                step = (timed(model, ids, steps + 1) - timed(model, ids, 1)) / steps
                ms[n].append(1e3 * step)
        torch.set_num_threads(threads)
        rows.append(
            {
                "weights": weights,
                "gflop_per_step": round(2 * 64 * weights / 1e9, 3),
                "step_ms_all_threads": provenance.summarize(ms[threads], 2),
                "step_ms_1_threads": provenance.summarize(ms[1], 2),
                # all threads' time over one thread's: above 1, one thread is faster
                "one_thread_speedup": provenance.ratio(ms[threads], ms[1]),
            }
        )
    return {"threads": threads, "steps_timed": steps, "shapes": rows}


def child_generate(repeats: int, quick: bool) -> dict:
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
        secs: dict[str, list[float]] = {label: [] for label in labels}
        texts: dict = {}
        backend.generate(prompts[:8], settings)
        for r in range(repeats):  # interleaved, so that drift falls on both
            for label in labels if r % 2 == 0 else labels[::-1]:
                tb.DECODE_SPLIT_MIN_FLOPS, tb.DECODE_SPLIT_MIN_CACHE_BYTES = variants[label]
                t = time.perf_counter()
                texts[label] = backend.generate(prompts, settings)
                secs[label].append(time.perf_counter() - t)
        tb.DECODE_SPLIT_MIN_FLOPS, tb.DECODE_SPLIT_MIN_CACHE_BYTES = policy
        a, b = labels
        return {
            f"{a}_s": provenance.summarize(secs[a]),
            f"{b}_s": provenance.summarize(secs[b]),
            # b's time over a's, per repeat: above 1, a is faster
            "speedup": provenance.ratio(secs[b], secs[a]),
            "identical_completions": texts[a] == texts[b],
        }

    items = generate_split(TEST_SEED, 16 if quick else 300)
    prompts = [FORMAT.template.format(question=r["question"]) for r in items]
    arith = compare(
        prompts,
        GenerationSettings(max_new_tokens=FORMAT.max_new_tokens, stop=FORMAT.stop, batch_size=64),
        ("policy", "all_threads"),
    )
    words = "go to the drawer 1 open it take the mug from the shelf put it in 2".split()
    rng = random.Random(0)
    lengths = []
    n_rows = 8 if quick else 48
    for n in (64,) if quick else (64, 128, 256, 472):
        rows = [" ".join(rng.choice(words) for _ in range(n + 40)) for _ in range(n_rows)]
        ids = backend.tokenizer(rows, add_special_tokens=False)["input_ids"]
        rows = [backend.tokenizer.decode(i[:n]) for i in ids]  # about n tokens each
        row = compare(
            rows,
            GenerationSettings(max_new_tokens=40, batch_size=64),
            ("one_thread", "all_threads"),
        )
        cache = backend._cache_bytes(n_rows, n + 40)
        row |= {"prompt_tokens": n, "rows": n_rows, "cache_mib": round(cache / 2**20, 1)}
        row["policy"] = "one thread" if backend.decode_threads(n_rows, n + 40) == 1 else "all"
        lengths.append(row)
    return {"arith": arith, "lengths": lengths}


def run_child(part: str, busy: int, repeats: int, quick: bool) -> dict:
    env = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE", "PYTHONPATH": str(ROOT / "src")}
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(busy)]
    flags = ["--repeats", str(repeats)] + (["--quick"] if quick else [])
    try:
        proc = subprocess.run(
            [sys.executable, __file__, "--child", part, *flags],
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


def shown(v: dict) -> str:
    """A summary as one short string: its median, or its samples below 3."""
    return str(v["median"]) if "median" in v else "/".join(str(x) for x in v["samples"])


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter
    )
    ap.add_argument("--repeats", type=int, default=3, help="samples of every timing")
    ap.add_argument("--child", choices=("steps", "generate"), help=argparse.SUPPRESS)
    provenance.add_arguments(ap, "decode_threads")
    args = ap.parse_args()
    if args.quick:
        args.repeats = 1
    if args.child:
        child = child_steps if args.child == "steps" else child_generate
        print(json.dumps(child(args.repeats, args.quick)))
        return 0
    rec = provenance.Recorder(args)
    os.environ["OMP_WAIT_POLICY"] = "PASSIVE"  # the children's (run_child), as the header says
    cores = os.cpu_count() or 1
    print(provenance.machine(), flush=True)
    steps = run_child("steps", 0, args.repeats, args.quick)
    for row in steps["shapes"]:
        print(
            f"step at 64 rows, {row['weights'] / 1e6:.1f}M weights: all {steps['threads']} "
            f"threads {shown(row['step_ms_all_threads'])} ms, "
            f"one {shown(row['step_ms_1_threads'])} ms",
            flush=True,
        )
    generation = {}
    for phase, busy in (("idle", 0), ("busy", cores)):
        generation[phase] = g = run_child("generate", busy, args.repeats, args.quick)
        a = g["arith"]
        print(
            f"{phase}: arith-lite generation, policy {shown(a['policy_s'])} s, all threads "
            f"{shown(a['all_threads_s'])} s ({shown(a['speedup'])}x); "
            f"identical: {a['identical_completions']}",
            flush=True,
        )
        for r in g["lengths"]:
            print(
                f"{phase}: {r['rows']} prompts of {r['prompt_tokens']} tokens "
                f"({r['cache_mib']} MiB of cache), one thread {shown(r['one_thread_s'])} s, "
                f"all {shown(r['all_threads_s'])} s ({shown(r['speedup'])}x), "
                f"policy: {r['policy']}",
                flush=True,
            )
    rec.write(
        {"busy_processes": cores, "steps": steps, "generation": generation},
        repeats=args.repeats,
        split="none",
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
