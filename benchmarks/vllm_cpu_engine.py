"""Should vLLM's CPU build grade the lite track? Our two backends side by side on one model:
start-up, one weight reload, generation, memory and per-item agreement (issue #37 item 3).

    .venv-vllm/bin/python benchmarks/vllm_cpu_engine.py

writes ``docs/figures/data/vllm_cpu_engine.json`` (the figure as published: 300 items, 3
repeats, the tiny model fine-tuned 300 steps); options: ``[--n 300] [--repeats 3]
[--sft-steps 300] [--out PATH] [--quick]``. The pipeline (``benchmarks/figures.py``) runs it
as ``python benchmarks/vllm_cpu_engine.py`` with ``.venv-vllm``'s Python (``make
setup-vllm``): it needs vLLM.

Per repeat, in alternating order, each backend (float32) loads the tiny model fine-tuned for
``--sft-steps`` steps on arith-lite's public split (the untrained model's logits are
near-ties), generates the first ``--n`` items of arith-lite's validation split with the
task's settings, takes a perturbed copy's weights in place (the warm grader's reload), and
generates again. Memory is the resident set of the backend's whole process tree (vLLM: this
process plus its EngineCore and worker) after the second generation. Every figure is a
summary over the repeats (median and range from 3, the samples below); the generation ratio
is per repeat; agreement is per item between the two backends. Split ``validation``:
nothing is scored, and no graded item is generated.

``--quick``: 16 items, one repeat, 20 fine-tuning steps (a minute or two, most of it vLLM's
engine start; the file is marked quick and is no figure).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import provenance

BACKENDS = ("transformers", "vllm")


def tree_rss(pid: int) -> int:
    """Resident bytes of ``pid`` and all its descendants (from /proc)."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    page = os.sysconf("SC_PAGE_SIZE")
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()
            pages = int(Path(f"/proc/{name}/statm").read_text().split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(int(stat[1]), []).append(int(name))
        rss[int(name)] = pages * page
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        total += rss.get(p, 0)
        todo += children.get(p, [])
    return total


def one(kind: str, model: Path, other: Path, prompts: list[str], settings: Any) -> dict[str, Any]:
    """Load, generate, reload ``other``'s weights in place, generate: seconds and memory."""
    from agent2rl.grading.worker import reload_weights
    from agent2rl.inference.backend import BackendConfig, load_backend

    t0 = time.perf_counter()
    backend = load_backend(model, BackendConfig(kind=kind, dtype="float32"), warm=True)
    load_s = time.perf_counter() - t0
    try:
        t0 = time.perf_counter()
        first = backend.generate(prompts, settings)
        generate_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        assert reload_weights(backend, other)
        reload_s = time.perf_counter() - t0
        second = backend.generate(prompts, settings)
        rss = tree_rss(os.getpid())
    finally:
        backend.close()
    return {
        "load_s": load_s,
        "generate_s": generate_s,
        "reload_s": reload_s,
        "rss_bytes": rss,
        "outputs": first,
        "reloaded_outputs": second,
    }


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter
    )
    ap.add_argument("--n", type=int, default=300, help="arith-lite validation items (max 300)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--sft-steps", type=int, default=300)
    provenance.add_arguments(ap, "vllm_cpu_engine")
    args = ap.parse_args()
    if args.quick:
        args.n, args.repeats, args.sft_steps = 16, 1, 20
    rec = provenance.Recorder(args)
    os.environ.setdefault("AGENT2RL_HOME", tempfile.mkdtemp(prefix="vllm-cpu-home-"))
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from support.finetune import fine_tune

    from agent2rl.inference.backend import GenerationSettings
    from agent2rl.models import resolve_model
    from agent2rl.orchestration.scratch_run import perturbed_copy
    from agent2rl.settings import load_settings
    from agent2rl.tasks.arith_lite import (
        FORMAT,
        TEST_SEED,
        TEST_SIZE,
        VALIDATION_SEED,
        VALIDATION_SIZE,
        generate_split,
    )

    work = Path(tempfile.mkdtemp(prefix="vllm-cpu-engine-"))
    tiny = resolve_model("tiny", load_settings().model_store).path
    model = fine_tune(tiny, work / "trained", steps=args.sft_steps)
    other = perturbed_copy(model, work / "other", seed=7, scale=0.05)
    # the validation split as the task writes it (ArithLite.prepare: the test questions
    # excluded), its first n items
    test = {r["question"] for r in generate_split(TEST_SEED, TEST_SIZE)}
    rows = generate_split(VALIDATION_SEED, VALIDATION_SIZE, exclude=test)[: args.n]
    prompts = [FORMAT.template.format(question=r["question"]) for r in rows]
    settings = GenerationSettings(max_new_tokens=FORMAT.max_new_tokens, stop=FORMAT.stop)
    print(provenance.machine(), flush=True)
    runs: dict[str, list[dict[str, Any]]] = {k: [] for k in BACKENDS}
    loads: list[float] = []
    for i in range(args.repeats):
        loads.append(os.getloadavg()[0])
        for kind in BACKENDS if i % 2 == 0 else BACKENDS[::-1]:
            r = one(kind, model, other, prompts, settings)
            runs[kind].append(r)
            print(
                f"repeat {i} {kind}: load {r['load_s']:.2f}s, generate {r['generate_s']:.2f}s, "
                f"reload {r['reload_s']:.3f}s, rss {r['rss_bytes'] / 2**30:.2f} GiB",
                flush=True,
            )
    a, b = runs["transformers"][0], runs["vllm"][0]
    agree = sum(x == y for x, y in zip(a["outputs"], b["outputs"], strict=True))
    agree_reloaded = sum(
        x == y for x, y in zip(a["reloaded_outputs"], b["reloaded_outputs"], strict=True)
    )
    figures = {
        kind: {
            "load_s": provenance.summarize([r["load_s"] for r in rs]),
            "generate_s": provenance.summarize([r["generate_s"] for r in rs]),
            "reload_s": provenance.summarize([r["reload_s"] for r in rs], 4),
            "rss_gib": provenance.summarize([r["rss_bytes"] / 2**30 for r in rs]),
        }
        for kind, rs in runs.items()
    }
    ratio = provenance.ratio(
        [t["generate_s"] for t in runs["transformers"]], [v["generate_s"] for v in runs["vllm"]]
    )
    rec.write(
        {
            "items": len(prompts),
            "sft_steps": args.sft_steps,
            "load_average_per_repeat": loads,
            "backends": figures,
            "generate_ratio_transformers_over_vllm": ratio,
            "identical_items": f"{agree}/{len(prompts)}",
            "identical_items_after_reload": f"{agree_reloaded}/{len(prompts)}",
            "summary": [{"backend": kind, **figures[kind]} for kind in BACKENDS],
        },
        repeats=args.repeats,
        split="validation",
    )
    print(
        f"agreement {agree}/{len(prompts)} (after reload {agree_reloaded}/{len(prompts)}); "
        f"generation transformers/vllm {ratio.get('median', ratio['samples'])}x",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
