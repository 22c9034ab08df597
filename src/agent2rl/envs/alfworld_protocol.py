"""How the grader prompts a model in an ALFWorld game and reads its action.

This file is self-contained (standard library only) on purpose: the harness grades with it,
and the same file is copied into the agent's workspace as ``data/alfworld_protocol.py`` so that
training code can build exactly the prompts the grader will build and parse replies the same
way. ``data/eval_format.json`` holds the run's settings for it.

One step of an episode, for a model without a chat template (a base model), is the game's
transcript so far::

    Your task is to: put a hot tomato in sinkbasin.
    You arrive at fridge 1. The fridge 1 is closed.    <- up to ``history`` earlier steps:
    > open fridge 1                                       the observation, then the action
    You open the fridge 1. The fridge 1 is open. In it, you see a tomato 1.
    Admissible actions: close fridge 1, examine fridge 1, ..., take tomato 1 from fridge 1
    >

and the model continues with `` take tomato 1 from fridge 1`` and a newline. The first
observation is the room's description ("You are in the middle of a room. ..."). A model with
a chat template gets the same text without the final ``>`` as one user message, followed by
:data:`CHAT_INSTRUCTION`, and replies with the action.

Because each prompt plus its action is a stretch of one transcript (when the admissible
actions are not listed), a base model can be trained on whole episodes at once: every
action in a window of the transcript that starts at an observation is supervised in the
context the grader would give it (see :func:`transcript`).

Edge cases:

- The oldest history steps are dropped until the prompt fits in ``max_prompt_chars``; the
  task line, the current observation and the admissible actions are always kept.
- Observations are shown on one line each (whitespace collapsed).
- ``help`` is never listed (it only prints the command list).
- :func:`parse_action` reads the first non-empty line of the reply, drops a leading ``>`` or
  ``Action:``, lowercases it, collapses whitespace and drops a final period. An empty reply
  becomes an empty action, which the game answers with "Nothing happens." like any action it
  does not know; so does anything that is not one of the admissible actions.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

PROTOCOL_VERSION = "2"
CHAT_INSTRUCTION = "Reply with the next action only, exactly as listed above."
STOP = ("\n",)
_BANNER = re.compile(r"^\s*-= Welcome to TextWorld, ALFRED! =-\s*", re.S)
_TASK = re.compile(r"\s*Your task is to:\s*(.*?)\s*$", re.S)


@dataclass(frozen=True)
class EpisodeFormat:
    """The settings of the protocol for one run (``data/eval_format.json``).

    ``max_steps``: actions per episode before it ends unwon. ``history``: earlier steps shown.
    ``max_prompt_chars``: prompt size the history is trimmed to. ``max_new_tokens``: the
    longest reply; generation also stops at a newline (``stop``) or end of sequence.
    ``show_admissible``: whether the admissible actions are listed.
    """

    max_steps: int
    history: int
    max_prompt_chars: int
    max_new_tokens: int
    show_admissible: bool = True
    stop: tuple[str, ...] = STOP
    version: str = PROTOCOL_VERSION

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["stop"] = list(self.stop)
        d["kind"] = "alfworld-episode"
        d["chat_instruction"] = CHAT_INSTRUCTION
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> EpisodeFormat:
        names = cls.__dataclass_fields__
        kw = {k: v for k, v in d.items() if k in names}
        if "stop" in kw:
            kw["stop"] = tuple(kw["stop"])
        return cls(**kw)


def split_intro(intro: str) -> tuple[str, str]:
    """(room description, goal) from a game's first observation: the banner is dropped and
    the "Your task is to: ..." line becomes the goal (without its final period)."""
    text = _BANNER.sub("", intro)
    m = _TASK.search(text)
    if not m:
        return text.strip(), ""
    return text[: m.start()].strip(), m.group(1).rstrip(".").strip()


def listed_actions(admissible: Sequence[str]) -> list[str]:
    """The admissible actions as the prompt lists them (``help`` left out, order kept)."""
    return [a for a in admissible if a != "help"]


def build_prompt(
    goal: str,
    steps: Sequence[tuple[str, str]],
    observation: str,
    admissible: Sequence[str],
    fmt: EpisodeFormat,
) -> str:
    """The text prompt for a base model at one step (see the module docstring).

    ``steps`` are the earlier steps, oldest first, each as (the observation it answered,
    the action taken): the first one's observation is the room's description. Only the last
    ``fmt.history`` are shown, fewer if the prompt would exceed ``fmt.max_prompt_chars``.
    """
    return _render(goal, steps, observation, admissible, fmt) + ">"


def build_chat_message(
    goal: str,
    steps: Sequence[tuple[str, str]],
    observation: str,
    admissible: Sequence[str],
    fmt: EpisodeFormat,
) -> str:
    """The user message for a chat model at one step (the same text, then the instruction)."""
    return _render(goal, steps, observation, admissible, fmt) + CHAT_INSTRUCTION


def transcript(goal: str, steps: Sequence[tuple[str, str]]) -> tuple[str, list[tuple[str, str]]]:
    """The pieces of a whole episode's transcript, for training on windows of it: the task
    line, then one (observation text, action text) pair per step, where the observation text
    ends with ``>`` and the action text is :func:`completion_for` the action. The task line
    followed by the pairs of steps ``j..t-1`` and the observation text of step ``t`` is
    exactly :func:`build_prompt` at step ``t`` with ``t - j`` steps of history shown (no
    admissible actions listed)."""
    return _task_line(goal), [(f"{_one_line(o)}\n>", completion_for(a)) for o, a in steps]


def _task_line(goal: str) -> str:
    return f"Your task is to: {goal}.\n"


def _render(
    goal: str,
    steps: Sequence[tuple[str, str]],
    observation: str,
    admissible: Sequence[str],
    fmt: EpisodeFormat,
) -> str:
    head = _task_line(goal)
    tail = _one_line(observation) + "\n"
    if fmt.show_admissible:
        tail += "Admissible actions: " + ", ".join(listed_actions(admissible)) + "\n"
    shown = list(steps[-fmt.history :]) if fmt.history > 0 else []
    lines = [f"{_one_line(o)}\n> {a}\n" for o, a in shown]
    while lines and len(head) + sum(map(len, lines)) + len(tail) + 1 > fmt.max_prompt_chars:
        lines.pop(0)
    return head + "".join(lines) + tail


def _one_line(text: str) -> str:
    return " ".join(text.split())


def parse_action(reply: str) -> str:
    """The action in a model's reply (see the module docstring for the exact rule)."""
    for line in reply.splitlines():
        line = line.strip()
        if line:
            break
    else:
        return ""
    line = re.sub(r"^(?:>|action\s*:)\s*", "", line, flags=re.I)
    line = " ".join(line.lower().split())
    return line[:-1] if line.endswith(".") else line


