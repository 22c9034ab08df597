"""How the grader prompts a model in an ALFWorld game and reads its action.

This file is standard library only on purpose: the harness grades with it, and the same
file is copied into the agent's workspace as ``data/protocol.py`` (with
``data/protocol_core.py``, the core it shares with the other tasks' protocol files, and
``data/react_prompts.json``) so that training code can build exactly the prompts the grader
will build and parse replies the same way. ``data/eval_format.json`` holds the run's settings
for it. :class:`EpisodeFormat` is the grader's :class:`~agent2rl.solvers.episode.
EpisodeProtocol` (by its methods' shape: this file imports nothing of the harness).

Two protocols (``EpisodeFormat.protocol``):

``react`` (the paper's): the ReAct prompt of the reference implementation's evaluator
(RD-Agent ``rdagent/scenarios/rl/autorl_bench/benchmarks/alfworld/eval.py``, itself ReAct's
``alfworld.ipynb``). Every model, chat template or not, gets one text prompt::

    Interact with a household to solve a task. Here are two examples.
    <exemplar react_<type>_1><exemplar react_<type>_0>
    Here is the task.
    You are in the middle of a room. Looking quickly around you, you see ...
    Your task is to: put some spraybottle on toilet.
    > go to cabinet 1                                   <- every earlier step: " action",
    On the cabinet 1, you see a cloth 1.                   then its observation
    >

The exemplars are ReAct's (``react_prompts.json``: byte for byte ReAct's
``prompts/alfworld_3prompts.json``, which the reference ships as ``react_prompts.json``),
chosen by the game's task type (:data:`REACT_TYPES`). The model continues after ``>``;
its reply, cut at the first newline, stripped of surrounding whitespace, is the action,
exactly as written (no mapping to an admissible action: the reference has none, and an
action the game does not know gets "Nothing happens."). A ``think: ...`` action is played
too (the game answers "Nothing happens." and it uses a step), but the prompt shows "OK." as
its observation. An observation starting "You arrive at loc " loses its first sentence
(ReAct's ``process_ob``). The whole history is shown: nothing is trimmed.

``transcript`` (agent2rl's, for models with a short context such as alfworld-lite's): one
step of an episode, for a model without a chat template (a base model), is the game's
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

Edge cases (transcript protocol):

- The oldest history steps are dropped until the prompt fits in ``max_prompt_chars``; the
  task line, the current observation and the admissible actions are always kept.
- Observations are shown on one line each (whitespace collapsed).
- ``help`` is never listed (it only prints the command list).
- :func:`parse_action` reads the first non-empty line of the reply, drops a leading ``>`` or
  ``Action:``, lowercases it, collapses whitespace and drops a final period. An empty reply
  becomes an empty action, which the game answers with "Nothing happens." like any action it
  does not know; so does anything that is not one of the admissible actions."""

from __future__ import annotations

import functools
import json
import os
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if __package__:  # agent2rl's own copy
    from agent2rl.tasks.shared import protocol_core as core
else:  # the workspace's data/protocol.py: the core is data/protocol_core.py, beside it
    sys.path.append(os.path.dirname(os.path.abspath(__file__)))
    import protocol_core as core  # type: ignore[import-not-found,no-redef]

PROTOCOL_VERSION = "2"
CHAT_INSTRUCTION = "Reply with the next action only, exactly as listed above."
STOP = ("\n",)
#: the protocols an :class:`EpisodeFormat` may name
PROTOCOLS = ("react", "transcript")
#: the reference evaluator's reply length (vLLM ``max_tokens=100``)
REACT_MAX_NEW_TOKENS = 100
REACT_INSTRUCTION = "Interact with a household to solve a task. Here are two examples.\n"
REACT_TASK_HEADER = "\nHere is the task.\n"
#: task-type prefix -> exemplar key, in the reference's order (the first prefix that a game's
#: task type starts with wins)
REACT_TYPES = (
    ("pick_and_place", "put"),
    ("pick_clean_then_place", "clean"),
    ("pick_heat_then_place", "heat"),
    ("pick_cool_then_place", "cool"),
    ("look_at_obj", "examine"),
    ("pick_two_obj", "puttwo"),
)
#: ReAct's exemplars, next to this file (in the workspace: ``data/react_prompts.json``)
REACT_PROMPTS_FILE = "react_prompts.json"
_BANNER = re.compile(r"^\s*-= Welcome to TextWorld, ALFRED! =-\s*", re.S)
_TASK = re.compile(r"\s*Your task is to:\s*(.*?)\s*$", re.S)


