"""``TransformersJudgeBackend``: a judge model run in-process with transformers, on CPU.

The backend applies the model's chat template to each prompt, runs one batched forward pass
(left-padded, so every prompt's last position is the next token) and returns the top-k of
the last position's log-softmax: exactly what an OpenAI-compatible server returns for
``max_tokens=1, logprobs=true, top_logprobs=k`` at temperature 1, so
:class:`~agent2rl.scoring.judges.logprob.LogprobJudge` runs its protocol on it unchanged.

``always`` names tokens whose log-probabilities are reported even when they fall outside the
top-k. A small judge often ranks a label below filler tokens ("The", "{"); with its labels
always reported, the protocol's preference (the labels' probabilities renormalised) is the
same as with a large k, and never NaN. Where both labels are in the top-k it changes nothing.

A request is one prompt: the meter gets one usage line per prompt, with its prompt tokens
(one completion token: the one read) and no cost (a local model has no list price).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agent2rl.metering.usage import TokenCounts
from agent2rl.scoring.judges.base import JudgeUnavailable, Messages, NextToken
from agent2rl.scoring.llm_client import LLMMeter

#: models loaded in this process, by (directory, GGUF file): a grading process builds
#: its scorer more than once (the evaluation hash, then the scoring), and a benchmark builds
#: several judges; each loads the weights (about 20 s for SmolLM2's GGUF) only once
_LOADED: dict[tuple[str, str | None], tuple[Any, Any]] = {}


class TransformersJudgeBackend:
    """A :class:`~agent2rl.scoring.judges.base.LogprobJudgeBackend` over a causal LM loaded
    once with ``AutoModelForCausalLM.from_pretrained(model_dir, gguf_file=gguf_file)``.

    ``name`` identifies the model in the judge's identity (the cache key and the evaluation
    hash) and in usage lines; ``digest`` (e.g. the weights file's sha256) goes into the
    identity too, so other weights under the same name never share cached judgments.
    ``batch_size`` prompts run as one forward pass. The model loads on the first
    :meth:`next_tokens` (a backend built only for its identity loads nothing); a model
    that does not load raises :class:`JudgeUnavailable` naming the file and the cause.
    """

    def __init__(
        self,
        model_dir: Path,
        *,
        name: str,
        gguf_file: str | None = None,
        digest: str | None = None,
        always: Sequence[str] = (),
        batch_size: int = 8,
        meter: LLMMeter | None = None,
    ) -> None:
        self.model_dir = Path(model_dir)
        self.gguf_file = gguf_file
        self.name = name
        self.digest = digest
        self.always = tuple(always)
        self.batch_size = max(1, int(batch_size))
        self.meter = meter or LLMMeter()
        self._model: Any = None
        self._tokenizer: Any = None
        self._always_ids: list[int] = []

    def identity(self) -> dict[str, Any]:
        return {
            "kind": "transformers",
            "model": self.name,
            "weights_sha256": self.digest,
            "always": list(self.always),
        }

    def load(self) -> None:
        """Load the tokenizer and the model (idempotent, and shared by every backend of the
        same file in this process). Each label in ``always`` must be one token of the
        model's vocabulary: a label split in pieces has no next-token probability, so that
        is refused as :class:`JudgeUnavailable`, as is a file that does not load."""
        if self._model is not None:
            return
        key = (str(self.model_dir), self.gguf_file)
        if key not in _LOADED:
            _LOADED[key] = self._load()
        tokenizer, model = _LOADED[key]
        ids = []
        for label in self.always:
            encoded = tokenizer.encode(label, add_special_tokens=False)
            if len(encoded) != 1:
                raise JudgeUnavailable(
                    f"judge {self.name}: label {label!r} is {len(encoded)} tokens of its "
                    "vocabulary, not one"
                )
            ids.append(encoded[0])
        self._tokenizer, self._model, self._always_ids = tokenizer, model, ids

    def _load(self) -> tuple[Any, Any]:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        where = self.model_dir / (self.gguf_file or "")
        try:
            tokenizer = AutoTokenizer.from_pretrained(self.model_dir, gguf_file=self.gguf_file)
            model = AutoModelForCausalLM.from_pretrained(
                self.model_dir, gguf_file=self.gguf_file, dtype=torch.float32
            )
        except Exception as err:  # transformers raises many kinds for a bad file
            raise JudgeUnavailable(
                f"judge {self.name} did not load from {where}: {type(err).__name__}: {err}"
            ) from None
        model.eval()
        tokenizer.padding_side = "left"  # the last position is every prompt's next token
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        return tokenizer, model

    def next_tokens(self, prompts: Sequence[Messages], top_logprobs: int) -> list[NextToken]:
        """The top ``top_logprobs`` next tokens of each prompt (plus the ``always`` tokens),
        most likely first; the prompts run in batches of :attr:`batch_size`."""
        import torch

        self.load()
        tok, model = self._tokenizer, self._model
        out: list[NextToken] = []
        for start in range(0, len(prompts), self.batch_size):
            chunk = prompts[start : start + self.batch_size]
            began = time.monotonic()
            texts = [
                tok.apply_chat_template(list(m), tokenize=False, add_generation_prompt=True)
                for m in chunk
            ]
            enc = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False)
            with torch.inference_mode():
                logits = model(**enc).logits[:, -1, :].float()
            logprobs = torch.log_softmax(logits, dim=-1)
            values, indices = logprobs.topk(min(top_logprobs, logprobs.shape[-1]), dim=-1)
            lengths = enc["attention_mask"].sum(dim=1).tolist()
            latency = (time.monotonic() - began) / len(chunk)
            for row in range(len(chunk)):
                top_ids = indices[row].tolist()
                extra = [i for i in self._always_ids if i not in top_ids]
                ids = top_ids + extra
                scores = values[row].tolist() + logprobs[row, extra].tolist()
                top = [(tok.decode([i]), float(v)) for i, v in zip(ids, scores, strict=True)]
                tokens = TokenCounts(input=int(lengths[row]), output=1)
                self.meter.record(
                    "local", "next_token", self.name, status=200, latency_s=latency, tokens=tokens
                )
                out.append(NextToken(top=top, tokens=tokens))
        return out

    def close(self) -> None:
        """Drop this backend's references (the process keeps the loaded model for the next
        judge of the same file)."""
        self._model = self._tokenizer = None
