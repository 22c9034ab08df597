"""Should vLLM's CPU build grade the lite track? Our two backends side by side on one model:
start-up, one weight reload, generation, memory and per-item agreement (issue #37 item 3).

    .venv-vllm/bin/python benchmarks/vllm_cpu_engine.py [--n 300] [--repeats 3] [--sft-steps 300]
        [--out docs/figures/data/vllm_cpu_engine.json]

Run with ``.venv-vllm``'s Python (``make setup-vllm``): it needs vLLM. Per repeat, in
alternating order, each backend (float32) loads the tiny model fine-tuned for ``--sft-steps``
steps on arith-lite's public split (the untrained model's logits are near-ties), generates
arith-lite's validation items with the task's settings, takes a perturbed copy's weights in
place (the warm grader's reload), and generates again. Memory is the resident set of the
backend's whole process tree (vLLM: this process plus its EngineCore and worker) after the
second generation. Figures are medians over repeats with their samples; agreement is per
item between the two backends. Nothing here is graded: validation items only.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from spine import machine, write_figures

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


def summary(samples: list[float]) -> dict[str, Any]:
    out: dict[str, Any] = {"samples": [round(s, 4) for s in samples]}
    if len(samples) >= 3:
        out |= {"median": statistics.median(samples), "min": min(samples), "max": max(samples)}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=300, help="arith-lite validation items (max 300)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--sft-steps", type=int, default=300)
    ap.add_argument("--out", type=Path, default=Path("docs/figures/data/vllm_cpu_engine.json"))
    args = ap.parse_args()
    os.environ.setdefault("AGENT2RL_HOME", tempfile.mkdtemp(prefix="vllm-cpu-home-"))
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from support.finetune import fine_tune

    from agent2rl.inference.backend import GenerationSettings
    from agent2rl.models import resolve_model
    from agent2rl.orchestration.scratch_run import perturbed_copy
    from agent2rl.settings import load_settings
    from agent2rl.tasks.arith_lite import FORMAT, VALIDATION_SEED, generate_split

    work = Path(tempfile.mkdtemp(prefix="vllm-cpu-engine-"))
    tiny = resolve_model("tiny", load_settings().model_store).path
    model = fine_tune(tiny, work / "trained", steps=args.sft_steps)
    other = perturbed_copy(model, work / "other", seed=7, scale=0.05)
    rows = generate_split(VALIDATION_SEED, args.n)
    prompts = [FORMAT.template.format(question=r["question"]) for r in rows]
    settings = GenerationSettings(max_new_tokens=FORMAT.max_new_tokens, stop=FORMAT.stop)
    print(machine(), flush=True)
    load_before = os.getloadavg()
    runs: dict[str, list[dict[str, Any]]] = {k: [] for k in BACKENDS}
    for i in range(args.repeats):
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
            key: summary([r[key] for r in rs])
            for key in ("load_s", "generate_s", "reload_s", "rss_bytes")
        }
        for kind, rs in runs.items()
    }
    ratio = [
        t["generate_s"] / v["generate_s"]
        for t, v in zip(runs["transformers"], runs["vllm"], strict=True)
    ]
    data = {
        "split": "validation",
        "items": len(prompts),
        "repeats": args.repeats,
        "load_average_before": load_before,
        "load_average_after": os.getloadavg(),
        "backends": figures,
        "generate_ratio_transformers_over_vllm": summary(ratio),
        "identical_items": f"{agree}/{len(prompts)}",
        "identical_items_after_reload": f"{agree_reloaded}/{len(prompts)}",
        "summary": [
            {
                "backend": kind,
                "load_s": figures[kind]["load_s"].get("median"),
                "generate_s": figures[kind]["generate_s"].get("median"),
                "reload_s": figures[kind]["reload_s"].get("median"),
                "rss_gib": (figures[kind]["rss_bytes"].get("median") or 0) / 2**30,
            }
            for kind in BACKENDS
        ],
    }
    write_figures(args.out, data)
    print(
        f"agreement {agree}/{len(prompts)} (after reload {agree_reloaded}/{len(prompts)}); "
        f"generation transformers/vllm x{statistics.median(ratio):.2f}; wrote {args.out}",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
