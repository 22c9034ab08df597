"""Generation with vLLM (GPU), greedy or sampled as the run's decoding says. Needs the optional
``gpu`` extra (``vllm``). :func:`sampling_kwargs` (importable without vLLM, unit-tested) is the
whole mapping from a :class:`~agent2rl.inference.decoding.Decoding` to ``SamplingParams``.

It runs inside the evaluation child process like every backend. A cold worker's engine is
released when that process exits after each submission; a warm worker's engine
(``sleep_mode``) sleeps between evaluations and takes each submission's weights in place
(:meth:`VllmBackend.reload_weights`) when :func:`agent2rl.inference.warm.reuse_engine` allows.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agent2rl.inference.backend import (
    BackendConfig,
    GenerationSettings,
    TemplatedBackend,
    finish,
    max_new_tokens,
    release,
)
from agent2rl.inference.decoding import Decoding, item_seed


def sampling_kwargs(
    decoding: Decoding,
    settings: GenerationSettings,
    prompt: str,
    stop_token_ids: list[int],
    max_tokens: int | None = None,
) -> dict[str, Any]:
    """``vllm.SamplingParams`` keyword arguments for one prompt. Greedy: ``temperature`` 0
    (vLLM then ignores top-p/top-k and the seed). Sampled: the decoding's temperature,
    top-p, top-k (0 or less: vLLM's -1, off) and a per-request ``seed`` from
    :func:`~agent2rl.inference.decoding.item_seed` (vLLM gives a seeded request its own
    generator, so its sample does not depend on the batch). ``n`` is the decoding's samples per
    item; ``max_tokens`` defaults to :func:`~agent2rl.inference.backend.max_new_tokens`."""
    out: dict[str, Any] = {
        "n": decoding.samples,
        "temperature": decoding.temperature,
        "max_tokens": max_tokens or max_new_tokens(settings, decoding),
        "stop": list(settings.stop) or None,
        "stop_token_ids": list(stop_token_ids),
        "skip_special_tokens": True,
    }
    if decoding.repetition_penalty != 1.0:
        out["repetition_penalty"] = decoding.repetition_penalty
    if not decoding.greedy:
        out["top_p"] = decoding.top_p
        out["top_k"] = decoding.top_k if decoding.top_k > 0 else -1
        out["seed"] = item_seed(decoding.seed, prompt)
    return out


def weight_layout(model_dir: Path) -> dict[str, tuple[int, ...]]:
    """Every tensor of ``model_dir``'s ``*.safetensors`` files by name -> shape, read from
    the files' headers (no tensor data is read). Edge case: a name in two files keeps the
    last file's shape (sorted by name), as a loader iterating the files would."""
    from safetensors import safe_open

    out: dict[str, tuple[int, ...]] = {}
    for f in sorted(Path(model_dir).glob("*.safetensors")):
        with safe_open(str(f), framework="pt") as st:
            for name in st.keys():
                out[name] = tuple(st.get_slice(name).get_shape())
    return out


#: sequences the CPU KV cache holds at full context (vLLM's scheduler batches within it)
CPU_KV_SEQUENCES = 64
#: bounds of the CPU KV cache: enough for one full-context sequence of a small model, and no
#: more than a laptop can spare beside the agent's training
CPU_KV_MIN_BYTES = 64 * 2**20
CPU_KV_MAX_BYTES = 4 * 2**30


def cpu_kv_cache_bytes(model_dir: Path, max_model_len: int | None, dtype: str) -> int:
    """The KV cache for vLLM's CPU build: keys and values of every layer for
    :data:`CPU_KV_SEQUENCES` sequences at ``max_model_len`` (None: the config's
    ``max_position_embeddings``, else 4096), within [:data:`CPU_KV_MIN_BYTES`,
    :data:`CPU_KV_MAX_BYTES`]. A config without the usual Llama/Qwen fields gets the upper
    bound (a guess too small would refuse to start)."""
    import json

    try:
        cfg = json.loads((Path(model_dir) / "config.json").read_text())
        cfg = cfg.get("text_config", cfg)
        layers = int(cfg["num_hidden_layers"])
        heads = int(cfg["num_attention_heads"])
        kv_heads = int(cfg.get("num_key_value_heads") or heads)
        head_dim = int(cfg.get("head_dim") or int(cfg["hidden_size"]) // heads)
        length = int(max_model_len or cfg.get("max_position_embeddings") or 4096)
    except (OSError, ValueError, KeyError, TypeError, ZeroDivisionError):
        return CPU_KV_MAX_BYTES
    width = 4 if dtype == "float32" else 2
    need = 2 * layers * kv_heads * head_dim * width * length * CPU_KV_SEQUENCES
    return max(CPU_KV_MIN_BYTES, min(CPU_KV_MAX_BYTES, need))


class VllmBackend(TemplatedBackend):
    """Decoding through ``vllm.LLM`` with the same contract as the transformers backend.

    Prompts are tokenized here without special tokens (as the transformers backend does) and
    handed to vLLM as token ids, so both backends feed the model the same ids. A prompt longer
    than the context minus ``max_new_tokens`` keeps its end, as in the transformers backend.
    Only safetensors weights are loaded and ``trust_remote_code`` stays off. The model's
    ``generation_config.json`` is not read (``generation_config="vllm"``): greedy decoding
    ends at the run's ``stop_token_ids`` or the tokenizer's end-of-sequence token, as in the
    transformers backend.
    """

    name = "vllm"

    def __init__(self, model_dir: Path, config: BackendConfig, sleep_mode: bool = False) -> None:
        """``sleep_mode``: a warm grader's engine, put to sleep between evaluations
        (:meth:`sleep`) and given each submission's weights in place
        (:meth:`reload_weights`)."""
        import torch
        from vllm import LLM

        on_gpu = torch.cuda.is_available()  # else vLLM's CPU build's paths
        # ``auto`` is bfloat16 on a GPU and float32 on the CPU, as in the transformers backend
        auto_dtype = "bfloat16" if on_gpu else "float32"
        self._dtype = auto_dtype if config.dtype == "auto" else config.dtype
        self.decoding = config.decoding_settings()
        max_len = config.max_model_len or self.decoding.max_model_len
        # vLLM's CPU build reads gpu_memory_utilization as a share of the machine's RAM,
        # reserved whole at start-up; it has no sleep mode. There the KV cache is sized to
        # what grading needs instead (cpu_kv_cache_bytes) and the engine runs eagerly: it
        # then started in about 20 s on two cores, where issue #37's probe with vLLM's
        # compilation took 30-76 s (vLLM also skips its warm-up run when eager with an
        # explicit KV cache).
        cpu_kw: dict[str, Any] = {}
        if not on_gpu:
            kv_bytes = cpu_kv_cache_bytes(model_dir, max_len, self._dtype)
            cpu_kw = {"kv_cache_memory_bytes": kv_bytes, "enforce_eager": True}
        sleep_mode = sleep_mode and on_gpu
        self.llm = LLM(
            model=str(model_dir),
            tokenizer=str(model_dir),
            trust_remote_code=False,
            load_format="safetensors",
            dtype=self._dtype,
            gpu_memory_utilization=config.gpu_memory_utilization,
            # the reference gives vLLM its row's context (max_seq_len) unless the run names one
            max_model_len=max_len,
            tensor_parallel_size=config.tensor_parallel_size,
            seed=0,
            generation_config="vllm",
            worker_extension_cls="agent2rl.inference.vllm_worker.WeightReload",
            **({"enable_sleep_mode": True} if sleep_mode else {}),
            **cpu_kw,
        )
        self.sleep_mode = sleep_mode
        self.asleep = False
        self.tokenizer = self.llm.get_tokenizer()
        # Prompts are rendered here, never by vLLM's own chat path: the same checked rendering
        # as the transformers backend's.
        self.stop_token_ids = sorted(self._prepare(self.tokenizer, config.stop_token_ids))
        self.max_len = self.llm.llm_engine.model_config.max_model_len
        self.weight_layout = weight_layout(model_dir)

    def generate(self, prompts: list[str], settings: GenerationSettings) -> list[str]:
        from vllm import SamplingParams

        want = max_new_tokens(settings, self.decoding)
        # The prompt is cut to leave room for the task's own limit (as in the transformers
        # backend); a longer limit of the decoding's ends where the context does.
        keep = max(1, self.max_len - min(want, settings.max_new_tokens))
        inputs, params = [], []
        for p in prompts:
            ids = self.tokenizer(p, add_special_tokens=False)["input_ids"][-keep:]
            inputs.append({"prompt_token_ids": ids})
            room = max(1, min(want, self.max_len - len(ids)))
            kw = sampling_kwargs(self.decoding, settings, p, self.stop_token_ids, room)
            params.append(SamplingParams(**kw))
        outputs = self.llm.generate(inputs, params, use_tqdm=False)
        # vLLM already stops at the stop strings; cutting again keeps the contract exact
        # (the earliest stop wins even when two overlap).
        return [finish(o.outputs[0].text, settings, self.decoding) for o in outputs]

    def sleep(self) -> None:
        """Release the engine's GPU memory until the next :meth:`reload_weights` (vLLM sleep
        level 2: weights and KV cache discarded, the process, its CUDA graphs and compiled
        kernels kept), so the agent has the card between evaluations. A no-op without
        ``sleep_mode``."""
        if self.sleep_mode and not self.asleep:
            self.llm.sleep(level=2)
            self.asleep = True

    def reload_weights(self, model_dir: Path) -> None:
        """Load ``model_dir``'s safetensors into the running engine in place: wake its weight
        memory (a sleeping GPU engine), reload through the workers' ``reload_weights`` with
        ``weights_path`` (vLLM's in-place reload, the engine's own loader and load format:
        safetensors; the API of vLLM 0.32 and 0.33) with a repair for vLLM's CPU build
        (:mod:`agent2rl.inference.vllm_worker`), then wake the KV cache and drop the prefix
        cache (it holds the previous weights' keys and values).

        The files must hold exactly the tensors, by name and shape, that the engine was first
        loaded with (:func:`weight_layout`): vLLM's reload only warns about a weight the files
        lack and would grade that one with the previous submission's values. Raises
        ValueError otherwise; any exception leaves the engine unusable and the caller must
        drop it (the warm grader then loads a fresh engine)."""
        layout = weight_layout(model_dir)
        if layout != self.weight_layout:
            raise ValueError(
                "the weights' tensors differ from the engine's (names or shapes): "
                f"{sorted(set(layout.items()) ^ set(self.weight_layout.items()))[:3]}"
            )
        if self.asleep:
            self.llm.wake_up(tags=["weights"])
        self.llm.collective_rpc("agent2rl_reload_weights", args=(str(model_dir),))
        if self.asleep:
            self.llm.wake_up(tags=["kv_cache"])
            self.asleep = False
        self.llm.reset_prefix_cache()

    def close(self) -> None:
        del self.llm
        release(self.chat_template)
