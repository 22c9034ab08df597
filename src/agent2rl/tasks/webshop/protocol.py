"""How the grader prompts a model in a WebShop session and reads its action.

Standard library only on purpose: the same file is the agent's ``data/protocol.py`` (beside
``data/protocol_core.py``, the core the tasks' protocol files share, and the run's settings,
``data/eval_format.json``), so that training code builds exactly the prompts the grader
builds and parses replies the same way. The module functions have the same names and
meanings as ALFWorld's protocol file, so that one training script serves both.

One step, for a model without a chat template (a base model), is the session's transcript::

    Instruction: i need a paraben free shampoo with scent: lavender, and price lower than 30.00
    Search                                              <- up to ``history`` earlier steps:
    > search[paraben free shampoo]                         the page, then the action
    Back to Search [SEP] Page 1 (Total results: 12) [SEP] Next > [SEP] B0K3X9 [SEP] ...
    Actions: click[back to search], click[next >], click[b0k3x9], ...   <- if listed
    >

and the model continues with `` click[b0k3x9]`` and a newline. A page is shown without the
instruction WebShop repeats on every page (it is the first line), whitespace collapsed, and
cut to ``max_observation_chars`` (``...`` marks a cut; 0 = never cut). A model with a chat
template gets the same text without the final ``>`` as one user message, followed by
:data:`CHAT_INSTRUCTION`, and replies with the action.

Because each prompt plus its action is a stretch of one transcript (when no action list is
shown), a base model can be trained on whole sessions at once (see :func:`transcript`).

``protocol = "react"`` (webshop's default since task version 2) is the paper's reference's
chat ReAct prompt instead (:func:`react_message`): :data:`REACT_SYSTEM` as a system turn, as
the reference sends it (``webshop/eval.py``: ``llm_engine.chat`` with a system and a user
message; :func:`chat_messages` builds both), then the reference's user text
(:meth:`EpisodeFormat.chat_message`): the task, the instruction, the page's actions listed
(``search[<your query>]`` on the search page, ``click[<target>]`` for each click target),
its rules, and the last ``history`` steps as ``Observation n: <page>`` / ``Action n:
<action>`` pairs, the current page and ``Action N:``. As in the reference, a step's
``Observation n`` is the page its action led to (the page it answered is not shown), and
pages are WebShop's text, instruction included. A model without a chat template gets the
system text, a blank line and the user text as one raw prompt (the reference's
``llm_engine.chat`` needs a chat template). An action the page does not offer is played as
in the reference, by WebShop's environment, which stays on the same page (``invalid=env``).

Edge cases:

- The oldest history steps are dropped until the prompt fits in ``max_prompt_chars``; the
  instruction line, the current page and the action list are always kept.
- :func:`parse_action` reads the first non-empty line of the reply, drops a leading ``>`` or
  ``Action:`` (``Action 3:`` too), lowercases it, collapses whitespace, writes ``choose[``
  as ``click[`` and keeps ``search[...]`` / ``click[...]`` up to its first ``]``. An action
  the page does not offer (or an empty reply) is refused: the turn is used and the next
  page shown is ``Refused: <why>``.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

if __package__:  # agent2rl's own copy
    from agent2rl.tasks.shared import protocol_core as core
else:  # the workspace's data/protocol.py: the core is data/protocol_core.py, beside it
    sys.path.append(os.path.dirname(os.path.abspath(__file__)))
    import protocol_core as core  # type: ignore[import-not-found,no-redef]

PROTOCOL_VERSION = "1"
CHAT_INSTRUCTION = "Reply with the next action only: search[query] or click[item]."
STOP = ("\n",)
#: what the grader shows after an action the page refused (the reason follows)
REFUSED_PREFIX = "Refused: "
#: the reference's system message for its WebShop agent (verbatim)
REACT_SYSTEM = (
    "You are a helpful shopping assistant browsing an e-commerce website. "
    "Given a user instruction, current observation, and available actions, "
    "pick the best action to find and purchase a matching product. "
    "Output ONLY one action (e.g., 'search[red shoes]', 'click[buy now]') "
    "with NO extra text, NO explanation."
)
#: the reference's user prompt before the history (``{instruction}``, ``{actions}``)
REACT_HEAD = """You are shopping on an e-commerce website. Find and purchase a product matching the user's instruction.

Instruction: {instruction}

Available actions:
{actions}

Rules:
- Output ONLY one action from the available actions list above.
- For search, use: search[your query]
- For clicking, use: click[exact text from the list]
- Do NOT output anything other than the action.

