"""The core every interactive task's episode protocol shares: its settings record, the
history-trimming renderer and the transcript split.

Standard library only, and importing nothing of the harness, on purpose: each task's
``protocol.py`` (ALFWorld's, WebShop's, DeepSearchQA's) is built on this file, and both are
copied into the agent's workspace, as ``data/protocol.py`` and ``data/protocol_core.py``, so
that training code builds exactly the prompts the grader builds. A task's own file keeps
what is its own: its prompt text, its action parser and (DeepSearchQA's) its reward.

The names here are the pieces a task's protocol file is written with: :class:`FormatBase`
(its ``EpisodeFormat``'s methods), :func:`prompt_builders` (its ``build_prompt`` and
``build_chat_message``), the history trimming (:func:`render_history`, :func:`trim_oldest`),
:func:`transcript_pieces`, and the text rules the three protocols have in common.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict
from typing import Any, ClassVar, TypeVar

#: one earlier step: (the observation it answered, the action taken)
Step = tuple[str, str]
#: an episode's earlier steps, oldest first
Steps = Sequence[Step]
_F = TypeVar("_F", bound="FormatBase")


class FormatBase:
    """What a task's frozen ``EpisodeFormat`` dataclass inherits: its ``eval_format.json``
    form and back, and the grader's :meth:`prompt` and :meth:`chat_message`. A subclass sets
    :attr:`KIND` (the ``kind`` key), :attr:`CHAT_INSTRUCTION` and (once its protocol file
    has them) :attr:`builders`, and has the fields ``stop`` (a tuple of strings) and
    ``protocol``."""

    KIND: ClassVar[str]
    CHAT_INSTRUCTION: ClassVar[str]
    #: the protocol file's ``build_prompt`` and ``build_chat_message`` (:func:`prompt_builders`)
    builders: ClassVar[tuple[Callable[..., str], Callable[..., str]]]

    # The grader's episode-protocol interface: ``state`` has ``goal``, ``steps``,
    # ``observation``, ``admissible`` and, when it has one, ``group``
    # (agent2rl.solvers.episode.EpisodeState).
    def prompt(self, state: Any) -> str:
        return self._build(self.builders[0], state)

    def chat_message(self, state: Any) -> str:
        return self._build(self.builders[1], state)

    def _build(self, build: Callable[..., str], state: Any) -> str:
        args = (state.goal, state.steps, state.observation, state.admissible, self)
        return build(*args, group=getattr(state, "group", None))

    def to_dict(self) -> dict[str, Any]:
        """The settings as JSON: the fields in order (``stop`` as a list), ``kind``, then
        :meth:`extra_settings`."""
        d = asdict(self)  # type: ignore[call-overload]  # a subclass is a dataclass
        d["stop"] = list(d["stop"])
        d["kind"] = self.KIND
        d.update(self.extra_settings())
        return d

    def extra_settings(self) -> dict[str, Any]:
        """Keys after ``kind`` in :meth:`to_dict`: the chat instruction unless overridden."""
        return {"chat_instruction": self.CHAT_INSTRUCTION}

    @classmethod
    def from_dict(cls: type[_F], d: dict[str, Any]) -> _F:
        """The format from :meth:`to_dict`'s output; keys that are not fields (``kind``,
        ``chat_instruction``...) are ignored, so an older or newer file still loads."""
        names = cls.__dataclass_fields__  # type: ignore[attr-defined]
        kw = {k: v for k, v in d.items() if k in names}
        if "stop" in kw:
            kw["stop"] = tuple(kw["stop"])
        return cls(**kw)


def prompt_builders(
    fmt_class: type[FormatBase],
    react: Callable[..., str],
    render: Callable[..., str],
    react_protocols: tuple[str, ...] = ("react",),
) -> tuple[Callable[..., str], Callable[..., str]]:
    """A protocol file's ``build_prompt`` and ``build_chat_message``, both called as
    ``(goal, steps, observation, admissible, fmt, group=None)`` with ``steps`` the earlier
    steps, oldest first, each as (the observation it answered, the action taken); they
    become ``fmt_class``'s :attr:`~FormatBase.builders`.

    Under a ``fmt.protocol`` in ``react_protocols`` both return ``react(goal, steps,
    observation, admissible, fmt, group)``: one text, whether or not the model has a chat
    template.
    Otherwise (the transcript protocol) both start with ``render(goal, steps, observation,
    admissible, fmt)``: ``build_prompt`` (a base model's prompt) ends it with ``>``, and
    ``build_chat_message`` (a chat model's user message) with ``fmt_class.CHAT_INSTRUCTION``."""

    def builder(name: str, end: str, doc: str) -> Callable[..., str]:
        def build(
            goal: str,
            steps: Steps,
            observation: str,
            admissible: Sequence[str],
            fmt: Any,
            group: str | None = None,
        ) -> str:
            if fmt.protocol in react_protocols:
                return react(goal, steps, observation, admissible, fmt, group)
            return render(goal, steps, observation, admissible, fmt) + end

        build.__name__ = build.__qualname__ = name
        build.__doc__ = doc
        return build

    fmt_class.builders = (
        builder("build_prompt", ">", "The text prompt at one step (see the module docstring)."),
        builder(
            "build_chat_message",
            fmt_class.CHAT_INSTRUCTION,
            "The user message for a chat model at one step: the prompt's text, then the "
            "instruction (under the react protocol: ``build_prompt``'s text).",
        ),
    )
    return fmt_class.builders


def one_line(text: str) -> str:
    """``text`` on one line: every run of whitespace (newlines included) one space."""
    return " ".join(text.split())


def cut(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, the cut ending with ``...`` (0: never cut; a
    limit under 3 gives just ``...``)."""
    if limit and len(text) > limit:
        return text[: max(0, limit - 3)].rstrip() + "..."
    return text


def first_line(reply: str) -> str:
    """The first non-empty line of ``reply``, stripped; ``""`` when there is none."""
    return next((line.strip() for line in reply.splitlines() if line.strip()), "")


def completion_for(action: str) -> str:
    """The completion a base model should produce for ``action`` after the prompt's ``>``."""
    return f" {action}\n"


def observations_after(steps: Sequence[Step], observation: str) -> list[str]:
    """The observation each earlier step's action got: the next step's, and ``observation``
    (the current one) for the last step. Empty without steps."""
    return [o for o, _ in steps[1:]] + ([observation] if steps else [])


def trim_oldest(head: str, parts: list[str], tail: str, max_chars: int) -> str:
    """``head``, ``parts`` and ``tail`` joined, the oldest (first) parts dropped while the
    whole exceeds ``max_chars`` (0: no limit). ``head`` and ``tail`` always stay."""
    while parts and max_chars and len(head) + sum(map(len, parts)) + len(tail) > max_chars:
        parts.pop(0)
    return head + "".join(parts) + tail


def render_history(
    head: str,
    steps: Sequence[Step],
    tail: str,
    history: int,
    max_chars: int,
    show: Callable[[str], str],
) -> str:
    """The transcript protocol's prompt without its final ``>``: ``head``, the last
    ``history`` steps (none when ``history`` <= 0) as ``show(observation)``, a newline,
    ``> action`` and a newline, then ``tail``. The oldest steps are dropped until the text
    plus the final ``>`` fits ``max_chars``; with ``max_chars`` 0 no step is shown."""
    shown = list(steps[-history:]) if history > 0 else []
    lines = [f"{show(o)}\n> {a}\n" for o, a in shown]
    while lines and len(head) + sum(map(len, lines)) + len(tail) + 1 > max_chars:
        lines.pop(0)
    return head + "".join(lines) + tail


def transcript_pieces(
    head: str, steps: Sequence[Step], show: Callable[[str], str]
) -> tuple[str, list[tuple[str, str]]]:
    """A whole episode's transcript in pieces: ``head``, then per step (``show(observation)``
    and ``\\n>``, :func:`completion_for` the action). ``head`` followed by the pieces of
    steps ``j..t-1`` and the observation text of step ``t`` is :func:`render_history` at
    step ``t`` with ``t - j`` steps shown (no tail beyond the observation) plus ``>``."""
    return head, [(f"{show(o)}\n>", completion_for(a)) for o, a in steps]
