"""How a single-turn task queries the model, stated as data so the grader and the agent share
one truth.

The workspace builder writes the task's :class:`PromptFormat` into ``data/eval_format.json``
and the task describes it in ``description.md``; the grader's :class:`~agent2rl.solvers.
generate.Generate` solver builds every prompt through the same object, so an agent can train
for exactly what it will be asked.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

from agent2rl.inference.backend import Backend, GenerationSettings


@dataclass(frozen=True)
class PromptFormat:
    """``template`` is used for models without a chat template (base models): the prompt is
    ``template.format(**fields)`` and the expected completion ``completion_template``.
    ``chat_template`` is the user message for models with a chat template; the tokenizer's
    own template then wraps it (with the generation prompt), and may do no more than wrap:
    every chat prompt is rendered through
    :func:`~agent2rl.inference.backend.apply_chat_template`, whichever the backend, which
    refuses a template that does not preserve the messages' texts.

    ``chat_shots`` are worked examples for chat models: (user, assistant) turns put before the
    user message, verbatim (they are not formatted with the fields), as a few-shot chat
    conversation.

    ``stop`` cuts base-model completions; ``chat_stop`` cuts chat replies (None: the same as
    ``stop``), since a chat model's answer may contain what ends a few-shot completion.
    """

    template: str
    chat_template: str
    completion_template: str
    stop: tuple[str, ...]
    max_new_tokens: int
    chat_stop: tuple[str, ...] | None = None
    chat_shots: tuple[tuple[str, str], ...] = ()

    def chat_messages(self, fields: dict[str, str]) -> list[dict[str, str]]:
        """The conversation a chat model is given: the shots' turns, then the user message."""
        shots = [
            {"role": role, "content": text}
            for user, assistant in self.chat_shots
            for role, text in (("user", user), ("assistant", assistant))
        ]
        return [*shots, {"role": "user", "content": self.chat_template.format(**fields)}]

    def prompt(self, backend: Backend, fields: dict[str, str]) -> str:
        chat = backend.chat_prompt(self.chat_messages(fields))
        return chat if chat is not None else self.template.format(**fields)

    def generation(self, backend: Backend, batch_size: int = 64) -> GenerationSettings:
        """The greedy settings for ``backend``'s model: chat stops for a chat model."""
        stop = self.chat_stop if is_chat(backend) and self.chat_stop is not None else self.stop
        return GenerationSettings(
            max_new_tokens=self.max_new_tokens, stop=tuple(stop), batch_size=batch_size
        )

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self) | {
            "stop": list(self.stop),
            "chat_stop": list(self.chat_stop or ()),
            "chat_shots": [list(shot) for shot in self.chat_shots],
        }
        if self.chat_stop is None:
            del d["chat_stop"]
        # Left out when empty, so that a format without shots keeps its dict (and eval hash).
        if not self.chat_shots:
            del d["chat_shots"]
        return d

    def describe(self) -> str:
        """Markdown bullets stating the protocol exactly."""
        chat_stop = (
            f" (chat models: {json.dumps(list(self.chat_stop))})"
            if self.chat_stop is not None
            else ""
        )
        conversation = (
            f"{len(self.chat_shots)} worked examples as earlier (user, assistant) turns "
            f"(`chat_shots` in `data/eval_format.json`), then the user message "
            if self.chat_shots
            else "one user message, "
        )
        return (
            f"- Base models (no chat template in the tokenizer) get the prompt "
            f"`{json.dumps(self.template)}` and should continue it with "
            f"`{json.dumps(self.completion_template)}`.\n"
            f"- Models whose tokenizer has a chat template get {conversation}"
            f"`{json.dumps(self.chat_template)}`, wrapped by that template with the "
            f"generation prompt. The template may only wrap the messages (role markers, "
            f"special tokens, fixed text): a submission whose template drops, changes or "
            f"reads their text fails.\n"
            f"- Greedy decoding, at most {self.max_new_tokens} new tokens, cut at any of "
            f"{json.dumps(list(self.stop))}{chat_stop} or at the end-of-sequence token.\n"
            f"- The same settings, as JSON, are in `data/eval_format.json`."
        )


def is_chat(backend: Backend) -> bool:
    """Whether ``backend``'s model has a chat template (and is prompted as a chat model).
    Renders a one-word message through the same checked path as every prompt."""
    return backend.chat_prompt([{"role": "user", "content": "x"}]) is not None
