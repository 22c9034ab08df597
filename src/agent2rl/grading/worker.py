"""The evaluation worker: one child process per evaluation.

``python -m agent2rl.grading.worker --spec JSON --model DIR --out DIR`` loads the model through
the inference backend, runs the task's evaluation on its private split and writes
``items.jsonl`` (per-item results) and ``result.json`` (score, n_items, seconds, eval_hash),
both atomically. Running in a child process means a crash, a hang or a memory blow-up of the
model cannot take the grading service down, and GPU memory is freed after every submission.
Evaluations on one device are serialised across runs by a file lock per physical device
(:func:`device_lock_names`); the worker writes ``started.json`` once it holds them.

``--serve`` (the warm grader, :class:`agent2rl.grading.evaluator.WarmWorker`) keeps one such
process for a run (:func:`serve`, :class:`WarmState`), taking the device lock per evaluation;
a vLLM engine sleeps between evaluations under the rules of :mod:`agent2rl.inference.warm`.

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
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from agent2rl.devices import nvidia_smi
from agent2rl.errors import ModelFault
from agent2rl.files import write_json_atomic, write_jsonl
from agent2rl.grading.evaluator import STARTED_FILE, EvalSpec, FailureKind, describe
from agent2rl.inference import load_backend
from agent2rl.inference.backend import BackendConfig
from agent2rl.inference.tokenizer_check import TokenizerCheck
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
    physical = [(uuids or {}).get(entry, entry) for entry in entries[:n]]
    return sorted(
        {"gpu-" + "".join(c if c.isalnum() or c in "-_" else "_" for c in p) for p in physical}
    )


def gpu_uuids() -> dict[str, str]:
    """``nvidia-smi``'s index -> UUID map ({} when it is missing or fails)."""
    rows = nvidia_smi("--query-gpu=index,uuid") or []
    return {r[0]: r[1] for r in rows if len(r) == 2}


Stage = Literal["setup", "load", "evaluate"]

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


class _TimedBackend:
    """``backend`` with the time spent in its ``generate`` calls added up (``generate_s``),
    so that an evaluation's time splits into generation and the rest (scoring, the solver's
    own work, an environment's steps). ``check``, the submission's tokenizer check
    (:class:`~agent2rl.inference.tokenizer_check.TokenizerCheck`), runs on every prompt of a
    call before any is generated."""

    def __init__(self, backend: Any, check: Any = None) -> None:
        self._backend = backend
        self._check = check
        self.generate_s = 0.0

    def generate(self, prompts: list[str], settings: Any) -> list[str]:
        if self._check is not None:
            self._check.check(prompts)
        clock = time.perf_counter()
        try:
            return self._backend.generate(prompts, settings)
        finally:
            self.generate_s += time.perf_counter() - clock

    def __getattr__(self, name: str) -> Any:
        return getattr(self._backend, name)


@dataclass
class WarmState:
    """What a warm worker keeps between evaluations: the prepared task of one spec (with its
    kept environments, :attr:`~agent2rl.tasks.base.Task.keep_environments`), and the backend
    loaded for one model structure (config + generation config + tokenizer files,
    :func:`structure_fingerprint`), whose weights are reloaded in place for a submission of
    that structure (:func:`reload_weights`). Any failure drops the backend
    (a failed weight reload may have left it half-written), so the next evaluation loads
    afresh."""

    spec_json: str | None = None
    task: Any = None
    prepared: Any = None
    backend: Any = None
    structure: str | None = None
    #: what the backend was loaded with (:class:`~agent2rl.inference.warm.EngineKey`)
    key: Any = None
    loads: int = 0
    reloads: int = 0

    def drop_backend(self) -> None:
        backend, self.backend, self.structure, self.key = self.backend, None, None, None
        if backend is not None:
            with contextlib.suppress(Exception):
                backend.close()

    def drop_task(self) -> None:
        """End the task kept (its environment workers: :meth:`~agent2rl.tasks.base.Task.
        close`) and the backend with it."""
        self.drop_backend()
        task, self.task, self.prepared, self.spec_json = self.task, None, None, None
        if task is not None:
            with contextlib.suppress(Exception):
                task.close()


def structure_fingerprint(model_dir: Path) -> str:
    """SHA-256 over a model directory's non-weight files (config, generation config,
    tokenizer files and chat template): equal for two submissions that differ only in their
    weights, which a warm worker may then load into the model it holds."""
    from agent2rl.models.weights import model_fingerprint

    return model_fingerprint(model_dir, "structure-only")


