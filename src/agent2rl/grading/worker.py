"""The evaluation worker: one child process per evaluation.

``python -m agent2rl.grading.worker --spec JSON --model DIR --out DIR`` loads the model through
the inference backend, runs the task's evaluation on its private split and writes
``items.jsonl`` (per-item results) and ``result.json`` (score, n_items, seconds, eval_hash),
both atomically. Running in a child process means a crash, a hang or a memory blow-up of the
model cannot take the grading service down, and GPU memory is freed after every submission.
Evaluations on one device are serialised across runs by a file lock per physical device
(:func:`device_lock_names`); the worker writes ``started.json`` once it holds them.

On an exception it writes ``error.json``: ``{"error": one line, "failure": "model" |
"harness", "stage": "setup" | "load" | "evaluate"}``. :func:`failure_kind` decides whose fault
it was from the stage it happened in (see :mod:`agent2rl.grading.evaluator`).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Literal

from agent2rl.errors import ModelFault
from agent2rl.files import write_json_atomic, write_jsonl
from agent2rl.grading.evaluator import STARTED_FILE, EvalSpec, FailureKind
from agent2rl.inference import load_backend
from agent2rl.inference.backend import BackendConfig
from agent2rl.tasks import get_task, prepare_task


def device_lock_names(
    backend: BackendConfig, visible: str | None, cuda: bool, uuids: dict[str, str] | None = None
) -> list[str]:
    """The names of the device locks an evaluation with ``backend`` must hold, sorted (the
    order they are taken in, so two workers never deadlock).

    ``cuda`` False: ``["cpu"]`` (every CPU evaluation on the host shares one). On CUDA, the
    backend uses the first ``tensor_parallel_size`` visible devices under vLLM (or ``auto``,
    which picks vLLM on a GPU when it is installed), else the first one; each lock names the
    *physical* device: the entry of ``visible`` (``CUDA_VISIBLE_DEVICES``: indices, UUIDs or MIG
    ids) at that position, an index mapped to its UUID through ``uuids`` (from
    :func:`gpu_uuids`) when known, so that ``0`` and ``GPU-...`` name one lock. Without
    ``visible`` the visible devices are the host's, by index. Edge case: without ``uuids`` a
    device named once by index and once by UUID gets two locks.
    """
    if not cuda:
        return ["cpu"]
    n = max(1, backend.tensor_parallel_size) if backend.kind in ("vllm", "auto") else 1
    entries = [e.strip() for e in visible.split(",")] if visible is not None else []
    entries = [e for e in entries if e] or [str(i) for i in range(n)]
    names = []
    for entry in entries[:n]:
        physical = (uuids or {}).get(entry, entry)
        names.append("gpu-" + "".join(c if c.isalnum() or c in "-_" else "_" for c in physical))
    return sorted(set(names))


def gpu_uuids() -> dict[str, str]:
    """``nvidia-smi``'s index -> UUID map ({} when it is missing or fails). Asked through the
    tool so that this process does not initialise CUDA before the backend does (vLLM forks)."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=index,uuid", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    pairs = (line.split(",", 1) for line in out.splitlines() if "," in line)
    return {i.strip(): u.strip() for i, u in pairs}


def device_locks(backend: BackendConfig) -> list[str]:
    """:func:`device_lock_names` for this process's environment."""
    import torch

    cuda = torch.cuda.is_available()
    return device_lock_names(
        backend, os.environ.get("CUDA_VISIBLE_DEVICES"), cuda, gpu_uuids() if cuda else None
    )


Stage = Literal["setup", "load", "evaluate"]


class StageFailure(Exception):
    """An exception of :func:`evaluate_to`, tagged with the stage it happened in."""

    def __init__(self, stage: Stage, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.stage, self.cause = stage, cause


#: Messages of exceptions that are the machine's state, not the model's (CUDA raises plain
#: RuntimeErrors for both kinds).
_RESOURCE_HINTS = ("out of memory", "cuda error", "cublas", "cudnn", "nccl", "no space left")


def _is_resource_error(err: BaseException) -> bool:
    if isinstance(err, MemoryError):
        return True
    text = f"{type(err).__name__} {err}".lower()
    return "outofmemory" in text.replace(" ", "") or any(h in text for h in _RESOURCE_HINTS)


def _from_jinja(err: BaseException) -> bool:
    # Only a model's own chat template is rendered with jinja2 during an evaluation (task
    # prompts are str.format templates). Named by module so the worker needs no jinja import.
    return any(c.__module__.split(".")[0] == "jinja2" for c in type(err).__mro__)


def failure_kind(stage: Stage, err: BaseException) -> FailureKind:
    """Whose fault an exception of ``stage`` was.

    - ``setup`` (task data, the device lock): always ``harness``;
    - ``load`` (the submission's config, weights and tokenizer): ``model``, unless the
      machine ran out of memory or the accelerator failed (``harness``);
    - ``evaluate``: ``model`` for :class:`~agent2rl.errors.ModelFault` (a scorer's refusal)
      and for an error rendering the submission's own chat template; anything else
      (generation, a judge, the scorer) is ``harness``.
    """
    if stage == "load":
        return "harness" if _is_resource_error(err) else "model"
    if stage == "evaluate" and (isinstance(err, ModelFault) or _from_jinja(err)):
        return "model"
    return "harness"


def evaluate_to(spec: EvalSpec, model_dir: Path, out: Path, store: Path, locks: Path) -> dict:
    """Evaluate and write results into ``out``; returns the result dict. Any exception comes
    out as :class:`StageFailure` naming the stage it happened in."""
    stage: Stage = "setup"
    try:
        task = get_task(spec.task, spec.task_options)
        task.record_dir = out  # a scorer's private records (a judge's usage) land here
        prepared = prepare_task(task, store)
        # Imported before the device is held (seconds on a loaded host): the device lock
        # and the evaluation's timeout are for loading the model and evaluating, not this.
        from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: F401

        locks.mkdir(parents=True, exist_ok=True)
        names = device_locks(spec.backend)
        with contextlib.ExitStack() as held:
            waited = time.time()
            for name in names:  # sorted: two workers never hold one each and wait for the other
                lock = held.enter_context(open(locks / f"eval-{name}.lock", "w"))
                fcntl.flock(lock, fcntl.LOCK_EX)
            waited = time.time() - waited
            # The parent's evaluation timeout starts now: waiting for a busy device is not
            # the evaluation's time (see agent2rl.grading.evaluator.run_evaluation).
            write_json_atomic(
                out / STARTED_FILE,
                {"pid": os.getpid(), "devices": names, "lock_wait_s": waited, "at": time.time()},
            )
            stage = "load"
            backend = load_backend(model_dir, spec.backend)
            stage = "evaluate"
            try:
                result = task.evaluate(backend, prepared, limit=spec.limit, split=spec.split)
                eval_hash = task.eval_hash(backend.describe())
            finally:
                backend.close()
    except Exception as err:
        raise StageFailure(stage, err) from err
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
    except StageFailure as failed:  # the parent reads error.json and records the failure
        traceback.print_exc()
        err = failed.cause
        first = next((line for line in str(err).splitlines() if line.strip()), "")
        write_json_atomic(
            args.out / "error.json",
            {
                "error": f"{type(err).__name__}: {first[:500]}" if first else type(err).__name__,
                "failure": failure_kind(failed.stage, err),
                "stage": failed.stage,
            },
        )
        return 1
    print(json.dumps(summary), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