Now it's your turn:
"""  # noqa: E501 (the reference's text, verbatim)
_INSTRUCTION = re.compile(r"^(?:WebShop \[SEP\] )?Instruction: \[SEP\] .*? \[SEP\] ", re.S)
_LEAD = re.compile(r"^(?:>|action(?:\s*\d+)?\s*:)\s*", re.I)
_COMMAND = re.compile(r"^(search|click)\[[^\]]*\]")


@dataclass(frozen=True)
class EpisodeFormat(core.FormatBase):
    """The settings of the protocol for one run (``data/eval_format.json``).

    ``max_steps``: actions per session before it ends unbought. ``history``: earlier steps
    shown. ``max_prompt_chars``: prompt size the history is trimmed to.
    ``max_observation_chars``: a page's text is cut to this (0: never). ``max_new_tokens``:
    the longest reply; generation also stops at a newline or end of sequence.
    ``show_admissible``: whether the page's actions are listed. ``separator``: what stands
    between a page's parts (WebShop's ``" [SEP] "``; a shorter one saves a small model's
    context).
    """

    max_steps: int
    history: int
    max_prompt_chars: int
    max_new_tokens: int
    show_admissible: bool = True
    max_observation_chars: int = 0
    separator: str = " [SEP] "
    stop: tuple[str, ...] = STOP
    version: str = PROTOCOL_VERSION
    #: ``transcript`` (the module docstring's first form) or ``react`` (the reference's
    #: chat ReAct prompt, :func:`react_message`); training code reads it
    protocol: str = "transcript"
    KIND = "webshop-episode"
    CHAT_INSTRUCTION = CHAT_INSTRUCTION

    @property
    def use_chat_template(self) -> bool:
        """A model with a chat template gets :meth:`chat_message` through it."""
        return True

    def chat_message(self, state: Any) -> str:
        """The user message of a chat model (under ``react`` without the system text,
        which goes in its own turn: :attr:`system_message`)."""
        messages = chat_messages(state.goal, state.steps, state.observation, state.admissible, self)
        return messages[-1]["content"]

    @property
    def system_message(self) -> str | None:
        """The system turn a chat model gets before :meth:`chat_message` (``react``: the
        reference's :data:`REACT_SYSTEM`), or None."""
        return REACT_SYSTEM if self.protocol == "react" else None

    def parse(self, reply: str, state: Any) -> str:
        return parse_action(reply)


def shown_page(observation: str, fmt: EpisodeFormat) -> str:
    """A page as the prompt shows it: without WebShop's leading ``WebShop [SEP]
    Instruction: [SEP] <instruction> [SEP]``, on one line, its parts joined by
    ``fmt.separator``, cut to ``fmt.max_observation_chars`` (the cut ends with ``...``)."""
    text = core.one_line(_INSTRUCTION.sub("", observation.strip(), count=1))
    if fmt.separator != " [SEP] ":
        text = text.replace(" [SEP] ", fmt.separator)
    return core.cut(text, fmt.max_observation_chars)


# ``build_prompt`` and ``build_chat_message(goal, steps, observation, admissible, fmt,
# group=None)`` (protocol_core.prompt_builders; under ``react`` both :func:`react_message`):
# ``group`` (the goal's category) changes nothing, it is there for the signature ALFWorld's
# protocol file shares. (Lambdas: the functions they call are defined below.)
build_prompt, build_chat_message = core.prompt_builders(
    EpisodeFormat,
    lambda goal, steps, observation, admissible, fmt, _group: react_message(
        goal, steps, observation, admissible, fmt
    ),
    lambda *args: _render(*args),
)


def chat_messages(
    goal: str, steps: core.Steps, observation: str, admissible: Sequence[str], fmt: EpisodeFormat
) -> list[dict[str, str]]:
    """A chat model's messages at one step, as the grader sends them: under ``react`` the
    reference's system turn (:data:`REACT_SYSTEM`) and its user text; otherwise one user
    message (:func:`build_chat_message`)."""
    text = build_chat_message(goal, steps, observation, admissible, fmt)
    if fmt.protocol != "react":
        return [{"role": "user", "content": text}]
    user = text[len(REACT_SYSTEM) + 2 :]
    return [{"role": "system", "content": REACT_SYSTEM}, {"role": "user", "content": user}]


def react_message(
    goal: str, steps: core.Steps, observation: str, admissible: Sequence[str], fmt: EpisodeFormat
) -> str:
    """The reference's chat ReAct prompt at one step (module docstring): :data:`REACT_SYSTEM`,
    a blank line, :data:`REACT_HEAD`, then the last ``fmt.history`` steps as ``Observation
    n`` (the page the step's action led to) and ``Action n``, the current page and ``Action
    N:``. Pages are cut to ``fmt.max_observation_chars`` (0: never); the oldest shown steps
    are dropped while the prompt exceeds ``fmt.max_prompt_chars`` (0: no limit)."""
    # the reference's ``Available actions:``: one a line, indented by two spaces, the search
    # bar as ``search[<your query>]``
    shown = ["search[<your query>]" if a.startswith("search[") else a for a in admissible]
    actions = "\n".join(f"  {a}" for a in shown)
    head = REACT_SYSTEM + "\n\n" + REACT_HEAD.format(instruction=goal, actions=actions)
    limit, n = fmt.max_observation_chars, len(steps)
    after = core.observations_after(steps, observation)  # the page each action led to
    first = max(0, n - fmt.history) if fmt.history > 0 else n
    parts = [
        f"\nObservation {i + 1}: {core.cut(after[i], limit)}\nAction {i + 1}: {steps[i][1]}\n"
        for i in range(first, n)
    ]
    tail = f"\nObservation {n + 1}: {core.cut(observation, limit)}\nAction {n + 1}:"
    return core.trim_oldest(head, parts, tail, fmt.max_prompt_chars)


def transcript(
    goal: str, steps: core.Steps, fmt: EpisodeFormat | None = None
) -> tuple[str, list[tuple[str, str]]]:
    """The pieces of a whole session's transcript, for training on windows of it: the
    instruction line, then one (page text, action text) pair per step, where the page text
    ends with ``>`` and the action text is :func:`completion_for` the action. The
    instruction line followed by the pairs of steps ``j..t-1`` and the page text of step
    ``t`` is exactly :func:`build_prompt` at step ``t`` with ``t - j`` steps of history (no
    action list). ``fmt`` sets how pages are cut (None: never)."""
    fmt = fmt or EpisodeFormat(max_steps=1, history=0, max_prompt_chars=0, max_new_tokens=1)
    return core.transcript_pieces(_head(goal), steps, lambda o: shown_page(o, fmt))


def _head(goal: str) -> str:
    return f"Instruction: {core.one_line(goal)}\n"


def _render(
    goal: str, steps: core.Steps, observation: str, admissible: Sequence[str], fmt: EpisodeFormat
) -> str:
    tail = shown_page(observation, fmt) + "\n"
    if fmt.show_admissible and admissible:
        tail += "Actions: " + ", ".join(admissible) + "\n"
    return core.render_history(
        _head(goal), steps, tail, fmt.history, fmt.max_prompt_chars, lambda o: shown_page(o, fmt)
    )


def parse_action(reply: str) -> str:
    """The action in a model's reply (see the module docstring for the exact rule)."""
    line = core.one_line(_LEAD.sub("", core.first_line(reply)).lower())
    if line.startswith("choose["):
        line = "click[" + line[len("choose[") :]
    m = _COMMAND.match(line)
    return m.group(0) if m else line


completion_for = core.completion_for


def describe(fmt: EpisodeFormat) -> str:
    """Markdown bullets stating the protocol for ``description.md``."""
    session = (
        f"- Each session is played for at most {fmt.max_steps} actions; it ends at the "
        f"purchase (`click[buy now]`) with WebShop's reward in [0, 1], or unrewarded.\n"
    )
    if fmt.protocol == "react":
        return session + (
            f"- The prompt is the paper's reference's chat ReAct prompt (`react_message` in "
            f"`data/protocol.py`): its system text, the instruction, the page's actions "
            f"listed, its rules, the last {fmt.history} steps as `Observation n` (the page the "
            f"action led to) / `Action n`, the current page and `Action N:`. A chat model "
            f"gets the system text as a system turn and the rest as the user message, through "
            f"its chat template (`chat_messages`); a base model gets both as one text.\n"
            f"- Greedy decoding, at most {fmt.max_new_tokens} new tokens, cut at a newline. The "
            f"action is the first non-empty line of the reply without a leading `Action:`, "
            f"lowercased, `choose[` read as `click[`. An action the page does not offer uses "
            f"the turn and leaves the page as it was (as WebShop's environment does).\n"
            f"- `data/protocol.py` is the grader's own code for this; `data/eval_format.json` "
            f"holds these settings."
        )
    listing = "the page's actions (`Actions: ...`)" if fmt.show_admissible else "no action list"
    cut = (
        f", cut to {fmt.max_observation_chars} characters (`...` marks the cut)"
        if fmt.max_observation_chars
        else ""
    )
    return session + (
        f"- At each step the model gets the line `Instruction: ...`, up to {fmt.history} "
        f"earlier steps (the page, then `> action`), the current page and {listing}; a page "
        f"is its text as WebShop's text mode shows it (parts joined by `{fmt.separator.strip()}`) "
        f"without the instruction, on one line{cut}. The oldest steps are dropped to keep the "
        f"prompt within {fmt.max_prompt_chars} characters. A base model's prompt ends with "
        f'`>`; a chat model gets the same text plus "{CHAT_INSTRUCTION}" as one user '
        f"message.\n"
        f"- Greedy decoding, at most {fmt.max_new_tokens} new tokens, cut at a newline. The "
        f"action is the first non-empty line of the reply without a leading `>` or "
        f"`Action:`, lowercased, whitespace collapsed, `choose[` read as `click[`, and "
        f"`search[...]`/`click[...]` kept up to the first `]`. An action the page does not "
        f"offer uses the turn and the next page reads `{REFUSED_PREFIX}<why>`.\n"
        f"- `data/protocol.py` is the grader's own code for this (`build_prompt`, "
        f"`build_chat_message`, `parse_action`; `transcript` splits a whole session into "
        f"the same text, to train on several steps at once); `data/eval_format.json` holds "
        f"these settings."
    )