def reload_weights(backend: Any, model_dir: Path) -> bool:
    """Load ``model_dir``'s safetensors into ``backend``'s model in place, as
    ``from_pretrained`` would have (same keys and shapes, cast to the model's dtype). Only a
    :class:`~agent2rl.inference.transformers_backend.TransformersBackend` can; False for any
    other backend (the caller loads afresh). Raises on a missing or unexpected key or a shape
    mismatch; the model may then be partly overwritten and must be dropped. Keys missing from
    the files are allowed only for parameters tied to another one (``lm_head`` tied to the
    embeddings), as ``from_pretrained`` allows them."""
    from agent2rl.inference.transformers_backend import TransformersBackend
    from agent2rl.inference.vllm_backend import VllmBackend

    if type(backend) is VllmBackend:  # the engine reloads from the directory itself
        backend.reload_weights(model_dir)
        return True
    if type(backend) is not TransformersBackend:
        return False
    import torch
    from safetensors.torch import load_file

    files = sorted(model_dir.glob("*.safetensors"))
    if not files:
        raise ValueError(f"no safetensors weights in {model_dir.name}")
    state: dict[str, Any] = {}
    for f in files:
        state.update(load_file(str(f), device="cpu"))
    model = backend.model
    own = model.state_dict()
    tied = _tied_names(model)
    missing = [k for k in own if k not in state and k not in tied]
    unexpected = [k for k in state if k not in own]
    if missing or unexpected:
        raise ValueError(
            f"weights do not match the model: missing {missing[:5]}, unexpected {unexpected[:5]}"
        )
    for name, tensor in state.items():
        if tuple(tensor.shape) != tuple(own[name].shape):
            raise ValueError(
                f"weight {name} has shape {tuple(tensor.shape)}, the model {tuple(own[name].shape)}"
            )
    with torch.no_grad():
        model.load_state_dict(state, strict=False)
        if tied:
            model.tie_weights()
    model.eval()
    return True


def _tied_names(model: Any) -> set[str]:
    """State-dict names that share storage with an earlier name (tied parameters)."""
    seen: set[int] = set()
    tied: set[str] = set()
    for name, tensor in model.state_dict(keep_vars=True).items():
        if tensor.data_ptr() in seen:
            tied.add(name)
        seen.add(tensor.data_ptr())
    return tied


def evaluate_to(
    spec: EvalSpec,
    model_dir: Path,
    out: Path,
    store: Path,
    locks: Path,
    warm: WarmState | None = None,
    requested_at: float | None = None,
) -> dict | None:
    """Evaluate and write results into ``out``; returns the result dict, or None after an
    exception, which is logged and written to ``out/error.json`` (the module docstring).

    ``warm``: a warm worker's state, reused and updated (the prepared task when the spec is
    the same; the loaded model when the submission's structure is the same, its weights then
    reloaded in place); None: a cold evaluation. ``requested_at``: when the parent asked for
    this evaluation (process start or request sent), for ``timings.process_start_s``.

    ``result.json`` carries ``timings`` (seconds): ``process_start_s`` (interpreter and
    imports, about 0 for a warm worker), ``setup_s`` (task data), ``lock_wait_s``, ``load_s``
    (``load`` says ``fresh`` or ``reload``), ``generate_s`` (inside the backend's generate
    calls) and ``score_s`` (the rest of the task's evaluation: scoring, solver, environment).
    """
    begun = time.time()
    timings: dict[str, Any] = {
        "process_start_s": max(0.0, begun - requested_at) if requested_at else None,
        "warm": warm is not None,
    }
    stage: Stage = "setup"
    try:
        task, prepared = _prepared_task(spec, store, warm)
        task.record_dir = out  # a scorer's private records (a judge's usage) land here
        # Imported before the device is held (seconds on a loaded host): the device lock
        # and the evaluation's timeout are for loading the model and evaluating, not this.
        from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: F401

        timings["setup_s"] = time.time() - begun
        # Held for this evaluation only, also in a warm worker: between evaluations other
        # runs may use the device (a warm model stays in memory meanwhile).
        with contextlib.ExitStack() as held:
            waited = timings["lock_wait_s"] = _hold_devices(held, locks, spec.backend, out)
            # Free GPU memory is measured for each submission (the agent's use changes): vLLM's
            # share sized to it, or transformers (devices.size_grader_memory). Still "setup":
            # a busy card is never the submission's fault.
            config = sized_backend(spec.backend, timings)
            stage = "load"
            clock = time.time()
            backend = _load(spec, config, model_dir, warm, timings)
            timings["load_s"] = time.time() - clock
            stage = "evaluate"
            result, eval_hash, decoding = _evaluate_task(
                task, prepared, spec, backend, model_dir, warm, timings
            )
    except Exception as err:
        if warm is not None:
            warm.drop_backend()
        traceback.print_exc()
        failure = {"error": describe(err, 500), "failure": failure_kind(stage, err), "stage": stage}
        write_json_atomic(out / "error.json", failure)
        return None
    write_jsonl(out / "items.jsonl", [i.to_dict() for i in result.items])
    summary = {
        "score": result.score,
        "n_items": result.n_items,
        "seconds": result.seconds,
        "eval_hash": eval_hash,
        "decoding": decoding,
        "lock_wait_s": waited,
        "details": result.details,
        "timings": timings,
        # the declared metrics' values, the score's first: how readers find its interval
        "metrics": result.metrics,
    }
    write_json_atomic(out / "result.json", summary)
    return summary


