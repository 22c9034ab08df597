"""The evaluation lock is per physical device, and only holding it starts the evaluation's
clock: a queue for a busy device is bounded by its own wait and is never an evaluation
timeout. Real worker processes, a real ``flock`` held by this test."""

from __future__ import annotations

import fcntl
import json
import threading
import time

import pytest

from agent2rl.grading.evaluator import STARTED_FILE, EvalSpec, run_evaluation
from agent2rl.grading.worker import device_lock_names
from agent2rl.inference.backend import BackendConfig
from agent2rl.settings import load_settings

HF = BackendConfig(kind="transformers")
VLLM_TP2 = BackendConfig(kind="vllm", tensor_parallel_size=2)


@pytest.mark.parametrize(
    ("backend", "visible", "cuda", "uuids", "expected"),
    [
        (HF, None, False, None, ["cpu"]),
        (HF, "3", False, None, ["cpu"]),
        # One GPU per run on an 8-GPU node: each run locks its own device (the bug: "cuda0").
        (HF, "0", True, None, ["gpu-0"]),
        (HF, "5", True, None, ["gpu-5"]),
        (HF, None, True, None, ["gpu-0"]),
        (HF, "2,3", True, None, ["gpu-2"]),  # transformers uses the first visible device
        (VLLM_TP2, "6,2", True, None, ["gpu-2", "gpu-6"]),  # sorted: no lock-order deadlock
        (VLLM_TP2, None, True, None, ["gpu-0", "gpu-1"]),
        # An index and its UUID name one lock when nvidia-smi's map is known.
        (HF, "1", True, {"1": "GPU-ab12"}, ["gpu-GPU-ab12"]),
        (HF, "GPU-ab12", True, {"1": "GPU-ab12"}, ["gpu-GPU-ab12"]),
        (HF, "MIG-x/1/2", True, None, ["gpu-MIG-x_1_2"]),
    ],
)
def test_device_lock_names(backend, visible, cuda, uuids, expected) -> None:
    assert device_lock_names(backend, visible, cuda, uuids) == expected


def test_runs_on_different_gpus_do_not_share_a_lock() -> None:
    names = {tuple(device_lock_names(HF, str(i), True)) for i in range(8)}
    assert len(names) == 8


def _hold_lock(path, seconds: float, held: threading.Event) -> threading.Thread:
    def hold() -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "w") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            held.set()
            time.sleep(seconds)

    t = threading.Thread(target=hold, daemon=True)
    t.start()
    assert held.wait(10)
    return t


@pytest.mark.timing
def test_waiting_for_the_device_does_not_count_toward_the_timeout(tmp_path, arith, tiny) -> None:
    """Another run holds the device for longer than the evaluation timeout; the evaluation
    then runs within it. Before the fix the wait counted and this was a 'timed out' harness
    failure. Timing: loading the tiny model and 4 items must take under 20 s."""
    settings = load_settings()
    spec = EvalSpec(arith[0].name, arith[0].opts, HF, limit=4)
    lock = settings.locks / f"eval-{device_lock_names(HF, None, False)[0]}.lock"
    holder = _hold_lock(lock, 21.0, threading.Event())
    outcome = run_evaluation(spec, tiny.path, tmp_path / "out", settings, timeout_s=20.0)
    holder.join()
    assert outcome.error is None, outcome
    started = json.loads((tmp_path / "out" / STARTED_FILE).read_text())
    assert started["devices"] == ["cpu"] and started["lock_wait_s"] > 1.0


def test_the_wait_for_the_device_is_bounded(tmp_path, arith, tiny) -> None:
    settings = load_settings()
    spec = EvalSpec(arith[0].name, arith[0].opts, HF, limit=4)
    lock = settings.locks / f"eval-{device_lock_names(HF, None, False)[0]}.lock"
    holder = _hold_lock(lock, 12.0, threading.Event())
    began = time.time()
    outcome = run_evaluation(
        spec, tiny.path, tmp_path / "out", settings, timeout_s=600, lock_wait_s=3.0
    )
    took = time.time() - began
    holder.join()
    assert outcome.failure == "harness" and "did not get the device" in outcome.error
    assert 3.0 <= took < 10.0