def completion_for(action: str) -> str:
    """The completion a base model should produce for ``action`` after the prompt's ``>``."""
    return f" {action}\n"


def describe(fmt: EpisodeFormat) -> str:
    """Markdown bullets stating the protocol for ``description.md``."""
    listing = "the admissible actions (without `help`)" if fmt.show_admissible else "no action list"
    return (
        f"- Each game is played for at most {fmt.max_steps} actions; it is won when its goal "
        f"holds. Score: the percentage of games won.\n"
        f"- At each step the model gets the task line, up to {fmt.history} earlier steps "
        f"(the observation, then `> action`), the current observation and {listing}, trimmed "
        f"to at most {fmt.max_prompt_chars} characters by dropping the oldest steps. A base "
        f"model's prompt ends with `>`; a chat model gets the same text plus "
        f'"{CHAT_INSTRUCTION}" as one user message.\n'
        f"- Greedy decoding, at most {fmt.max_new_tokens} new tokens, cut at a newline. The "
        f"action is the first non-empty line of the reply, without a leading `>` or "
        f"`Action:`, lowercased, whitespace collapsed, a final period dropped. An action the "
        f'game does not admit gets "Nothing happens." and uses up a step.\n'
        f"- `data/alfworld_protocol.py` is the grader's own code for this (`build_prompt`, "
        f"`build_chat_message`, `parse_action`; `transcript` splits a whole episode into "
        f"the same text, to train on several steps at once); `data/eval_format.json` holds "
        f"these settings."
    )
