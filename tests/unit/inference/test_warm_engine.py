"""The warm grader's engine decisions (issue #28 item 4, issue #30 item 4), on the CPU:
when a held engine takes the next submission's weights, and how the grader sizes vLLM to the
GPU memory free at each submission (simulated device lists). The real vLLM reload is
``gpu``-marked at the end."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import pytest

from agent2rl.devices import (
    HEADROOM_FRACTION,
    MIN_GRADER_FRACTION,
    Gpu,
    GpuMemoryBusy,
    measure_grader_gpus,
    size_grader_memory,
)
from agent2rl.grading.worker import sized_backend
from agent2rl.inference.backend import BackendConfig
from agent2rl.inference.warm import EngineKey, reuse_engine

GIB = 2**30


def card(free_gib: float, total_gib: float = 80, index: int = 0) -> Gpu:
    return Gpu(index, "H100", int(total_gib * GIB), int(free_gib * GIB), f"GPU-{index:04d}")


def vllm_key(structure: str = "s1", fraction: float = 0.85, **config: object) -> EngineKey:
    cfg = BackendConfig(kind="vllm", gpu_memory_utilization=fraction, **config)  # type: ignore[arg-type]
    return EngineKey.of(cfg, structure)


# -- reuse_engine: the whole decision -------------------------------------------------------


def test_first_submission_loads_fresh() -> None:
    assert reuse_engine(None, vllm_key()) == (False, "no engine loaded")


def test_same_structure_and_settings_reload_in_place() -> None:
    assert reuse_engine(vllm_key(), vllm_key()) == (True, "reload")


def test_changed_architecture_or_tokenizer_loads_fresh() -> None:
    reuse, why = reuse_engine(vllm_key("s1"), vllm_key("s2"))
    assert not reuse and "structure" in why


def test_changed_backend_kind_loads_fresh() -> None:
    held = EngineKey.of(BackendConfig(kind="transformers"), "s1")
    reuse, why = reuse_engine(held, vllm_key())
    assert not reuse and "transformers to vllm" in why


def test_changed_start_up_settings_load_fresh() -> None:
    reuse, why = reuse_engine(vllm_key(dtype="bfloat16"), vllm_key(dtype="float16"))
    assert not reuse and "settings" in why
    reuse, _ = reuse_engine(vllm_key(max_model_len=2048), vllm_key(max_model_len=4096))
    assert not reuse


def test_less_free_memory_resizes_the_engine() -> None:
    reuse, why = reuse_engine(vllm_key(fraction=0.85), vllm_key(fraction=0.40))
    assert not reuse and "0.85 to 0.40" in why


def test_more_free_memory_or_noise_keeps_the_engine() -> None:
    assert reuse_engine(vllm_key(fraction=0.30), vllm_key(fraction=0.85))[0]
    assert reuse_engine(vllm_key(fraction=0.85), vllm_key(fraction=0.845))[0]


def test_transformers_key_ignores_the_vllm_share() -> None:
    a = EngineKey.of(BackendConfig(kind="transformers", gpu_memory_utilization=0.85), "s")
    b = EngineKey.of(BackendConfig(kind="transformers", gpu_memory_utilization=0.30), "s")
    assert a.memory_fraction is None and reuse_engine(a, b) == (True, "reload")


# -- size_grader_memory: the per-submission memory policy (docs/gpu.md) ----------------------


def test_free_card_gets_the_runs_share() -> None:
    d = size_grader_memory([card(79)], 0.85)
    assert (d.kind, d.fraction, d.note) == ("vllm", 0.85, "")


def test_partly_used_card_lowers_the_share_to_what_is_free() -> None:
    d = size_grader_memory([card(40)], 0.85)  # the agent holds half the card now
    assert d.kind == "vllm"
    assert d.fraction == pytest.approx(0.5 - HEADROOM_FRACTION)
    assert "lowered from 0.85" in d.note


def test_least_free_card_decides_for_tensor_parallel() -> None:
    d = size_grader_memory([card(79, index=0), card(30, index=1)], 0.85)
    assert d.fraction == pytest.approx(30 / 80 - HEADROOM_FRACTION)


def test_full_card_falls_back_to_transformers_under_auto() -> None:
    d = size_grader_memory([card(0.05 * 80)], 0.30, kind="auto")
    assert d.kind == "transformers" and d.fraction is None
    assert "transformers" in d.note


def test_full_card_with_explicit_vllm_is_a_clear_harness_error() -> None:
    with pytest.raises(GpuMemoryBusy, match="--backend auto"):
        size_grader_memory([card(4)], 0.30, kind="vllm")


def test_share_just_above_the_minimum_stays_on_vllm() -> None:
    free = (MIN_GRADER_FRACTION + HEADROOM_FRACTION + 0.01) * 80
    d = size_grader_memory([card(free)], 0.30)
    assert d.kind == "vllm" and d.fraction >= MIN_GRADER_FRACTION


def test_sized_backend_applies_the_decision_per_submission() -> None:
    cfg = BackendConfig(kind="auto", gpu_memory_utilization=0.85)
    # the worker sizes only what grades with vLLM: an explicit vllm kind here (no vLLM on CPU)
    vllm = BackendConfig(kind="vllm", gpu_memory_utilization=0.85)
    timings: dict = {}
    first = sized_backend(vllm, timings, measure=lambda n: [card(79)][:n])
    assert first.gpu_memory_utilization == 0.85 and timings["gpu_free_fraction"] > 0.95
    timings = {}
    second = sized_backend(vllm, timings, measure=lambda n: [card(20)][:n])
    assert second.gpu_memory_utilization == pytest.approx(0.20)
    assert "lowered" in timings["gpu_note"]
    # auto on this machine (no CUDA) is transformers: nothing measured
    timings = {}
    assert sized_backend(cfg, timings, measure=lambda n: [card(1)]) == cfg and not timings


def test_sized_backend_falls_back_to_transformers_when_auto_would_be_vllm(monkeypatch) -> None:
    # ``auto`` resolves to vLLM on a GPU machine with vllm installed: simulate that resolution
    monkeypatch.setattr("agent2rl.inference.backend.vllm_usable", lambda: True)
    cfg = BackendConfig(kind="auto", gpu_memory_utilization=0.30)
    timings: dict = {}
    out = sized_backend(cfg, timings, measure=lambda n: [card(2)][:n])
    assert out.kind == "transformers" and "transformers" in timings["gpu_note"]


def test_measure_without_gpu_is_empty() -> None:
    import torch

    if shutil.which("nvidia-smi") or torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    assert measure_grader_gpus(1) == []


# -- the real engine (GPU) ----------------------------------------------------------------


@pytest.mark.gpu
def test_warm_vllm_engine_reload_matches_a_fresh_engine(tmp_path: Path) -> None:
    """A sleeping warm engine given a second submission's weights decodes exactly as a fresh
    engine on that submission."""
    import torch

    if importlib.util.find_spec("vllm") is None or not torch.cuda.is_available():
        pytest.skip("needs vllm and CUDA")
    from agent2rl.inference import load_backend
    from agent2rl.inference.backend import GenerationSettings
    from agent2rl.models import resolve_model
    from agent2rl.orchestration.scratch_run import perturbed_copy
    from agent2rl.settings import load_settings

    base = resolve_model("tiny", load_settings().model_store).path
    a = perturbed_copy(base, tmp_path / "a", seed=1, scale=0.05)
    b = perturbed_copy(base, tmp_path / "b", seed=2, scale=0.05)
    cfg = BackendConfig(kind="vllm", gpu_memory_utilization=0.3)
    prompts = [f"{i} + {i} =" for i in range(16)]
    settings = GenerationSettings(max_new_tokens=16)
    warm = load_backend(a, cfg, warm=True)
    try:
        warm.generate(prompts, settings)
        warm.sleep()  # type: ignore[attr-defined]
        warm.reload_weights(b)  # type: ignore[attr-defined]
        reloaded = warm.generate(prompts, settings)
    finally:
        warm.close()
    fresh = load_backend(b, cfg)
    try:
        assert fresh.generate(prompts, settings) == reloaded
    finally:
        fresh.close()
