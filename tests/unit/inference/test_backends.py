"""Backend selection (CPU) and the vLLM backend (GPU-marked: run where CUDA and vllm exist).

The agreement test is the contract that makes ``--backend auto`` safe: on the same model and
items, vLLM and transformers produce the same greedy completions.
"""

from __future__ import annotations

import os

import pytest

from agent2rl.errors import UserError
from agent2rl.inference import BackendConfig, GenerationSettings, load_backend, vllm_usable
from agent2rl.inference.backend import vllm_installed
from agent2rl.inference.transformers_backend import TransformersBackend
from agent2rl.tasks.arith_lite import FORMAT, TEST_SEED, generate_split

gpu = pytest.mark.skipif(not vllm_usable(), reason="needs CUDA and the vllm package")


def test_auto_picks_transformers_without_cuda_and_vllm(tiny) -> None:
    if vllm_usable():
        pytest.skip("this machine has vLLM and CUDA")
    backend = load_backend(tiny.path, BackendConfig())
    # dtype auto: float32 on CPU, bfloat16 on a GPU without vLLM
    dtype = "float32" if backend.device == "cpu" else "bfloat16"  # type: ignore[attr-defined]
    assert backend.describe() == {"backend": "transformers", "dtype": dtype}
    assert BackendConfig(kind="auto").resolved_kind() == "transformers"


@pytest.mark.parametrize(
    "config,message",
    [
        (BackendConfig(kind="tgi"), "unknown backend 'tgi'"),
        (BackendConfig(dtype="fp8"), "unknown dtype 'fp8'"),
        (BackendConfig(gpu_memory_utilization=1.5), "must be in"),
        (BackendConfig(tensor_parallel_size=0), "at least 1"),
    ],
)
def test_bad_backend_settings_are_user_errors(config, message) -> None:
    with pytest.raises(UserError, match=message):
        config.validate()


def test_vllm_without_the_package_names_the_fix() -> None:
    if vllm_installed():
        pytest.skip("this environment has vLLM (tests/vllm covers it)")
    with pytest.raises(UserError, match=r"agent2rl\[gpu\]"):
        BackendConfig(kind="vllm").validate()


def test_config_round_trips_and_ignores_unknown_keys() -> None:
    config = BackendConfig(kind="vllm", max_model_len=2048, tensor_parallel_size=2)
    assert BackendConfig.from_dict(config.to_dict()) == config
    assert BackendConfig.from_dict({"kind": "transformers", "future": 1}).kind == "transformers"
    assert BackendConfig.from_dict(None) == BackendConfig()


def _prompts(n: int = 48) -> list[str]:
    return [FORMAT.template.format(question=r["question"]) for r in generate_split(TEST_SEED, n)]


@pytest.mark.gpu
@gpu
def test_vllm_and_transformers_agree_on_greedy_outputs(tiny) -> None:
    settings = GenerationSettings(max_new_tokens=FORMAT.max_new_tokens, stop=FORMAT.stop)
    prompts = _prompts()
    hf = load_backend(tiny.path, BackendConfig(kind="transformers", dtype="float32"))
    expected = hf.generate(prompts, settings)
    hf.close()
    vllm = load_backend(
        tiny.path, BackendConfig(kind="vllm", dtype="float32", gpu_memory_utilization=0.3)
    )
    try:
        got = vllm.generate(prompts, settings)
        assert vllm.describe() == {"backend": "vllm", "dtype": "float32"}
    finally:
        vllm.close()
    assert got == expected


@pytest.mark.gpu
@gpu
def test_grading_through_vllm_in_the_worker(tmp_path, tiny, arith) -> None:
    """The evaluation child process loads vLLM, grades, and exits (freeing the GPU)."""
    from agent2rl.grading.evaluator import EvalSpec, run_evaluation
    from agent2rl.settings import load_settings

    spec = EvalSpec(
        "arith-lite", backend=BackendConfig(kind="vllm", gpu_memory_utilization=0.3), limit=64
    )
    outcome = run_evaluation(spec, tiny.path, tmp_path / "out", load_settings(), timeout_s=600)
    assert outcome.error is None, (tmp_path / "out" / "eval.log").read_text()[-3000:]
    assert outcome.n_items == 64 and 0.0 <= outcome.score <= 100.0


def test_static_and_dynamic_kv_cache_give_the_same_greedy_outputs(tiny) -> None:
    """The CPU backend preallocates its key/value cache (a speed choice; a GPU keeps the
    dynamic one): on prompts of many lengths, some cut at the context limit, some stopped
    early by a stop string, in batches that mix them, every completion equals the dynamic
    cache's. On a GPU machine this compares the two caches on CUDA."""
    words = "go to the drawer 1 open it take the mug from the shelf put it in 2".split()
    prompts = _prompts(12) + [
        " ".join(words[(i + j) % len(words)] for j in range(n))
        for i, n in enumerate((5, 40, 120, 300, 700))
    ]
    default = load_backend(tiny.path, BackendConfig(kind="transformers", dtype="float32"))
    assert default.kv_cache == ("static" if default.device == "cpu" else "dynamic")
    default.close()
    backend = TransformersBackend(tiny.path, dtype="float32", kv_cache="static")
    dynamic = TransformersBackend(tiny.path, dtype="float32", kv_cache="dynamic")
    try:
        for settings in (
            GenerationSettings(max_new_tokens=24, stop=("\n", " the"), batch_size=5),
            GenerationSettings(max_new_tokens=40, batch_size=64),
        ):
            got = backend.generate(prompts, settings)
            assert got == dynamic.generate(prompts, settings)
            assert len(set(got)) > 3  # varied outputs, not one string for all
    finally:
        backend.close()
        dynamic.close()


