"""How good and how fast the ``alpaca-lite`` judge is (SmolLM2-135M-Instruct on CPU).

Prints, for the lite protocol (compact template in two phrasings, both orders: the task's
judge) and for AlpacaEval's own protocol on the same model (the official template, one
seeded order):

1. **degraded outputs**: on 100 items, how often the judge prefers the reference (the
   weak answer the graded split compares with) over an emptied, truncated and
   word-shuffled copy of it (the issue asks for at least 95%), and how often it prefers the
   public split's kind of answer (a complete, correct sentence) over the weak reference
   (what makes the task learnable). ``--items validation`` (the default) takes the
   validation split, where the protocol's phrasings were chosen; ``--items heldout`` takes
   public instructions never looked at while choosing anything (the split's distinct
   instructions 100-199 in order: 0-99 served as the held-out check of task version 2's
   phrasing and then to compare more phrasings). ``--bases weak good`` also degrades the
   good answer (a correct sentence made worse is surely worse; a hedge or a wrong guess
   cut short, "Maybe 30?" to "Maybe", not always);
2. **agreement with the official judge**: on pairs of AlpacaEval's official annotations
   (GPT-4-turbo's ``weighted_alpaca_eval_gpt4_turbo`` preferences for alpaca-7b,
   gemma-2b-it and phi-2 against gpt4_turbo, from ``--eval-dir``), the share of pairs where
   both judges prefer the same output (official draws left out) and the correlation of the
   two soft preferences. A 135M model on 2 cores cannot read all 2,415 pairs (GPT-4-turbo's
   answers run to thousands of characters) in minutes: ``--pairs`` pairs are drawn (seed 0,
   the three models in turn) from those whose two outputs total at most ``--max-chars``
   characters; the official judge's win rate on that subset is printed beside it;
3. **throughput**: pairs per second (a lite pair is four forward passes), and the wall
   time of grading one ``alpaca-lite`` submission (the built-in ``tiny`` model, untrained,
   through the task's own ``evaluate``: generation and judging of the 100 graded items,
   a fresh judgment cache, the judge loaded once before).

    python benchmarks/alpaca_lite_judge.py [--eval-dir DIR] [--pairs 200] [--max-chars 1500]
        [--threads N] [--items validation|heldout] [--bases weak [good]]
        [--skip degraded agreement grading]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _rate(values: list[bool]) -> str:
    return f"{100 * sum(values) / len(values):5.1f}% ({sum(values)}/{len(values)})"


#: which distinct public instructions ``--items heldout`` takes (see the module docstring)
HELDOUT = slice(100, 200)


def judged_items(items: str) -> list[dict]:
    """100 items with both answers (``weak``, ``good``): the validation split, or the
    held-out public instructions (each instruction's first row, in the split's order)."""
    from agent2rl.tasks.alpaca_lite import split_items

    splits = split_items()
    if items == "validation":
        return splits["validation"]
    first: dict[str, dict] = {}
    for item in splits["public"]:
        first.setdefault(item["instruction"], item)
    return list(first.values())[HELDOUT]


def degraded_figures(
    judges: dict, rows: list[dict], items: str, bases: tuple[str, ...] = ("weak",)
) -> dict[str, float]:
    """Per judge: the rate of answer-over-degraded-answer for each base answer (``weak``:
    the reference; ``good``: the correct sentence) and good-over-weak; returns each judge's
    pairs/s on these short pairs."""
    from agent2rl.scoring.judges import Pair
    from agent2rl.tasks.alpaca_lite.data import DEGRADATIONS, degrade

    speed: dict[str, float] = {}
    for label, judge in judges.items():
        n_pairs, seconds = 0, 0.0
        for base in bases:
            print(f"\n[{label}] degraded {base} answers, {len(rows)} {items} items")
            overall: list[bool] = []
            for how in DEGRADATIONS:
                pairs = [Pair(r["instruction"], r[base], degrade(r[base], how)) for r in rows]
                started = time.perf_counter()
                prefs = judge.preferences(pairs)
                seconds += time.perf_counter() - started
                n_pairs += len(pairs)
                wins = [p < 1.5 for p in prefs]  # NaN compares False: not a win
                overall += wins
                print(f"  {base} answer preferred over {how:9s}: {_rate(wins)}")
            print(f"  {base} answer preferred, all degradations : {_rate(overall)}")
        pairs = [Pair(r["instruction"], r["weak"], r["good"]) for r in rows]
        started = time.perf_counter()
        prefs = judge.preferences(pairs)
        seconds += time.perf_counter() - started
        n_pairs += len(pairs)
        print(f"  good answer preferred over the weak reference: {_rate([p > 1.5 for p in prefs])}")
        print(f"  mean preference for the good answer: {statistics.fmean(prefs) - 1:.3f}")
        speed[label] = n_pairs / seconds
        print(f"  {n_pairs} pairs in {seconds:.1f} s: {speed[label]:.2f} pairs/s")
    return speed


def agreement_figures(judges: dict, eval_dir: Path, n_pairs: int, max_chars: int) -> None:
    """Agreement of each judge with the official annotations on ``n_pairs`` pairs drawn
    (seed 0) from those whose two outputs total at most ``max_chars`` characters, the three
    models in turn."""
    import random

    from agent2rl.scoring.judges import Pair

    models = sorted(p.name for p in (eval_dir / "models").iterdir() if p.is_dir())
    per_model = []
    for model in models:
        path = eval_dir / "models" / model / "weighted_alpaca_eval_gpt4_turbo_annotations.json"
        rows = [
            r
            for r in json.loads(path.read_text())
            if r.get("preference") is not None
            and not math.isnan(float(r["preference"]))
            and len(r["output_1"]) + len(r["output_2"]) <= max_chars
        ]
        random.Random(0).shuffle(rows)
        per_model.append(rows)
    chosen: list[dict] = []
    for k in range(n_pairs):
        rows = per_model[k % len(per_model)]
        if k // len(per_model) < len(rows):
            chosen.append(rows[k // len(per_model)])
    official = [float(r["preference"]) for r in chosen]
    eligible = sum(len(rows) for rows in per_model)
    print(
        f"\nagreement with the official judge: {len(chosen)} pairs ({', '.join(models)} in "
        f"turn, drawn from the {eligible} whose two outputs total <= {max_chars} characters); "
        f"official win rate there {100 * statistics.fmean(p - 1 for p in official):.1f}%"
    )
    pairs = [Pair(r["instruction"], r["output_1"], r["output_2"]) for r in chosen]
    for label, judge in judges.items():
        started = time.perf_counter()
        prefs = judge.preferences(pairs)
        seconds = time.perf_counter() - started
        both = [
            (o, p) for o, p in zip(official, prefs, strict=True) if o != 1.5 and not math.isnan(p)
        ]
        agree = [(o > 1.5) == (p > 1.5) for o, p in both]
        judged = [(o, p) for o, p in zip(official, prefs, strict=True) if not math.isnan(p)]
        r = statistics.correlation([o for o, _ in judged], [p for _, p in judged])
        majority = max(sum(o > 1.5 for o, _ in both), sum(o < 1.5 for o, _ in both)) / len(both)
        print(
            f"  [{label}] same verdict: {_rate(agree)} (always naming the official majority "
            f"side: {100 * majority:.1f}%); Pearson r of the preferences {r:+.3f}; its win "
            f"rate {100 * statistics.fmean(p - 1 for _, p in judged):.1f}%; "
            f"{len(pairs) / seconds:.2f} pairs/s"
        )


def grading_figures(home: Path) -> None:
    """One alpaca-lite grading of the untrained tiny model, timed as the grader runs it."""
    from agent2rl.inference import load_backend
    from agent2rl.models.tiny import build_tiny
    from agent2rl.tasks import get_task, prepare_task

    task = get_task("alpaca-lite")
    prepared = prepare_task(task, home / "tasks")
    model = build_tiny(home / "models" / "tiny")
    task.record_dir = home / "grading"
    task.record_dir.mkdir(parents=True, exist_ok=True)
    backend = load_backend(model, "transformers")
    started = time.perf_counter()
    result = task.evaluate(backend, prepared)
    seconds = time.perf_counter() - started
    totals, details = result.details["judge"], result.details
    print(
        f"\none alpaca-lite grading (tiny, untrained; {result.n_items} items, fresh cache): "
        f"{seconds:.1f} s wall (generation + {totals['requests']} judge forward passes, "
        f"{totals['total_tokens']} judge tokens); win rate {result.score:.2f}, avg length "
        f"{details['avg_length']:.0f} vs reference {details['reference_avg_length']:.0f}"
    )
    started = time.perf_counter()
    again = task.evaluate(backend, prepared)
    print(
        f"the same grading again: {time.perf_counter() - started:.1f} s, "
        f"{again.details['judge']['requests']} judge requests, "
        f"{again.details['judge']['cache_hits']} cache hits"
    )
    backend.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--eval-dir", type=Path, default=REPO.parent / "shared/data/alpaca_eval")
    ap.add_argument("--pairs", type=int, default=200, help="official pairs for the agreement")
    ap.add_argument("--max-chars", type=int, default=1500, help="of an agreement pair's outputs")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--items", choices=("validation", "heldout"), default="validation")
    ap.add_argument("--bases", nargs="+", choices=("weak", "good"), default=["weak"])
    ap.add_argument("--skip", nargs="*", default=(), choices=("degraded", "agreement", "grading"))
    args = ap.parse_args(argv)
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        os.environ["AGENT2RL_HOME"] = str(home)
        from agent2rl.scoring.judges.protocol import ALPACA_EVAL
        from agent2rl.scoring.judges.smollm2 import LITE, smollm2_judge

        judges = {
            "lite protocol": smollm2_judge(judge_protocol=LITE),
            "official template, one order": smollm2_judge(judge_protocol=ALPACA_EVAL),
        }
        started = time.perf_counter()
        judges["lite protocol"].backend.load()
        print(
            f"SmolLM2-135M-Instruct (GGUF Q4_1) loaded in {time.perf_counter() - started:.1f} s; "
            f"torch threads {torch.get_num_threads()}, {os.cpu_count()} CPUs"
        )
        if "degraded" not in args.skip:
            degraded_figures(judges, judged_items(args.items), args.items, tuple(args.bases))
        if "agreement" not in args.skip:
            if (args.eval_dir / "models").is_dir():
                agreement_figures(judges, args.eval_dir, args.pairs, args.max_chars)
            else:
                print(f"\nagreement: skipped ({args.eval_dir}/models not found: --eval-dir)")
        if "grading" not in args.skip:
            grading_figures(home)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
