"""Greedy generation with vLLM (GPU). Needs the optional ``gpu`` extra (``vllm``).

It runs inside the evaluation child process like every backend, so the GPU memory vLLM
reserves is released when that process exits after each submission.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agent2rl.inference.backend import (
    BackendConfig,
    GenerationSettings,
    apply_chat_template,
    truncate_at_stop,
)
from agent2rl.inference.chat_template import ChatTemplate


class VllmBackend:
    """Greedy decoding through ``vllm.LLM`` with the same contract as the transformers backend.

    Prompts are tokenized here without special tokens (as the transformers backend does) and
    handed to vLLM as token ids, so both backends feed the model the same ids. A prompt longer
    than the context minus ``max_new_tokens`` keeps its end, as in the transformers backend.
    Only safetensors weights are loaded and ``trust_remote_code`` stays off. The model's
    ``generation_config.json`` is not read (``generation_config="vllm"``): greedy decoding
    ends at the run's ``stop_token_ids`` or the tokenizer's end-of-sequence token, as in the
    transformers backend.
    """

    name = "vllm"

    def __init__(self, model_dir: Path, config: BackendConfig) -> None:
        from vllm import LLM

        self._dtype = "bfloat16" if config.dtype == "auto" else config.dtype
        self.llm = LLM(
            model=str(model_dir),
            tokenizer=str(model_dir),
            trust_remote_code=False,
            load_format="safetensors",
            dtype=self._dtype,
            gpu_memory_utilization=config.gpu_memory_utilization,
            max_model_len=config.max_model_len,
            tensor_parallel_size=config.tensor_parallel_size,
            seed=0,
            generation_config="vllm",
        )
        self.tokenizer = self.llm.get_tokenizer()
        # Prompts are rendered here, never by vLLM's own chat path: the same checked rendering
        # as the transformers backend's.
        self.chat_template = ChatTemplate.of_tokenizer(self.tokenizer)
        eos = set(config.stop_token_ids)
        if self.tokenizer.eos_token_id is not None:
            eos.add(self.tokenizer.eos_token_id)
        self.stop_token_ids = sorted(eos)
        self.max_len = self.llm.llm_engine.model_config.max_model_len

    def describe(self) -> dict[str, Any]:
        return {"backend": self.name, "dtype": self._dtype}

    def chat_prompt(self, messages: list[dict[str, str]]) -> str | None:
        return apply_chat_template(self.chat_template, messages)

    def generate(self, prompts: list[str], settings: GenerationSettings) -> list[str]:
        from vllm import SamplingParams

        params = SamplingParams(
            temperature=0.0,
            max_tokens=settings.max_new_tokens,
            stop=list(settings.stop) or None,
            stop_token_ids=self.stop_token_ids,
            skip_special_tokens=True,
        )
        keep = max(1, self.max_len - settings.max_new_tokens)
        inputs = [
            {"prompt_token_ids": self.tokenizer(p, add_special_tokens=False)["input_ids"][-keep:]}
            for p in prompts
        ]
        outputs = self.llm.generate(inputs, params, use_tqdm=False)
        # vLLM already stops at the stop strings; cutting again keeps the contract exact
        # (the earliest stop wins even when two overlap).
        return [truncate_at_stop(o.outputs[0].text, settings.stop) for o in outputs]

    def close(self) -> None:
        import gc

        import torch

        if self.chat_template is not None:
            self.chat_template.close()
        del self.llm
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