@dataclass(frozen=True)
class EpisodeFormat(core.FormatBase):
    """The settings of the protocol for one run (``data/eval_format.json``). ``protocol``:
    ``react or ``transcript`` (see the module docstring). ``max_steps``: actions per episode
    before it ends unwon. ``max_new_tokens``: the longest reply; generation also stops at a
    newline (``stop``) or end of sequence. The transcript protocol's own settings (the react
    protocol ignores them): ``history``, the earlier steps shown; ``max_prompt_chars``, the
    prompt size the history is trimmed to; ``show_admissible``, whether the admissible actions
    are listed."""

    max_steps: int
    history: int
    max_prompt_chars: int
    max_new_tokens: int
    show_admissible: bool = True
    stop: tuple[str, ...] = STOP
    version: str = PROTOCOL_VERSION
    protocol: str = "transcript"
    KIND = "alfworld-episode"
    CHAT_INSTRUCTION = CHAT_INSTRUCTION

    def __post_init__(self) -> None:
        if self.protocol not in PROTOCOLS:
            raise ValueError(f"unknown protocol {self.protocol!r}: one of {', '.join(PROTOCOLS)}")

    @property
    def use_chat_template(self) -> bool:
        """Whether a model with a chat template gets :meth:`chat_message` through it. The
        react protocol gives every model the text prompt, as the reference's evaluator does
        (vLLM text completion for any local model)."""
        return self.protocol != "react"

    def extra_settings(self) -> dict[str, Any]:
        if self.protocol == "react":
            return {
                "instruction": REACT_INSTRUCTION,
                "task_header": REACT_TASK_HEADER,
                "examples": REACT_PROMPTS_FILE,
            }
        return super().extra_settings()

    def parse(self, reply: str, state: Any) -> str:
        return react_action(reply) if self.protocol == "react" else parse_action(reply)


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


# ``build_prompt`` and ``build_chat_message(goal, steps, observation, admissible, fmt,
# group=None)`` (protocol_core.prompt_builders): the first step's observation is the room's
# description; ``group``, the game's task type (``pick_and_place_simple``...), picks the
# react protocol's exemplars. (Lambdas: the functions they call are defined below.)
build_prompt, build_chat_message = core.prompt_builders(
    EpisodeFormat,
    lambda goal, steps, observation, _admissible, _fmt, group: build_react_prompt(
        group, goal, steps, observation
    ),
    lambda *args: _render(*args),
)


@functools.cache
def react_examples() -> dict[str, str]:
    """ReAct's ALFWorld exemplars (``react_prompts.json`` next to this file), by key
    (``react_put_0``...)."""
    return json.loads((Path(__file__).parent / REACT_PROMPTS_FILE).read_text(encoding="utf-8"))


def react_examples_key(group: str | None) -> str:
    """The exemplar key (``put``, ``clean``, ``heat``, ``cool``, ``examine``, ``puttwo``) of
    a task type: the first of :data:`REACT_TYPES` whose prefix it starts with. Raises
    ValueError for a type outside the six (the reference skips such a game)."""
    for prefix, key in REACT_TYPES:
        if group and group.startswith(prefix):
            return key
    raise ValueError(f"no ReAct exemplars for task type {group!r}: not one of ALFWorld's six")


def react_instruction(group: str | None) -> str:
    """The fixed head of every react prompt for a task type: the instruction, the type's
    exemplars ``_1`` then ``_0`` (the reference's order) and the task header."""
    key, examples = react_examples_key(group), react_examples()
    shots = examples[f"react_{key}_1"] + examples[f"react_{key}_0"]
    return REACT_INSTRUCTION + shots + REACT_TASK_HEADER


def react_intro(room: str, goal: str) -> str:
    """The game's first observation as the reference shows it: the reset text without its
    banner paragraph (``"\\n".join(ob.split("\\n\\n")[1:])``), i.e. the room's description,
    a newline and the task line. Built from :func:`split_intro`'s parts, which drops the
    goal's final period: ALFWorld's goals all end with one, restored here."""
    return f"{room}\nYour task is to: {goal}."


def react_observation(observation: str, action: str) -> str:
    """An observation as the react prompt shows it after ``action``: "OK." after a
    ``think:`` action, else the game's text without a leading "You arrive at loc N. "
    sentence (ReAct's ``process_ob``; ALFWorld's own observations rarely have it)."""
    if action.startswith("think:"):
        return "OK."
    if observation.startswith("You arrive at loc "):
        observation = observation[observation.find(". ") + 2 :]
    return observation


def build_react_prompt(group: str | None, goal: str, steps: core.Steps, observation: str) -> str:
    """The react prompt at one step: :func:`react_instruction`, the intro, then
    `` action\\nobservation\\n>`` per earlier step. ``steps`` as for :func:`build_prompt`
    (the observations as the game gave them: this applies :func:`react_observation`)."""
    room = steps[0][0] if steps else observation
    after = core.observations_after(steps, observation)
    history = "".join(
        f" {a}\n{react_observation(o, a)}\n>" for (_, a), o in zip(steps, after, strict=True)
    )
    return react_instruction(group) + react_intro(room, goal) + "\n>" + history


