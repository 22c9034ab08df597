"""Batched generation with Hugging Face transformers (CPU, or one GPU if present): greedy, or
sampled with a seed per item (:class:`SeededSampling`)."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any, Literal

from agent2rl.inference.backend import (
    GenerationSettings,
    TemplatedBackend,
    finish,
    max_new_tokens,
    release,
)
from agent2rl.inference.decoding import GREEDY, Decoding, item_seed

#: the largest static key/value cache :meth:`TransformersBackend.cache_for` allows (bytes)
STATIC_CACHE_MAX_BYTES = 1 << 30
#: on CPU, a decoding step of fewer floating-point operations than this, reading a key/value
#: cache of at most :data:`DECODE_SPLIT_MIN_CACHE_BYTES`, runs on one thread
#: (:meth:`TransformersBackend.decode_threads`; the figures in docs/figures.md, from
#: ``benchmarks/decode_threads.py``)
DECODE_SPLIT_MIN_FLOPS = 3e8
DECODE_SPLIT_MIN_CACHE_BYTES = 32 << 20
#: held by the one ``generate`` call that has changed torch's thread count
_THREAD_SWITCH = threading.Lock()


class DecodeThreads:
    """A stopping criterion that stops nothing: ``generate`` calls it after every step, and
    at its first call (the prompt's forward pass is done) it sets torch's thread count to
    ``threads`` for the decoding steps that follow. The caller restores the count after
    ``generate`` returns or raises."""

    def __init__(self, threads: int) -> None:
        self.threads = threads
        self._set = False

    def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
        import torch

        if not self._set:
            torch.set_num_threads(self.threads)
            self._set = True
        return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)


class SeededSampling:
    """A logits processor that turns greedy search into sampling with one random stream per
    batch row: at every step it adds Gumbel noise drawn from the row's own generator to the
    row's (temperature-scaled, top-k/top-p filtered) log-probabilities, and greedy search's
    argmax of the sum is then an exact sample from the filtered distribution (the Gumbel-max
    trick). Each row draws a full vocabulary of noise per step from a generator seeded with its
    item's seed, so step ``t`` of an item always gets the same noise, whatever the batch it is
    in and wherever in it; ``torch.multinomial`` on the shared global generator would not.
    The noise is drawn on the CPU in float64, so it is the same on every device."""

    def __init__(self, seeds: list[int]) -> None:
        import torch

        self._gens = [torch.Generator(device="cpu").manual_seed(s) for s in seeds]

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        import torch

        vocab = scores.shape[-1]
        u = torch.stack([torch.rand(vocab, generator=g, dtype=torch.float64) for g in self._gens])
        # u in [0, 1): clamp away from 0 so that -log(-log(u)) stays finite.
        gumbel = -torch.log(-torch.log(u.clamp_min(1e-300)))
        return scores.float() + gumbel.to(device=scores.device, dtype=torch.float32)


def sampling_processors(decoding: Decoding, prompts: list[str]) -> list[Any]:
    """The logits processors of sampled decoding for a batch of ``prompts``, in the order
    vLLM applies them (temperature, top-k, top-p), then :class:`SeededSampling`; empty for
    greedy decoding."""
    if decoding.greedy:
        return []
    from transformers.generation.logits_process import (
        TemperatureLogitsWarper,
        TopKLogitsWarper,
        TopPLogitsWarper,
    )

    procs: list[Any] = [TemperatureLogitsWarper(decoding.temperature)]
    if decoding.top_k > 0:
        procs.append(TopKLogitsWarper(decoding.top_k))
    if decoding.top_p < 1.0:
        procs.append(TopPLogitsWarper(decoding.top_p))
    procs.append(SeededSampling([item_seed(decoding.seed, p) for p in prompts]))
    return procs


class TransformersBackend(TemplatedBackend):
    """Generation with left padding, stop strings and max-new-tokens, decoded as ``decoding``
    says (greedy by default; sampled: :func:`sampling_processors`, seeded per item).

    Prompts are sorted by length before batching so a batch wastes little padding; results
    come back in the original order. A tokenizer without a pad token pads with EOS. The
    model directory's ``generation_config.json`` is replaced at load by a fresh one (see
    :mod:`agent2rl.inference.backend` and ``__init__``).

    On CPU the key/value cache is preallocated for the whole call (transformers' ``static``
    cache): the default dynamic cache concatenates every layer's keys and values at every new
    token, a copy of the whole cache per token (35% of the CPU time in torch's profiler for 48
    prompts of 472 tokens on the tiny model; ``benchmarks/grading_latency.py`` compares the
    two caches on whole gradings). Greedy outputs are the same with either cache
    (``tests/unit/inference/test_backends.py``). A static cache reserves the whole
    ``max_new_tokens`` for every row up front, so a batch whose static cache would pass
    :data:`STATIC_CACHE_MAX_BYTES` gets the dynamic one (:meth:`cache_for`), and on a GPU the
    dynamic cache stays throughout.

    On CPU the prompt's forward pass runs on all of torch's threads and the decoding steps
    on :meth:`decode_threads`: one thread when a step is too small to split and OpenMP
    threads wait passively (as in the grader's workers: every split operation then pays
    for waking the other threads). The thread count does not change the outputs (the
    matrix products split their output, not their sums; also tested), and it is restored
    after each call.
    """

    name = "transformers"

    def __init__(
        self,
        model_dir: Path,
        device: str | None = None,
        dtype: str = "auto",
        stop_token_ids: tuple[int, ...] = (),
        decoding: Decoding = GREEDY,
        kv_cache: Literal["auto", "static", "dynamic"] = "auto",
    ) -> None:
        """``dtype`` ``auto`` is bfloat16 on a GPU and float32 on CPU; ``kv_cache`` ``auto``
        is ``static`` on CPU and ``dynamic`` on a GPU (see the class docstring; benchmarks
        name one to compare them)."""
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.tokenizer = AutoTokenizer.from_pretrained(model_dir, trust_remote_code=False)
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.decoding = decoding
        eos = self._prepare(self.tokenizer, stop_token_ids)
        if dtype == "auto":
            dtype = "bfloat16" if self.device == "cuda" else "float32"
        dtype = getattr(torch, dtype)
        self.model = AutoModelForCausalLM.from_pretrained(
            model_dir, trust_remote_code=False, use_safetensors=True, dtype=dtype
        ).to(self.device)
        self.model.eval()
        self._stop_ids = frozenset(eos)
        # Every field a submission's generation_config.json could set is reset here: generate()
        # fills the fields left unset from model.generation_config, so replacing it (rather
        # than passing overrides) leaves nothing of the submission's behind.
        self.model.generation_config = GenerationConfig(
            do_sample=False,
            num_beams=1,
            pad_token_id=self.tokenizer.pad_token_id,
            eos_token_id=sorted(eos) or None,
            bos_token_id=self.tokenizer.bos_token_id,
            repetition_penalty=decoding.repetition_penalty,
        )
        self._dtype = str(dtype).replace("torch.", "")
        # the weights a decoding step multiplies: all but the input embedding's, which is
        # only read (also the output head's when the two are tied)
        embedding = self.model.get_input_embeddings().weight.numel()
        self._step_weights = sum(p.numel() for p in self.model.parameters()) - embedding
        if getattr(self.model.config, "tie_word_embeddings", False):
            self._step_weights += embedding
        if kv_cache == "auto":
            kv_cache = "static" if self.device == "cpu" else "dynamic"
        self.kv_cache = kv_cache

    def cache_for(self, rows: int, length: int) -> str:
        """The key/value cache a batch of ``rows`` sequences of up to ``length`` tokens gets:
        :attr:`kv_cache`, except that a static cache larger than
        :data:`STATIC_CACHE_MAX_BYTES` falls back to the dynamic one (a static cache holds
        every row's whole ``length`` from the start: a small model on CPU with HumanEval's
        8192-token limit at batch 64 would reserve tens of GB before the first token, where
        the dynamic cache grows only as far as the batch really generates). transformers
        keeps the longest static length any earlier call used, so that length counts too."""
        if self.kv_cache != "static":
            return self.kv_cache
        length = max(length, int(getattr(self.model, "_previous_max_cache_length", 0) or 0))
        return "static" if self._cache_bytes(rows, length) <= STATIC_CACHE_MAX_BYTES else "dynamic"

    def decode_threads(self, rows: int, length: int) -> int:
        """torch's thread count for the decoding steps of a batch of ``rows`` sequences of up
        to ``length`` tokens: on CPU, 1 when a step is small, that is its products (about
        two operations per weight per row, the input embedding's excluded) are below
        :data:`DECODE_SPLIT_MIN_FLOPS` and the key/value cache it reads is at most
        :data:`DECODE_SPLIT_MIN_CACHE_BYTES` (reading a long cache is faster on every core);
        otherwise, on a GPU, and where OpenMP threads spin (``OMP_WAIT_POLICY`` other than
        ``PASSIVE``, as outside the grader's workers: a spinning thread needs no waking),
        the current count."""
        import torch

        threads = torch.get_num_threads()
        if self.device != "cpu" or os.environ.get("OMP_WAIT_POLICY", "").upper() != "PASSIVE":
            return threads
        small = 2 * rows * self._step_weights < DECODE_SPLIT_MIN_FLOPS
        if small and self._cache_bytes(rows, length) <= DECODE_SPLIT_MIN_CACHE_BYTES:
            return 1
        return threads

    def _cache_bytes(self, rows: int, length: int) -> int:
        """The key/value cache of ``rows`` sequences of ``length`` tokens, in bytes."""
        cfg = self.model.config
        heads = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
        head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        size = rows * length * cfg.num_hidden_layers * 2 * heads * head_dim
        return size * self.model.dtype.itemsize

    def generate(self, prompts: list[str], settings: GenerationSettings) -> list[str]:
        import torch

        order = sorted(range(len(prompts)), key=lambda i: -len(prompts[i]))
        out: list[str] = [""] * len(prompts)
        limit = getattr(self.model.config, "max_position_embeddings", None)
        want = max_new_tokens(settings, self.decoding)
        for start in range(0, len(order), settings.batch_size):
            idx = order[start : start + settings.batch_size]
            batch = self.tokenizer(
                [prompts[i] for i in idx],
                return_tensors="pt",
                padding=True,
                add_special_tokens=False,
            )
            new_tokens = want
            if limit:
                # A prompt is cut to leave room for the task's own limit, keeping its end (the
                # question is at the end); a longer limit of the decoding's (the reference's
                # table on a small model) ends where the context does.
                keep = max(1, limit - min(want, settings.max_new_tokens))
                batch = {k: v[:, -keep:] for k, v in batch.items()}
                new_tokens = min(want, max(1, limit - batch["input_ids"].shape[1]))
            batch = {k: v.to(self.device) for k, v in batch.items()}
            kwargs: dict[str, Any] = {}
            rows, prompt_len = batch["input_ids"].shape
            if self.cache_for(rows, prompt_len + new_tokens) == "static":
                kwargs["cache_implementation"] = "static"
            if settings.stop:
                kwargs |= {"stop_strings": list(settings.stop), "tokenizer": self.tokenizer}
            procs = sampling_processors(self.decoding, [prompts[i] for i in idx])
            if procs:
                from transformers import LogitsProcessorList

                kwargs["logits_processor"] = LogitsProcessorList(procs)
            threads = torch.get_num_threads()
            decode = self.decode_threads(rows, prompt_len + new_tokens)
            # torch's thread count is the process's: one call at a time changes it, and a
            # call made meanwhile from another thread decodes on the count it finds
            switch = decode != threads and _THREAD_SWITCH.acquire(blocking=False)
            if switch:
                from transformers import StoppingCriteriaList

                kwargs["stopping_criteria"] = StoppingCriteriaList([DecodeThreads(decode)])
            try:
                with torch.inference_mode():
                    gen = self.model.generate(
                        **batch, max_new_tokens=new_tokens, do_sample=False, **kwargs
                    )
            finally:
                if switch:
                    torch.set_num_threads(threads)
                    _THREAD_SWITCH.release()
            new = gen[:, batch["input_ids"].shape[1] :].tolist()
            # A completion ends before its first stop token, whose text is not part of it
            # (as in vLLM; a special token's would be skipped anyway, a plain one's not).
            ends = [next((j for j, t in enumerate(r) if t in self._stop_ids), len(r)) for r in new]
            texts = self.tokenizer.batch_decode(
                [r[:end] for r, end in zip(new, ends, strict=True)], skip_special_tokens=True
            )
            for i, text in zip(idx, texts, strict=True):
                out[i] = finish(text, settings, self.decoding)
        return out

    def close(self) -> None:
        del self.model
        release(self.chat_template)
