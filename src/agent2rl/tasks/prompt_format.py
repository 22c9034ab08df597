"""How a task queries the model, stated as data so the grader and the agent share one truth.

The task writes its :class:`PromptFormat` into the public split (``data/eval_format.json``)
and describes it in ``description.md``; the grader builds every prompt through the same
object, so an agent can train for exactly what it will be asked.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from agent2rl.inference.backend import Backend, GenerationSettings


@dataclass(frozen=True)
class PromptFormat:
    """``template`` is used for models without a chat template (base models): the prompt is
    ``template.format(**fields)`` and the expected completion ``completion_template``.
    ``chat_template`` is the user message for models with a chat template; the tokenizer's
    own template then wraps it (with the generation prompt).

    ``stop`` cuts base-model completions; ``chat_stop`` cuts chat replies (None: the same as
    ``stop``), since a chat model's answer may contain what ends a few-shot completion.
    """

    template: str
    chat_template: str
    completion_template: str
    stop: tuple[str, ...]
    max_new_tokens: int
    chat_stop: tuple[str, ...] | None = None

    def prompt(self, backend: Backend, fields: dict[str, str]) -> str:
        chat = backend.chat_prompt(
            [{"role": "user", "content": self.chat_template.format(**fields)}]
        )
        return chat if chat is not None else self.template.format(**fields)

    def generation(self, backend: Backend, batch_size: int = 64) -> GenerationSettings:
        """The greedy settings for ``backend``'s model: chat stops for a chat model."""
        stop = self.chat_stop if is_chat(backend) and self.chat_stop is not None else self.stop
        return GenerationSettings(
            max_new_tokens=self.max_new_tokens, stop=tuple(stop), batch_size=batch_size
        )

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["stop"] = list(self.stop)
        if self.chat_stop is not None:
            d["chat_stop"] = list(self.chat_stop)
        else:
            d.pop("chat_stop")
        return d

    def describe(self) -> str:
        """Markdown bullets stating the protocol exactly."""
        chat_stop = (
            f" (chat models: {json.dumps(list(self.chat_stop))})"
            if self.chat_stop is not None
            else ""
        )
        return (
            f"- Base models (no chat template in the tokenizer) get the prompt "
            f"`{json.dumps(self.template)}` and should continue it with "
            f"`{json.dumps(self.completion_template)}`.\n"
            f"- Models whose tokenizer has a chat template get one user message, "
            f"`{json.dumps(self.chat_template)}`, wrapped by that template with the "
            f"generation prompt.\n"
            f"- Greedy decoding, at most {self.max_new_tokens} new tokens, cut at any of "
            f"{json.dumps(list(self.stop))}{chat_stop} or at the end-of-sequence token.\n"
            f"- The same settings, as JSON, are in `data/eval_format.json`."
        )


def is_chat(backend: Backend) -> bool:
    """Whether ``backend``'s model has a chat template (and is prompted as a chat model)."""
    return backend.chat_prompt([{"role": "user", "content": "x"}]) is not None


def read_jsonl(path: Path, limit: int | None = None) -> list[dict[str, Any]]:
    """The rows of a JSON-lines split written by :func:`write_jsonl`, the first ``limit``
    when given. Strict: a malformed line raises, since a split is harness-written data."""
    with open(path) as fh:
        rows = [json.loads(line) for line in fh]
    return rows[:limit] if limit else rows


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    """Write rows as JSON lines, atomically (temp file + rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    with os.fdopen(fd, "w") as fh:
        for row in rows:
            fh.write(json.dumps(row) + "\n")
    os.replace(tmp, path)