def react_action(reply: str) -> str:
    """The action in a reply under the react protocol: the reply (already cut at the first
    newline by the ``stop``) stripped of surrounding whitespace, nothing else. Casing, a
    leading ``>`` and a final period are kept: the game judges the action as written."""
    return reply.split("\n", 1)[0].strip()


def transcript(goal: str, steps: core.Steps) -> tuple[str, list[tuple[str, str]]]:
    """The pieces of a whole episode's transcript, for training on windows of it: the task
    line, then one (observation text, action text) pair per step, where the observation text
    ends with ``>`` and the action text is :func:`completion_for` the action. The task line
    followed by the pairs of steps ``j..t-1`` and the observation text of step ``t`` is
    exactly :func:`build_prompt` at step ``t`` with ``t - j`` steps of history shown (no
    admissible actions listed)."""
    return core.transcript_pieces(_task_line(goal), steps, core.one_line)


def _task_line(goal: str) -> str:
    return f"Your task is to: {goal}.\n"


def _render(
    goal: str, steps: core.Steps, observation: str, admissible: Sequence[str], fmt: EpisodeFormat
) -> str:
    tail = core.one_line(observation) + "\n"
    if fmt.show_admissible:
        tail += "Admissible actions: " + ", ".join(listed_actions(admissible)) + "\n"
    return core.render_history(
        _task_line(goal), steps, tail, fmt.history, fmt.max_prompt_chars, core.one_line
    )


def parse_action(reply: str) -> str:
    """The action in a model's reply (see the module docstring for the exact rule)."""
    line = re.sub(r"^(?:>|action\s*:)\s*", "", core.first_line(reply), flags=re.I)
    line = " ".join(line.lower().split())
    return line[:-1] if line.endswith(".") else line


completion_for = core.completion_for


def describe(fmt: EpisodeFormat) -> str:
    """Markdown bullets stating the protocol for ``description.md``."""
    head = (
        f"- Each game is played for at most {fmt.max_steps} actions; it is won when its goal "
        f"holds. Score: the percentage of games won.\n"
    )
    if fmt.protocol == "react":
        return head + (
            f"- The protocol is the paper's (ReAct's ALFWorld evaluation, as the reference "
            f"implementation runs it). Every model, with a chat template or not, gets one text "
            f"prompt, no chat template applied: "
            f"{json.dumps(REACT_INSTRUCTION)}, then two worked examples of the game's task "
            f"type (ReAct's, in `data/{REACT_PROMPTS_FILE}`: `react_<type>_1` then "
            f"`react_<type>_0`, with `<type>` one of put, clean, heat, cool, examine, "
            f"puttwo), then {json.dumps(REACT_TASK_HEADER)}, the room's description, "
            f"`Your task is to: <goal>.` and `\\n>`. After each action the prompt grows by "
            f'`" <action>\\n<observation>\\n>"`; the whole history is kept.\n'
            f"- Greedy decoding, at most {fmt.max_new_tokens} new tokens, cut at a newline. The "
            f"action is the reply stripped of surrounding whitespace, exactly as written: it is "
            f"not matched to an admissible action, and one the game does not know gets "
            f'"Nothing happens." and uses up a step. A `think: ...` action also uses a step; '
            f'the prompt shows "OK." after it.\n'
            f"- `data/protocol.py` is the grader's own code for this (`build_prompt` with the "
            f"game's `group`, `react_action`); `data/eval_format.json` holds these settings."
        )
    listing = "the admissible actions (without `help`)" if fmt.show_admissible else "no action list"
    return head + (
        f"- At each step the model gets the task line, up to {fmt.history} earlier steps "
        f"(the observation, then `> action`), the current observation and {listing}, trimmed "
        f"to at most {fmt.max_prompt_chars} characters by dropping the oldest steps. A base "
        f"model's prompt ends with `>`; a chat model gets the same text plus "
        f'"{CHAT_INSTRUCTION}" as one user message.\n'
        f"- Greedy decoding, at most {fmt.max_new_tokens} new tokens, cut at a newline. The "
        f"action is the first non-empty line of the reply, without a leading `>` or "
        f"`Action:`, lowercased, whitespace collapsed, a final period dropped. An action the "
        f'game does not admit gets "Nothing happens." and uses up a step.\n'
        f"- `data/protocol.py` is the grader's own code for this (`build_prompt`, "
        f"`build_chat_message`, `parse_action`; `transcript` splits a whole episode into "
        f"the same text, to train on several steps at once); `data/eval_format.json` holds "
        f"these settings."
    )
