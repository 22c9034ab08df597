"""Single-turn generation: one prompt per sample, one greedy completion each."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agent2rl.dataset import Sample
from agent2rl.inference.backend import Backend
from agent2rl.solvers.base import Output
from agent2rl.solvers.prompt_format import PromptFormat, is_chat


@dataclass(frozen=True)
class Generate:
    """Prompt each sample's ``input`` fields through ``fmt`` (chat or base-model template, as
    the model's tokenizer decides) and generate greedily with ``fmt``'s settings, up to
    ``batch_size`` prompts per forward pass. The outputs' ``trace["chat"]`` says which
    template was used, since scorers that extract code from a reply need to know."""

    fmt: PromptFormat
    batch_size: int = 64

    def solve(self, backend: Backend, samples: list[Sample]) -> list[Output]:
        chat = is_chat(backend)
        prompts = [self.fmt.prompt(backend, s.input) for s in samples]
        completions = backend.generate(prompts, self.fmt.generation(backend, self.batch_size))
        return [Output(c, {"chat": chat}) for c in completions]

    def settings(self) -> dict[str, Any]:
        # batch_size is left out: greedy outputs do not depend on it.
        return {"solver": "generate", "format": self.fmt.to_dict()}
