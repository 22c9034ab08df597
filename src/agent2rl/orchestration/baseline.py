"""The baseline: the base model's score, measured before the budget starts and cached.

The cache key is (task, task version, evaluation settings, base model fingerprint — weights,
config and tokenizer —, backend); a failed baseline is never cached. Runs that need the same
baseline at once (a study) compute it once: the first holds a lock per cache key while it
evaluates, the others wait on it and then copy its result.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from pathlib import Path

from agent2rl.dataset import Split
from agent2rl.errors import UserError
from agent2rl.files import read_json
from agent2rl.grading.evaluator import EvalSpec, run_evaluation
from agent2rl.grading.ledger import Ledger
from agent2rl.inference.backend import BackendConfig
from agent2rl.locks import file_lock
from agent2rl.models.resolve import ModelRef
from agent2rl.rundir import RunPaths
from agent2rl.settings import Settings
from agent2rl.tasks.base import Task

#: what an evaluation leaves that the cache keeps
_RESULT_FILES = ("result.json", "items.jsonl")


def baseline_key(
    task: Task, model: ModelRef, backend: BackendConfig, split: Split = "private"
) -> str:
    """The cache key. ``auto`` is resolved first: a home shared by CPU and GPU machines must
    not hand a transformers baseline to a vLLM run. Another split than ``private`` is part
    of the key (the private split's key is unchanged, so its cache stays valid)."""
    engine = {
        "kind": backend.resolved_kind(),
        "dtype": backend.dtype,
        "max_model_len": backend.max_model_len,
    }
    if backend.decoding is not None:  # greedy keeps the keys (and caches) it had
        engine["decoding"] = backend.decoding
    key: dict = {"task": task.eval_settings(), "model": model.fingerprint, "backend": engine}
    if split != "private":
        key["split"] = split
    blob = json.dumps(key, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:24]


def measure_baseline(
    task: Task,
    model: ModelRef,
    settings: Settings,
    paths: RunPaths,
    backend: BackendConfig | None = None,
    split: Split = "private",
) -> dict:
    """Evaluate the base model on ``split`` (or reuse the cached result) into
    ``grading/baseline/`` (``grading/baseline-<split>/`` for another split: the validation
    protocol's, :mod:`agent2rl.grading.final`). Returns the ledger's baseline record
    (``items_path`` relative to the run directory); a :class:`UserError` if the base model
    cannot be evaluated."""
    backend = backend or BackendConfig()
    key = baseline_key(task, model, backend, split)
    cache = settings.baseline_cache / key
    out = paths.baseline_dir
    if split != "private":
        out = out.with_name(f"{out.name}-{split}")
    with file_lock(settings.locks / f"baseline-{key}.lock"):
        cached = all((cache / name).exists() for name in _RESULT_FILES)
        if cached:
            out.mkdir(parents=True, exist_ok=True)
            _copy_results(cache, out)
        else:
            spec = EvalSpec(task.name, task.opts, backend, split=split)
            outcome = run_evaluation(spec, model.path, out, settings, timeout_s=task.eval_timeout_s)
            if outcome.error:
                raise UserError(
                    f"the base model could not be evaluated ({outcome.error}); "
                    f"see {out / 'eval.log'}"
                )
            _store(cache, out)
    result = read_json(out / "result.json")
    return {
        "score": result["score"],
        "n_items": result["n_items"],
        "items_path": str((out / "items.jsonl").relative_to(paths.root)),
        "eval_seconds": result["seconds"],
        "eval_hash": result["eval_hash"],
        "cached": cached,
        "split": split,
    }


def _store(cache: Path, out: Path) -> None:
    cache.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".baseline-", dir=cache.parent))
    _copy_results(out, tmp)
    try:
        tmp.rename(cache)
    except OSError:  # another run cached it first; theirs is as good as ours
        shutil.rmtree(tmp, ignore_errors=True)


def _copy_results(src: Path, dst: Path) -> None:
    for name in _RESULT_FILES:
        shutil.copyfile(src / name, dst / name)


def record_baseline(ledger: Ledger, task: Task, model: ModelRef, baseline: dict) -> None:
    """Write what the grading service needs before it starts: the baseline record and the
    base model's identity (for copy detection). The service never changes these."""
    ledger.set_meta("baseline", baseline)
    ledger.set_meta("base_weights_hash", model.weights_hash)
    ledger.set_meta("base_fingerprint", model.fingerprint)
    ledger.set_meta("task", task.name)
    ledger.set_meta("task_version", task.version)
