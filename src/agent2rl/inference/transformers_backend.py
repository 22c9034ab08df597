"""Batched greedy generation with Hugging Face transformers (CPU, or one GPU if present)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agent2rl.inference.backend import GenerationSettings, apply_chat_template, truncate_at_stop
from agent2rl.inference.chat_template import ChatTemplate


class TransformersBackend:
    """Greedy generation with left padding, stop strings and max-new-tokens.

    Prompts are sorted by length before batching so a batch wastes little padding; results
    come back in the original order. A tokenizer without a pad token pads with EOS. The
    model directory's ``generation_config.json`` is replaced at load by a fresh config (see
    :mod:`agent2rl.inference.backend`): greedy, one beam, no penalties, ending at
    ``stop_token_ids`` or the tokenizer's end-of-sequence token. Chat prompts go through
    :func:`~agent2rl.inference.backend.apply_chat_template` (checked, bounded rendering).
    """

    name = "transformers"

    def __init__(
        self,
        model_dir: Path,
        device: str | None = None,
        dtype: str = "auto",
        stop_token_ids: tuple[int, ...] = (),
    ) -> None:
        """``dtype`` ``auto`` is bfloat16 on a GPU and float32 on CPU."""
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.tokenizer = AutoTokenizer.from_pretrained(model_dir, trust_remote_code=False)
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.chat_template = ChatTemplate.of_tokenizer(self.tokenizer)
        if dtype == "auto":
            dtype = "bfloat16" if self.device == "cuda" else "float32"
        dtype = getattr(torch, dtype)
        self.model = AutoModelForCausalLM.from_pretrained(
            model_dir, trust_remote_code=False, use_safetensors=True, dtype=dtype
        ).to(self.device)
        self.model.eval()
        eos = set(stop_token_ids)
        if self.tokenizer.eos_token_id is not None:
            eos.add(self.tokenizer.eos_token_id)
        # Every field a submission's generation_config.json could set is reset here: generate()
        # fills the fields left unset from model.generation_config, so replacing it (rather
        # than passing overrides) leaves nothing of the submission's behind.
        self.model.generation_config = GenerationConfig(
            do_sample=False,
            num_beams=1,
            pad_token_id=self.tokenizer.pad_token_id,
            eos_token_id=sorted(eos) or None,
            bos_token_id=self.tokenizer.bos_token_id,
        )
        self._dtype = str(dtype).replace("torch.", "")

    def describe(self) -> dict[str, Any]:
        return {"backend": self.name, "dtype": self._dtype}

    def chat_prompt(self, messages: list[dict[str, str]]) -> str | None:
        return apply_chat_template(self.chat_template, messages)

    def generate(self, prompts: list[str], settings: GenerationSettings) -> list[str]:
        import torch

        order = sorted(range(len(prompts)), key=lambda i: -len(prompts[i]))
        out: list[str] = [""] * len(prompts)
        limit = getattr(self.model.config, "max_position_embeddings", None)
        for start in range(0, len(order), settings.batch_size):
            idx = order[start : start + settings.batch_size]
            batch = self.tokenizer(
                [prompts[i] for i in idx],
                return_tensors="pt",
                padding=True,
                add_special_tokens=False,
            )
            if limit and batch["input_ids"].shape[1] + settings.max_new_tokens > limit:
                # Keep the end of over-long prompts (the question is at the end).
                keep = max(1, limit - settings.max_new_tokens)
                batch = {k: v[:, -keep:] for k, v in batch.items()}
            batch = {k: v.to(self.device) for k, v in batch.items()}
            kwargs: dict[str, Any] = {}
            if settings.stop:
                kwargs = {"stop_strings": list(settings.stop), "tokenizer": self.tokenizer}
            with torch.inference_mode():
                gen = self.model.generate(
                    **batch, max_new_tokens=settings.max_new_tokens, do_sample=False, **kwargs
                )
            new = gen[:, batch["input_ids"].shape[1] :]
            texts = self.tokenizer.batch_decode(new, skip_special_tokens=True)
            for i, text in zip(idx, texts, strict=True):
                out[i] = truncate_at_stop(text, settings.stop)
        return out

    def close(self) -> None:
        import gc

        import torch

        if self.chat_template is not None:
            self.chat_template.close()
        del self.model
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