def test_a_static_cache_too_large_falls_back_to_the_dynamic_one(tiny, monkeypatch) -> None:
    """The static cache reserves every row's whole length up front: past the size limit
    (a small model with HumanEval's 8192-token limit at batch 64 on a laptop) the backend
    uses the dynamic cache, which grows only as far as the batch really generates."""
    from agent2rl.inference import transformers_backend

    backend = TransformersBackend(tiny.path, dtype="float32", kv_cache="static")
    try:
        # the tiny model: 4 layers x 2 x 4 heads x 32 dims x 4 bytes = 4 KiB per token
        assert backend.cache_for(64, 512) == "static"  # 128 MiB
        monkeypatch.setattr(transformers_backend, "STATIC_CACHE_MAX_BYTES", 64 << 20)
        assert backend.cache_for(64, 512) == "dynamic"
        assert backend.cache_for(16, 512) == "static"  # 32 MiB
        assert backend.cache_for(40, 8) == "static"  # 1.25 MiB
        # the longer static cache an earlier call left on the model counts (transformers
        # reuses its length): after a call of 400 new tokens, 40 rows of 8 tokens reserve
        # over 400 each (over 64 MiB)
        backend.generate(_prompts(16), GenerationSettings(max_new_tokens=400, batch_size=16))
        assert backend.cache_for(40, 8) == "dynamic"
    finally:
        backend.close()


@pytest.fixture
def two_threads(monkeypatch):
    """torch on two threads for the test (a one-core machine has one), restored after, and
    OpenMP's passive waits declared as the grader's workers have them."""
    import torch

    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


def test_small_decoding_steps_run_on_one_thread(tiny, tmp_path, two_threads) -> None:
    """The decode thread policy on real models: the tiny model's step at 64 rows of 80
    tokens is small (one thread), at 48 rows of 512 it reads 96 MiB of cache (both
    threads); a 4.4M-parameter model's step at 64 rows is above the products' threshold
    (both), at 8 rows below it again (one). With spinning OpenMP threads: all threads."""
    from agent2rl.models.tiny import save_model
    from agent2rl.models.tokenizer import build_tokenizer

    small = TransformersBackend(tiny.path, dtype="float32")
    wider = save_model(
        tmp_path / "wider", build_tokenizer(), hidden_size=256, intermediate_size=1024
    )
    larger = TransformersBackend(wider, dtype="float32")
    try:
        if small.device != "cpu":
            assert small.decode_threads(64, 80) == 2  # a GPU's decoding is not the CPU's
            return
        assert small.decode_threads(64, 80) == 1
        assert small.decode_threads(48, 512) == 2
        assert larger.decode_threads(64, 80) == 2
        assert larger.decode_threads(8, 80) == 1
        os.environ["OMP_WAIT_POLICY"] = "ACTIVE"  # spinning threads: nothing to wake
        assert small.decode_threads(64, 80) == 2
    finally:
        small.close()
        larger.close()


def test_decoding_on_one_thread_gives_the_same_outputs(tiny, monkeypatch, two_threads) -> None:
    """The decoding steps run on one thread, the prompt's forward pass on two, the count is
    two again after the call (and after a call that raised), and the completions equal
    those decoded on two threads throughout."""
    import torch

    from agent2rl.inference import transformers_backend

    seen: list[int] = []

    class Recording(transformers_backend.DecodeThreads):
        def __call__(self, input_ids, scores, **kwargs):
            out = super().__call__(input_ids, scores, **kwargs)
            seen.append(torch.get_num_threads())
            return out

    monkeypatch.setattr(transformers_backend, "DecodeThreads", Recording)
    backend = TransformersBackend(tiny.path, dtype="float32")
    if backend.device != "cpu":
        pytest.skip("the thread policy is the CPU's")
    prompts = _prompts(40)
    settings = GenerationSettings(max_new_tokens=20, stop=FORMAT.stop, batch_size=16)
    try:
        one = backend.generate(prompts, settings)
        assert seen and set(seen) == {1} and torch.get_num_threads() == 2
        monkeypatch.setattr(transformers_backend, "DECODE_SPLIT_MIN_FLOPS", 0)
        seen.clear()
        assert backend.generate(prompts, settings) == one and not seen
        assert len(set(one)) > 3
        monkeypatch.undo()

        def failing(**kwargs):
            kwargs["stopping_criteria"][0](kwargs["input_ids"], None)
            raise RuntimeError("out of memory")

        monkeypatch.setattr(backend.model, "generate", failing)
        with pytest.raises(RuntimeError):
            backend.generate(prompts[:4], settings)
        assert torch.get_num_threads() == 2
    finally:
        backend.close()


def test_concurrent_calls_leave_the_thread_count_as_found(tiny, two_threads) -> None:
    """torch's thread count is the process's: calls from two threads at once (one of them
    decoding on one thread) leave it at two, with the same completions as one at a time."""
    from concurrent.futures import ThreadPoolExecutor

    import torch

    backend = TransformersBackend(tiny.path, dtype="float32")
    prompts = _prompts(24)
    settings = GenerationSettings(max_new_tokens=16, stop=FORMAT.stop, batch_size=8)
    try:
        alone = backend.generate(prompts, settings)
        with ThreadPoolExecutor(2) as pool:
            results = list(pool.map(lambda _: backend.generate(prompts, settings), range(6)))
        assert all(r == alone for r in results)
        assert torch.get_num_threads() == 2
    finally:
        backend.close()