def _evaluate_task(
    task: Any,
    prepared: Any,
    spec: EvalSpec,
    backend: Any,
    model_dir: Path,
    warm: WarmState | None,
    timings: dict[str, Any],
) -> tuple[Any, str, Any]:
    """Run the task's evaluation on the loaded ``backend`` (closed after, or put to sleep
    in a warm worker); the result, the eval hash and the decoding settings, and
    ``generate_s``/``score_s`` added to ``timings``."""
    check = TokenizerCheck.of(model_dir, getattr(backend, "tokenizer", None))
    timed = _TimedBackend(backend, check)
    clock = time.time()
    try:
        result = task.evaluate(timed, prepared, limit=spec.limit, split=spec.split)
        eval_hash = task.eval_hash(backend.describe())
        # what the backend decoded with (None: agent2rl's greedy), samples per item
        decoding = backend.describe().get("decoding")
    finally:
        if warm is None:
            backend.close()
        elif hasattr(backend, "sleep"):
            backend.sleep()  # a warm vLLM engine gives the card back between evaluations
    timings["generate_s"] = timed.generate_s
    timings["score_s"] = max(0.0, time.time() - clock - timed.generate_s)
    return result, eval_hash, decoding


def _prepared_task(spec: EvalSpec, store: Path, warm: WarmState | None) -> tuple[Any, Any]:
    """The task and its prepared data: the warm worker's when it holds this spec's, else
    made afresh (and then kept by a warm worker, its environments with it)."""
    spec_json = spec.to_json()
    if warm is not None and warm.spec_json == spec_json and warm.task is not None:
        return warm.task, warm.prepared
    task = get_task(spec.task, spec.task_options)
    prepared = prepare_task(task, store)
    if warm is not None:
        warm.drop_task()
        task.keep_environments = True  # its game workers serve the next evaluation
        warm.spec_json, warm.task, warm.prepared = spec_json, task, prepared
    return task, prepared


def _hold_devices(
    held: contextlib.ExitStack, locks: Path, backend: BackendConfig, out: Path
) -> float:
    """Take the locks of the devices ``backend`` uses here (:func:`device_lock_names`) on
    ``held`` and say so in ``out``; the seconds waited."""
    import torch

    cuda = torch.cuda.is_available()
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    names = device_lock_names(backend, visible, cuda, gpu_uuids() if cuda else None)
    locks.mkdir(parents=True, exist_ok=True)
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
    return waited


def sized_backend(
    config: BackendConfig, timings: dict, measure: Callable[[int], list[Any]] | None = None
) -> BackendConfig:
    """``config`` sized to the GPU memory free now when it grades with vLLM
    (:func:`agent2rl.devices.size_grader_memory` over the first ``tensor_parallel_size``
    visible cards): its share lowered to what is free, or the transformers backend when too
    little is (``auto`` only; ``--backend vllm`` raises
    :class:`~agent2rl.devices.GpuMemoryBusy`). Unchanged for transformers or without a GPU.
    Records ``gpu_free_fraction``, ``gpu_memory_utilization`` and a ``gpu_note`` in
    ``timings``. ``measure``: ``n -> [Gpu]``, the cards with their free memory now
    (default :func:`agent2rl.devices.measure_grader_gpus`; a simulated list in tests)."""
    if config.resolved_kind() != "vllm":
        return config
    from agent2rl.devices import measure_grader_gpus, size_grader_memory

    gpus = (measure or measure_grader_gpus)(max(1, config.tensor_parallel_size))
    decision = size_grader_memory(gpus, config.gpu_memory_utilization, config.kind)
    timings["gpu_free_fraction"] = round(decision.free_fraction, 4)
    if decision.note:
        timings["gpu_note"] = decision.note
    if decision.kind == "transformers":
        return replace(config, kind="transformers")
    timings["gpu_memory_utilization"] = decision.fraction
    return replace(config, gpu_memory_utilization=decision.fraction)


