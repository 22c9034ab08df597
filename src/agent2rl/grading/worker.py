"""The evaluation worker: one child process per evaluation.

``python -m agent2rl.grading.worker --spec JSON --model DIR --out DIR`` loads the model through
the inference backend, runs the task's evaluation on its private split and writes
``items.jsonl`` (per-item results) and ``result.json`` (score, n_items, seconds, eval_hash),
both atomically. Running in a child process means a crash, a hang or a memory blow-up of the
model cannot take the grading service down, and GPU memory is freed after every submission.
Evaluations on one device are serialised across runs by a file lock.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import sys
import time
import traceback
from pathlib import Path

from agent2rl.grading.evaluator import EvalSpec
from agent2rl.rundir import write_json_atomic


def device_name() -> str:
    import torch

    return "cuda0" if torch.cuda.is_available() else "cpu"


def evaluate_to(spec: EvalSpec, model_dir: Path, out: Path, store: Path, locks: Path) -> dict:
    """Evaluate and write results into ``out``; returns the result dict."""
    from agent2rl.inference import load_backend
    from agent2rl.tasks import get_task, prepare_task
    from agent2rl.tasks.prompt_format import write_jsonl

    task = get_task(spec.task, spec.task_options)
    prepared = prepare_task(task, store)
    locks.mkdir(parents=True, exist_ok=True)
    with open(locks / f"eval-{device_name()}.lock", "w") as lock:
        waited = time.time()
        fcntl.flock(lock, fcntl.LOCK_EX)
        waited = time.time() - waited
        backend = load_backend(model_dir, spec.backend)
        try:
            result = task.evaluate(backend, prepared, limit=spec.limit)
            eval_hash = task.eval_hash(backend.describe())
        finally:
            backend.close()
    write_jsonl(out / "items.jsonl", [i.to_dict() for i in result.items])
    summary = {
        "score": result.score,
        "n_items": result.n_items,
        "seconds": result.seconds,
        "eval_hash": eval_hash,
        "lock_wait_s": waited,
        "details": result.details,
    }
    write_json_atomic(out / "result.json", summary)
    return summary


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--spec", required=True, help="an EvalSpec as JSON")
    ap.add_argument("--model", required=True, type=Path)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--store", required=True, type=Path)
    ap.add_argument("--locks", required=True, type=Path)
    args = ap.parse_args(argv)
    try:
        summary = evaluate_to(
            EvalSpec.from_json(args.spec), args.model, args.out, args.store, args.locks
        )
    except Exception as err:  # the parent reads error.json and records a failed submission
        traceback.print_exc()
        write_json_atomic(
            args.out / "error.json",
            {
                "error": f"{type(err).__name__}: {str(err).splitlines()[0][:500]}"
                if str(err)
                else type(err).__name__
            },
        )
        return 1
    print(json.dumps(summary), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
