"""The figures pipeline: every data file under ``docs/figures/data/`` and the command that
writes it, run one after another.

    python benchmarks/figures.py [--quick] [--only NAME ...] [--allow-dirty] [--list]

``make figures`` runs every figure this machine can measure, each into its data file (a
checkout with uncommitted code is refused, as each command refuses it: see
``benchmarks/provenance.py``), then rewrites the README's demo block from ``demo.json``.
``make figures-quick`` (CI) runs every command with ``--quick`` (tiny sizes, written to a
temporary folder and checked, never into the docs) to show that each still runs.

A figure that needs what this machine lacks is skipped with the reason: ``vllm`` runs with
``.venv-vllm/bin/python`` (``make setup-vllm``); ``gpu`` needs a CUDA device. Exit status 1
when any figure failed, 0 otherwise (skips included).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from provenance import DATA, HEADER, REPO

VLLM_PYTHON = REPO / ".venv-vllm" / "bin" / "python"


@dataclass(frozen=True)
class Figure:
    """One data file (``name``.json) and the command that writes it."""

    name: str
    script: str
    args: tuple[str, ...] = ()
    #: added under --quick, for a command whose own --quick does not size everything down
    quick_args: tuple[str, ...] = ()
    #: None, "vllm" (vLLM's CPU build or CUDA build, in .venv-vllm), "gpu", or "hours" (a
    #: study that takes hours on 2 cores: run only when named with --only)
    needs: str | None = None
    #: roughly, on a 2-core CPU as measured here (for --list)
    minutes: float = 1.0


FIGURES: tuple[Figure, ...] = (
    Figure("tiny_tokenizer", "tiny_tokenizer.py", minutes=0.5),
    Figure("grading_service", "grading_service.py", minutes=4),
    Figure("humaneval_grading", "humaneval_grading.py", minutes=1),
    Figure("eval_throughput", "eval_throughput.py", minutes=2),
    Figure("decode_threads", "decode_threads.py", minutes=4),
    Figure("grading_latency", "grading_latency.py", ("--part", "solvers"), minutes=30),
    Figure(
        "grading_cold_warm",
        "grading_latency.py",
        ("--part", "cold-warm", "--cold-warm-out", "{out}"),
        minutes=16,
    ),
    Figure("interactive_service", "interactive_service.py", minutes=12),
    Figure("lite_learning", "lite_learning.py", minutes=8),
    Figure("viewer_scale", "viewer_scale.py", minutes=3),
    Figure("demo", "demo.py", minutes=18),
    Figure("vllm_cpu_engine", "vllm_cpu_engine.py", needs="vllm", minutes=4),
    Figure(
        "feedback_protocols",
        "feedback_protocols.py",
        quick_args=("--budget", "20s", "--repeats", "1"),
        needs="hours",
        minutes=40,
    ),
    Figure(
        "rl_over_sft",
        "rl_over_sft.py",
        quick_args=("--sft-steps", "4", "--grpo-steps", "2", "--variants", "grpo"),
        needs="hours",
        minutes=120,
    ),
    Figure(
        "validation_defaults",
        "validation_defaults.py",
        quick_args=("--groups", "dpo", "--sft-steps", "4", "--dpo-steps", "2", "--nll", "1"),
        needs="hours",
        minutes=240,
    ),
    Figure(
        "grading_cold_warm_vllm_cpu",
        "grading_latency.py",
        ("--part", "cold-warm", "--tasks", "arith-lite", "alfworld-lite")
        + ("--backends", "transformers", "vllm", "--cold-warm-out", "{out}"),
        needs="vllm",
        minutes=25,
    ),
)


def missing(fig: Figure, named: bool) -> str | None:
    """Why ``fig`` is not measured here; None when it is. ``named``: asked for by --only."""
    if fig.needs == "hours" and not named:
        return f"about {fig.minutes / 60:g} hours on 2 cores: run it with --only {fig.name}"
    if fig.needs == "vllm" and not VLLM_PYTHON.exists():
        return "needs vLLM in .venv-vllm (make setup-vllm)"
    if fig.needs == "gpu":
        import torch

        if not torch.cuda.is_available():
            return "needs a CUDA GPU"
    return None


def command(fig: Figure, out: Path, quick: bool, allow_dirty: bool) -> list[str]:
    python = str(VLLM_PYTHON if fig.needs == "vllm" else Path(sys.executable))
    args = [a.replace("{out}", str(out)) for a in fig.args + (fig.quick_args if quick else ())]
    flags = ["--quick"] if quick else []
    flags += ["--allow-dirty"] if allow_dirty else []
    return [python, f"benchmarks/{fig.script}", *args, "--out", str(out), *flags]


def check(path: Path, quick: bool) -> str | None:
    """What is wrong with a freshly written data file; None when it holds the header."""
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        return f"no readable data file at {path} ({err})"
    lacking = [k for k in HEADER if k not in data]
    if lacking:
        return f"{path.name} lacks {', '.join(lacking)}"
    if data["quick"] is not quick:
        return f"{path.name} says quick={data['quick']}"
    return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="tiny sizes, into a temp folder")
    ap.add_argument("--only", nargs="+", choices=[f.name for f in FIGURES], default=None)
    ap.add_argument("--allow-dirty", action="store_true", help="passed to every command")
    ap.add_argument("--list", action="store_true", help="print the figures and exit")
    args = ap.parse_args(argv)
    figures = [f for f in FIGURES if args.only is None or f.name in args.only]
    if args.list:
        for f in figures:
            print(f"{f.name:24} benchmarks/{f.script} ~{f.minutes:g} min {f.needs or ''}")
        return 0
    out_dir = Path(tempfile.mkdtemp(prefix="agent2rl-figures-")) if args.quick else DATA
    failed: list[str] = []
    for fig in figures:
        reason = missing(fig, named=args.only is not None or args.quick)
        if reason:
            print(f"figures: {fig.name}: skipped ({reason})", flush=True)
            continue
        out = out_dir / f"{fig.name}.json"
        cmd = command(fig, out, args.quick, args.allow_dirty)
        print(f"figures: {fig.name}: {' '.join(cmd[1:])}", flush=True)
        started = time.time()
        rc = subprocess.run(cmd, cwd=REPO).returncode
        problem = f"exit status {rc}" if rc else check(out, args.quick)
        took = time.time() - started
        if problem:
            failed.append(fig.name)
            print(f"figures: {fig.name}: FAILED after {took:.0f}s: {problem}", flush=True)
        else:
            print(f"figures: {fig.name}: ok in {took:.0f}s", flush=True)
    if not args.quick and (args.only is None or "demo" in args.only) and "demo" not in failed:
        from readme import write_demo_block

        write_demo_block()
    print(f"figures: {len(figures) - len(failed)} of {len(figures)} not failed", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