def _load(
    spec: EvalSpec, config: BackendConfig, model_dir: Path, warm: WarmState | None, timings: dict
) -> Any:
    """The backend for ``model_dir`` with ``config`` (``spec.backend`` sized by
    :func:`sized_backend`): loaded afresh (cold, or a warm worker whose engine
    :func:`~agent2rl.inference.warm.reuse_engine` refuses), or the warm one with these
    weights reloaded into it. ``timings["fresh_reason"]`` says why a warm worker loaded
    afresh."""
    from agent2rl.inference.warm import EngineKey, reuse_engine

    if warm is None:
        timings["load"] = "fresh"
        return load_backend(model_dir, config)
    structure = structure_fingerprint(model_dir)
    key = EngineKey.of(config, structure)
    reuse, why = reuse_engine(warm.key if warm.backend is not None else None, key)
    if reuse:
        try:
            if reload_weights(warm.backend, model_dir):
                warm.reloads += 1
                timings["load"] = "reload"
                return warm.backend
            why = "backend cannot reload in place"
        except Exception as err:  # noqa: BLE001 - any failure: the engine is dropped below
            # Not the model's fault: an engine that failed to take weights in place (a vLLM
            # API change, a half-written engine) is replaced by a fresh load of the same
            # directory, which fails as the model's fault if the files themselves are bad.
            why = f"in-place reload failed ({type(err).__name__}: {str(err)[:200]})"
            timings["reload_error"] = why
    was_vllm = warm.key is not None and warm.key.kind == "vllm"
    warm.drop_backend()
    if was_vllm and config.resolved_kind() == "vllm":
        # the dropped engine's own memory is free now: size the new one to that
        config = sized_backend(spec.backend, timings)
        key = EngineKey.of(config, structure)
    warm.backend = load_backend(model_dir, config, warm=True)
    warm.structure, warm.key = structure, key
    warm.loads += 1
    timings["load"] = "fresh"
    timings["fresh_reason"] = why
    return warm.backend


def serve(store: Path, locks: Path, requests: Any, replies: Any) -> int:
    """The warm worker's loop: one JSON request a line on ``requests`` (``{"spec": EvalSpec
    JSON, "model": dir, "out": dir, "at": time sent}``), each answered by one line on
    ``replies`` (``{"rc": 0 | 1}``) once its ``result.json`` or ``error.json`` is written,
    exactly as a cold worker writes them. Returns at end of input (the parent closed it)."""
    warm = WarmState()
    for line in requests:
        if not line.strip():
            continue
        req = json.loads(line)
        spec, model, out = EvalSpec.from_json(req["spec"]), Path(req["model"]), Path(req["out"])
        summary = evaluate_to(spec, model, out, store, locks, warm, req.get("at"))
        print(f"warm worker: loads={warm.loads} reloads={warm.reloads}", flush=True)
        replies.write(json.dumps({"rc": 0 if summary is not None else 1}) + "\n")
        replies.flush()
    warm.drop_task()
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--spec", help="an EvalSpec as JSON")
    ap.add_argument("--model", type=Path)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--store", required=True, type=Path)
    ap.add_argument("--locks", required=True, type=Path)
    ap.add_argument("--requested-at", type=float, default=None)
    ap.add_argument(
        "--serve", action="store_true", help="a warm worker: requests as JSON lines on stdin"
    )
    args = ap.parse_args(argv)
    if args.serve:
        # Replies go on the original stdout; everything else printed (by a task, a library)
        # goes to stderr, the worker's log, so it can never be read as a reply.
        replies = os.fdopen(os.dup(1), "w")
        os.dup2(2, 1)
        return serve(args.store, args.locks, sys.stdin, replies)
    if args.spec is None or args.model is None or args.out is None:
        ap.error("--spec, --model and --out are required without --serve")
    spec = EvalSpec.from_json(args.spec)
    summary = evaluate_to(
        spec, args.model, args.out, args.store, args.locks, None, args.requested_at
    )
    if summary is None:  # the parent reads error.json and records the failure
        return 1
    print(json.dumps(summary), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
