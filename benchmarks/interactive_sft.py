"""What the reference agent's SFT warm-up wins on an interactive lite task: the tiny model
fine-tuned a fixed number of steps on the walkthrough rows the agent builds
(``episodes.sft_rows``), then played on the task's *validation* games (never the graded ones:
this benchmark chooses the reference agent's and the lite tasks' defaults), for each variant
of task options and learning-rate schedule asked for.

    python benchmarks/interactive_sft.py [--task alfworld-lite] [--steps 900] [--lr 2e-3]
        [--batch 8] [--schedule constant linear] [--variant n_train=300 --variant ...]
        [--save DIR]

A ``--variant`` is a space-separated list of ``key=value`` task options (values read as JSON
where they parse, else as strings; an empty string: the task's defaults), e.g.
``--task deepsearch-lite --variant n_regions=14 --variant n_regions=60``.

``--save DIR`` keeps the one fine-tuned model (one ``--schedule``, at most one
``--variant``), e.g. as a trained submission for ``benchmarks/grading_latency.py --model DIR``.

Steps, not seconds, so that variants compare on a shared machine (the agent itself trains for
a time and decays its rate by the clock). One variant is one draw: the margin between variants
is a few games, so read several runs before trusting a difference. Each variant runs in its
own process (the agent's code reads its workspace from the environment at import). Uses the
default AGENT2RL_HOME, so the games are generated once and shared with real runs.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from agent_workspace import enter_workspace, run_variant
from provenance import machine  # the machine every figure names


def parse_variant(text: str) -> dict[str, Any]:
    """``"a=1 b=x"`` -> ``{"a": 1, "b": "x"}`` (JSON values where they parse)."""
    options: dict[str, Any] = {}
    for part in text.split():
        key, sep, value = part.partition("=")
        if not sep:
            raise SystemExit(f"--variant {text!r}: write key=value pairs")
        try:
            options[key] = json.loads(value)
        except json.JSONDecodeError:
            options[key] = value
    return options


def one(
    task_name: str,
    options: dict,
    schedule: str,
    steps: int,
    lr: float,
    batch: int,
    work: Path,
    seed: int = 0,
) -> dict:
    """Fine-tune and grade one variant in this process; the result as a dict (``won_ids``:
    the validation games won, for paired comparisons). ``seed``: the trainer's (the order
    the rows are read in), so that a second draw of a variant differs from the first."""
    from agent2rl.inference import load_backend
    from agent2rl.models import resolve_model
    from agent2rl.settings import load_settings
    from agent2rl.tasks import get_task, prepare_task

    settings = load_settings()
    task = get_task(task_name, options)
    prepared = prepare_task(task, settings.task_store)
    model_ref = resolve_model("tiny", settings.model_store)
    tiny = model_ref.path
    # The workspace's data/ as a run builds it for the agent.
    enter_workspace(work, task, prepared, model_ref)
    import os
    import random

    import episodes
    from common import sft
    from transformers import AutoModelForCausalLM, AutoTokenizer

    os.chdir(work)  # the agent's trainer writes under ./code, as in its workspace
    tokenizer = AutoTokenizer.from_pretrained(tiny)
    model = AutoModelForCausalLM.from_pretrained(tiny)
    rows = episodes.sft_rows(
        episodes.Prompter(tokenizer, episodes.episode_format()), random.Random(0)
    )
    started = time.time()
    # the agent's own SFT, ended by the step count (its rate decays to 0 by then if linear)
    model = sft(model, tokenizer, rows, 1e9, lr, batch_size=batch,
                decay=schedule == "linear", max_steps=steps, seed=seed)  # fmt: skip
    train_s = time.time() - started
    out = work / "model"
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    backend = load_backend(out, "transformers")
    try:
        started = time.time()
        result = task.evaluate(backend, prepared, split="validation")
        eval_s = time.time() - started
    finally:
        backend.close()
    return {
        "rows": len(rows),
        "train_s": round(train_s, 1),
        "won": sum(i.correct for i in result.items),
        "won_ids": sorted(i.id for i in result.items if i.correct),
        "games": result.n_items,
        "score": round(result.score, 2),
        "eval_s": round(eval_s, 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--task", default="alfworld-lite")
    ap.add_argument("--steps", type=int, default=900)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0, help="the trainer's seed (row order)")
    ap.add_argument(
        "--schedule", nargs="+", choices=["constant", "linear"], default=["constant", "linear"]
    )
    ap.add_argument("--variant", action="append", default=None, help="key=value task options")
    ap.add_argument(
        "--save", type=Path, help="keep the fine-tuned model in this new directory (one run)"
    )
    ap.add_argument("--one", nargs=2, metavar=("OPTIONS_JSON", "SCHEDULE"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.save is not None and not args.one:
        if len(args.variant or [""]) * len(args.schedule) != 1:
            ap.error("--save keeps one model: give one --schedule and at most one --variant")
        if args.save.exists():
            ap.error(f"--save {args.save}: already exists; name a new directory")
        args.save = args.save.resolve()
    if args.one:
        with tempfile.TemporaryDirectory() as work:
            r = one(
                args.task, json.loads(args.one[0]), args.one[1], args.steps, args.lr,
                args.batch, Path(work), args.seed,
            )  # fmt: skip
            if args.save is not None:
                shutil.copytree(Path(work) / "model", args.save)
        print("RESULT " + json.dumps(r))
        return
    print(f"machine: {machine()}")
    print(f"{args.task}: {args.steps} SFT steps at lr {args.lr:g}, batch {args.batch}")
    for variant in args.variant or [""]:
        options = parse_variant(variant)
        for schedule in args.schedule:
            cmd = [sys.executable, __file__, "--task", args.task, "--one", json.dumps(options)]
            cmd += [schedule, "--steps", str(args.steps), "--lr", str(args.lr)]
            cmd += ["--batch", str(args.batch), "--seed", str(args.seed)]
            cmd += ["--save", str(args.save)] if args.save is not None else []
            r, error = run_variant(cmd)
            label = f"{variant or 'defaults'}, {schedule} rate"
            if r is None:
                print(f"{label}: failed\n{error}")
                continue
            print(
                f"{label} ({r['rows']} rows): won {r['won']} of {r['games']} validation games "
                f"(score {r['score']:.2f}); SFT {r['train_s']:.0f}s, grading {r['eval_s']:.0f}s",
                flush=True,
            )


if __name__ == "__main__":
    main()
