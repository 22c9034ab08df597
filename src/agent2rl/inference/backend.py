"""The generation-backend interface every task evaluates through.

A backend turns prompts into greedy completions for one model directory. Issue "full L1
tasks" adds a vLLM backend behind the same interface; tasks never import a backend directly.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol


@dataclass(frozen=True)
class GenerationSettings:
    """Greedy decoding settings.

    ``stop``: completions are cut before the first occurrence of any stop string (the stop
    string itself is not returned). ``batch_size`` bounds prompts per forward pass.
    """

    max_new_tokens: int = 256
    stop: tuple[str, ...] = ()
    batch_size: int = 32

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Backend(Protocol):
    """Greedy text generation for one loaded model."""

    name: str

    def generate(self, prompts: list[str], settings: GenerationSettings) -> list[str]:
        """One completion per prompt, in the prompts' order."""
        ...

    def chat_prompt(self, messages: list[dict[str, str]]) -> str | None:
        """The model's chat template applied to ``messages`` with a generation prompt, or
        None when the tokenizer has no chat template (a base model)."""
        ...

    def describe(self) -> dict[str, Any]:
        """Settings that can change outputs (backend name, dtype...), for the eval hash."""
        ...

    def close(self) -> None: ...


def truncate_at_stop(text: str, stop: tuple[str, ...]) -> str:
    """Cut ``text`` before the earliest occurrence of any stop string."""
    cut = len(text)
    for s in stop:
        if s:
            i = text.find(s)
            if i != -1:
                cut = min(cut, i)
    return text[:cut]


def load_backend(model_dir: Path, kind: str = "auto") -> Backend:
    """Load ``model_dir`` with the backend ``kind`` (``auto`` or ``transformers`` for now).

    Only safetensors weights are loaded and custom modeling code is never trusted.
    """
    from agent2rl.errors import UserError

    if kind not in ("auto", "transformers"):
        raise UserError(f"unknown backend {kind!r}: use auto or transformers")
    from agent2rl.inference.transformers_backend import TransformersBackend

    return TransformersBackend(Path(model_dir))
