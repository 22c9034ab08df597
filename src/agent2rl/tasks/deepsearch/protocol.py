"""How the grader prompts a model in a search episode, reads its action, and scores its
answer without a judge.

Standard library only on purpose: the same file is the agent's ``data/protocol.py`` (beside
``data/protocol_core.py``, the core the tasks' protocol files share, and the run's settings,
``data/eval_format.json``), so that training code builds exactly the prompts the grader
builds, parses replies the same way and computes the same offline reward. The module
functions have the same names and meanings as the WebShop and ALFWorld protocol files.

An episode is a ReAct-style tool loop with two actions:

- ``search[query]``: the search backend's top results, one line each
  (``[1] Title: snippet``);
- ``answer[text]``: the final answer; the episode ends. For a question whose answer is a
  set, the items are separated by commas (``answer[Ama Kell, Bo Rinn]``).

One step, for a model without a chat template (a base model), is the episode's transcript::

    Question: In which town was the founder of the Amber Loom Society born?
    Search with search[query]; answer with answer[text].    <- up to ``history`` earlier
    > search[Amber Loom Society founded]                       steps: the observation,
    [1] Amber Loom Society: It was founded by Tavo Quell ...   then the action; then the
    >                                                          current observation

and the model continues with `` search[Tavo Quell born]`` and a newline. A model with a chat
template gets the same text without the final ``>`` as one user message, followed by
:data:`CHAT_INSTRUCTION`, and replies with the action.

Edge cases:

- The oldest history steps are dropped until the prompt fits in ``max_prompt_chars``; the
  question line and the current observation are always kept. An observation is shown on one
  line, cut to ``max_observation_chars`` (``...`` marks a cut; 0 = never cut).
- :func:`parse_action` reads the first non-empty line of the reply, drops a leading ``>``
  or ``Action:`` (``Action 3:`` too), collapses whitespace and keeps ``search[...]`` /
  ``answer[...]`` (the command lowercased, its argument as written) up to the first ``]``
  (a reply cut before its ``]`` gets one). Anything else is refused: the turn is used and
  the next observation reads ``Refused: <why>``.

``protocol = "react"`` (task version 2's default) is the paper's reference loop as this
protocol's shape allows (``reference``, :class:`ReferenceEpisode`, is that loop exactly):
every model gets raw text (no chat template), the instructions
:data:`REACT_SYSTEM_PROMPT`, then ``Question: <question>`` / ``Answer type: Single Answer``
(or ``Set Answer``) and ``Thought:``; the model writes a thought and ``Action: search[...]``
or ``Action: answer[...]``; each earlier step follows as `` Action: <action>`` /
``Observation: <result>`` / ``Thought:``::

    You are a research assistant that answers questions by searching the web.
    ...(the rules)...

    Question: In which town was the founder of the Amber Loom Society born?
    Answer type: Single Answer

    Thought: Action: search[Amber Loom Society founder]
    Observation: [1] Amber Loom Society: It was founded by Tavo Quell ...
    Thought:

:func:`parse_action` then takes the first ``Action: search[...]`` / ``Action: answer[...]``
in the reply (:func:`parse_react_action`). Differences from the reference, on purpose: an
earlier step shows its action but not the thought the model wrote before it (the grader
keeps actions only, and training code can rebuild the prompt from actions); generation
stops at ``\nObservation:`` and ``\nThought:`` but not at ``\nAction:`` (the reference's
third stop ends a reply that puts its action on a new line before the action, and then
forces an answer with a second generation, which this protocol has no place for); a reply
without an action uses the turn (``Refused: ...``). The oldest steps are dropped to keep
the prompt within ``max_prompt_chars`` (the reference's context is 4,096 tokens).

Answers without a judge (:func:`answer_score`): both sides are normalised
(:func:`normalize_answer`: lowercase, accents and punctuation removed, articles dropped,
whitespace collapsed). A single answer scores 1 when it equals the gold answer; a set
answer is split into items (:func:`answer_items`) and scores the F1 of the two sets.
"""

from __future__ import annotations

import functools
import os
import re
import string
import sys
import unicodedata
from dataclasses import dataclass
from typing import Any

if __package__:  # agent2rl's own copy
    from agent2rl.tasks.shared import protocol_core as core
else:  # the workspace's data/protocol.py: the core is data/protocol_core.py, beside it
    sys.path.append(os.path.dirname(os.path.abspath(__file__)))
    import protocol_core as core  # type: ignore[import-not-found,no-redef]

PROTOCOL_VERSION = "1"
CHAT_INSTRUCTION = "Reply with the next action only: search[query] or answer[your answer]."
STOP = ("\n",)
#: what the grader shows after an action the environment refused (the reason follows)
REFUSED_PREFIX = "Refused: "
#: the answer types (DeepSearchQA's ``answer_type``, normalised)
SINGLE = "single"
SET = "set"
#: the paper's reference's instructions for its DeepSearchQA ReAct loop (verbatim)
REACT_SYSTEM_PROMPT = """You are a research assistant that answers questions by searching the web.

You must follow this format strictly:
Thought: [your reasoning]
Action: search[your search query]   <- to search the web
  OR
Action: answer[Paris]   <- to give final answer

Rules:
- Always start with a Thought
- Use search[] to find information
- Use answer[] ONLY when you have enough information
- For Set Answer questions, list all items separated by commas
- Be concise and factual
"""
#: where the ReAct protocol's generation stops (the reference's, less ``\nAction:``)
REACT_STOP = ("\nObservation:", "\nThought:")
#: ``protocol = "reference"``: the reference's stop strings, in its order
#: (``deepsearchqa/eval.py`` line 96)
REFERENCE_STOP = ("\nAction:", "\nThought:", "\nObservation:")
#: the forced answer's generation: appended text, its output limit and stop (eval.py 246-247)
FORCED_ANSWER = "\nAction: answer["
FORCED_MAX_NEW_TOKENS = 128
FORCED_STOP = ("]",)
#: the template's example answer the reference refuses (eval.py 251, 260, 276)
PLACEHOLDER_ANSWER = "your final answer"
#: what the reference appends after a placeholder answer (eval.py 262)
PLACEHOLDER_RETRY = "\nThat is not a valid answer. Please think again.\nThought:"
#: the reference's answer when no step gave one (eval.py 277)
NO_ANSWER = "I don't know"
#: the reference's search observations: the top results' snippets joined (eval.py 305-306)
SNIPPET_JOIN = " | "
NO_RESULTS = "No results found."
#: DeepSearchQA's answer types as the reference's prompt names them
ANSWER_TYPE_NAMES = {"single": "Single Answer", "set": "Set Answer"}
_REACT_ACTION = re.compile(r"Action:\s*(search|answer)\[(.+?)\]", re.S | re.I)
_LEAD = re.compile(r"^(?:>|action(?:\s*\d+)?\s*:)\s*", re.I)
_COMMAND = re.compile(r"^(search|answer)\[([^\]]*)\]?", re.I)
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_ITEM_SPLIT = re.compile(r"\s*(?:[,;\n]|\band\b|&)\s*")


@dataclass(frozen=True)
class EpisodeFormat(core.FormatBase):
    """The settings of the protocol for one run (``data/eval_format.json``).

    ``max_steps``: actions per episode before it ends unanswered (the reference's ReAct loop
    allows 6). ``history``: earlier steps shown. ``max_prompt_chars``: prompt size the
    history is trimmed to. ``max_observation_chars``: an observation is cut to this (0:
    never). ``max_new_tokens``: the longest reply; generation also stops at a newline.
    """

    max_steps: int
    history: int
    max_prompt_chars: int
    max_new_tokens: int
    max_observation_chars: int = 0
    #: always False: the environment takes free text and lists no actions (the field is
    #: there for training code shared with the WebShop and ALFWorld protocol files)
    show_admissible: bool = False
    stop: tuple[str, ...] = STOP
    version: str = PROTOCOL_VERSION
    #: ``transcript`` (the module docstring's first form) or ``react`` (the reference's)
    protocol: str = "transcript"
    KIND = "deepsearch-episode"
    CHAT_INSTRUCTION = CHAT_INSTRUCTION

    @property
    def use_chat_template(self) -> bool:
        """A model with a chat template gets :meth:`chat_message` through it (the
        ``transcript`` protocol); ``react`` and ``reference`` give every model raw text."""
        return self.protocol == "transcript"

    def parse(self, reply: str, state: Any) -> str:
        if self.protocol in ("react", "reference"):
            return parse_react_action(reply)
        return parse_action(reply)


def shown_observation(observation: str, fmt: EpisodeFormat) -> str:
    """An observation as the prompt shows it: on one line, cut to
    ``fmt.max_observation_chars`` (the cut ends with ``...``)."""
    return core.cut(core.one_line(observation), fmt.max_observation_chars)


# ``build_prompt`` and ``build_chat_message(goal, steps, observation, admissible, fmt,
# group=None)`` (protocol_core.prompt_builders). Under ``react`` or ``reference`` (no chat
# template) both are :func:`react_prompt`, ``goal`` then the question, a newline and its
# ``Answer type: ...`` line (under ``reference`` from actions only: the exact prompt,
# thoughts included, is :class:`ReferenceEpisode`'s). ``admissible`` and ``group`` change
# nothing (free text): they are there for the signature the other protocol files share.
# (Lambdas: the functions they call are defined below.)
build_prompt, build_chat_message = core.prompt_builders(
    EpisodeFormat,
    lambda goal, steps, observation, _admissible, fmt, _group: react_prompt(
        goal, steps, observation, fmt
    ),
    lambda goal, steps, observation, _admissible, fmt: _render(goal, steps, observation, fmt),
    react_protocols=("react", "reference"),
)


def react_prompt(goal: str, steps: core.Steps, observation: str, fmt: EpisodeFormat) -> str:
    """The reference's ReAct prompt (module docstring): the instructions, ``Question:``
    and ``goal`` (its answer-type line included), then every earlier step's action and the
    observation it got (cut to ``fmt.max_observation_chars``), each followed by
    ``Thought:``. The oldest steps are dropped until the prompt fits
    ``fmt.max_prompt_chars`` (the instructions and the question always stay)."""
    head = f"{REACT_SYSTEM_PROMPT}\n\nQuestion: {goal.strip()}\n\nThought:"
    after = core.observations_after(steps, observation)
    parts = [
        f" Action: {a}\nObservation: {shown_observation(o, fmt)}\nThought:"
        for (_, a), o in zip(steps, after, strict=True)
    ]
    return core.trim_oldest(head, parts, "", fmt.max_prompt_chars)


def parse_react_action(reply: str) -> str:
    """The first ``Action: search[...]`` or ``Action: answer[...]`` in ``reply`` (the
    command lowercased, the argument stripped), as the reference reads it; without one, the
    reply's first non-empty line (refused by the environment)."""
    m = _REACT_ACTION.search(reply)
    if m:
        return f"{m.group(1).lower()}[{m.group(2).strip()}]"
    return parse_action(reply)


def react_goal(question: str, answer_type: str) -> str:
    """The ``goal`` of a question under the ``react`` protocol: the question, then the
    reference's ``Answer type:`` line."""
    return f"{question.strip()}\nAnswer type: {ANSWER_TYPE_NAMES.get(answer_type, 'Single Answer')}"


def transcript(
    goal: str, steps: core.Steps, fmt: EpisodeFormat | None = None
) -> tuple[str, list[tuple[str, str]]]:
    """The pieces of a whole episode's transcript, for training on windows of it: the
    question line, then one (observation text, action text) pair per step, where the
    observation text ends with ``>`` and the action text is :func:`completion_for` the
    action. The question line followed by the pairs of steps ``j..t-1`` and the observation
    text of step ``t`` is exactly :func:`build_prompt` at step ``t`` with ``t - j`` steps of
    history. ``fmt`` sets how observations are cut (None: never)."""
    fmt = fmt or EpisodeFormat(max_steps=1, history=0, max_prompt_chars=0, max_new_tokens=1)
    return core.transcript_pieces(_head(goal), steps, lambda o: shown_observation(o, fmt))


def _head(goal: str) -> str:
    return f"Question: {core.one_line(goal)}\n"


def _render(goal: str, steps: core.Steps, observation: str, fmt: EpisodeFormat) -> str:
    show = functools.partial(shown_observation, fmt=fmt)
    tail = show(observation) + "\n"
    return core.render_history(_head(goal), steps, tail, fmt.history, fmt.max_prompt_chars, show)


def parse_action(reply: str) -> str:
    """The action in a model's reply (see the module docstring for the exact rule)."""
    line = core.one_line(_LEAD.sub("", core.first_line(reply)))
    m = _COMMAND.match(line)
    if not m:
        return line
    return f"{m.group(1).lower()}[{m.group(2).strip()}]"


def split_action(action: str) -> tuple[str, str] | None:
    """``("search" | "answer", argument)`` for a well-formed action, else None."""
    m = re.fullmatch(r"(search|answer)\[(.*)\]", action.strip(), re.S)
    return (m.group(1), m.group(2).strip()) if m else None


completion_for = core.completion_for


# -- the reference's loop, exactly (protocol = "reference") ---------------------------------
def reference_head(question: str, answer_type: str) -> str:
    """The reference's first prompt (``deepsearchqa/eval.py`` 198-199): the instructions, a
    blank line, ``Question:``, ``Answer type:``, a blank line and ``Thought:``. The question
    is as the dataset has it (not stripped)."""
    kind = ANSWER_TYPE_NAMES.get(answer_type, answer_type)
    return f"{REACT_SYSTEM_PROMPT}\n\nQuestion: {question}\nAnswer type: {kind}\n\nThought:"


def reference_snippets(snippets: list[str]) -> str:
    """A search's observation as the reference's SerpAPI search writes it: the snippets of
    the top results joined by ``" | "``, or ``"No results found."``."""
    return SNIPPET_JOIN.join(snippets) or NO_RESULTS


class ReferenceEpisode:
    """One question played as the reference's ``_react_loop`` plays it
    (``deepsearchqa/eval.py`` 236-277), without the model and the search: the caller
    generates from :attr:`prompt`, feeds the reply to :meth:`feed` and does what it says.

    - :meth:`feed` (a reply generated with :data:`REFERENCE_STOP`, at most 256 tokens)
      returns ``("search", query)``: search, then :meth:`observe` the result;
      ``("answer", text)``: the episode is over; ``("force", "")``: generate from
      :attr:`prompt` again with :data:`FORCED_MAX_NEW_TOKENS` and :data:`FORCED_STOP`, then
      :meth:`feed_forced`; ``("continue", "")``: the step is used, generate again.
    - The reply is stripped and appended to the prompt after a space, thought and all (the
      whole history stays in the prompt); the action is the first ``Action: search[...]`` /
      ``Action: answer[...]`` in this reply only (case-sensitive, ``.+?`` up to the first
      ``]``, across lines). A reply without one (with the ``\nAction:`` stop, every reply
      that puts its action on a line of its own) gets ``\nAction: answer[`` appended and a
      forced answer: that text stripped is the answer, unless it is the template's
      placeholder ``your final answer`` (then the step is used and the next generation
      continues from the prompt as it stands, the forced text not appended).
    - An answer ``your final answer`` (any case) is refused: the prompt gets
      :data:`PLACEHOLDER_RETRY` and the step is used.
    - After ``max_steps`` steps without an answer: the last ``Action: answer[...]`` in the
      model's own text (its replies and forced answers joined by newlines) that is not the
      placeholder, else ``I don't know`` (:attr:`answer`).
    """

    def __init__(self, question: str, answer_type: str, max_steps: int = 6) -> None:
        self.prompt = reference_head(question, answer_type)
        self.max_steps = max_steps
        self.steps = 0
        self.trace = ""
        self.actions: list[str] = []
        self.answer: str | None = None
        self.forced = False

    @property
    def done(self) -> bool:
        return self.answer is not None

    def feed(self, reply: str) -> tuple[str, str]:
        generated = reply.strip()
        self.steps += 1
        self.trace += ("\n" + generated) if self.trace else generated
        self.prompt += f" {generated}"
        m = re.search(r"Action:\s*(search|answer)\[(.+?)\]", generated, re.DOTALL)
        if not m:
            self.prompt += FORCED_ANSWER
            return self._end_of_step("force", "")
        kind, content = m.group(1), m.group(2).strip()
        self.actions.append(f"{kind}[{content}]")
        if kind == "answer":
            if content.lower() == PLACEHOLDER_ANSWER:
                self.prompt += PLACEHOLDER_RETRY
                return self._end_of_step("continue", "")
            self.answer = content
            return ("answer", content)
        return ("search", content)

    def feed_forced(self, reply: str) -> tuple[str, str]:
        generated = reply.strip()
        self.forced = True
        if generated:  # the reference adds a newline here even to an empty trace
            self.trace += "\n" + generated
        if generated.lower() == PLACEHOLDER_ANSWER:
            return self._end_of_step("continue", "")
        self.actions.append(f"answer[{generated}]")
        self.answer = generated
        return ("answer", generated)

    def observe(self, observation: str) -> None:
        self.prompt += f"\nObservation: {observation}\nThought:"
        self._end_of_step("continue", "")

    def _end_of_step(self, what: str, arg: str) -> tuple[str, str]:
        if self.steps >= self.max_steps and self.answer is None and what != "force":
            found = re.findall(r"Action:\s*answer\[(.+?)\]", self.trace, re.DOTALL)
            real = [a.strip() for a in found if a.strip().lower() != PLACEHOLDER_ANSWER]
            self.answer = real[-1] if real else NO_ANSWER
            return ("answer", self.answer)
        return (what, arg)


# -- answers without a judge ---------------------------------------------------------------
def normalize_answer(text: str) -> str:
    """Lowercase, accents and punctuation removed, the articles a/an/the dropped, whitespace
    collapsed (SQuAD's normalisation, plus accent folding)."""
    text = unicodedata.normalize("NFKD", text)
    text = "".join(ch for ch in text if not unicodedata.combining(ch)).lower()
    text = "".join(" " if ch in string.punctuation else ch for ch in text)
    return " ".join(_ARTICLES.sub(" ", text).split())


def answer_items(text: str) -> list[str]:
    """The normalised items of a set answer: split at commas, semicolons, newlines, ``&``
    and the word ``and``; empty items and repeats dropped, first occurrence kept."""
    items = (normalize_answer(part) for part in _ITEM_SPLIT.split(text))
    return list(dict.fromkeys(item for item in items if item))


@dataclass(frozen=True)
class AnswerScore:
    """How an answer compares with the gold answer: the matched, missed and extraneous
    items, precision, recall, F1 and DeepSearchQA's outcome category (``fully_correct``,
    ``correct_with_extraneous``, ``partially_correct``, ``fully_incorrect``)."""

    precision: float
    recall: float
    f1: float
    outcome: str
    matched: int
    expected: int
    extraneous: int


def score_counts(matched: int, expected: int, extraneous: int) -> AnswerScore:
    """Precision ``|S∩G| / |S|``, recall ``|S∩G| / |G|``, their F1 and the outcome category
    from the counts (``extraneous`` = submitted items not in the gold set)."""
    submitted = matched + extraneous
    p = matched / submitted if submitted else 0.0
    r = matched / expected if expected else 0.0
    f1 = 2 * p * r / (p + r) if p + r else 0.0
    if matched == 0:
        outcome = "fully_incorrect"
    elif matched < expected:
        outcome = "partially_correct"
    elif extraneous:
        outcome = "correct_with_extraneous"
    else:
        outcome = "fully_correct"
    return AnswerScore(p, r, f1, outcome, matched, expected, extraneous)


def answer_score(answer: str, gold: str, answer_type: str = SINGLE) -> AnswerScore:
    """``answer`` against ``gold`` by normalised exact match (see the module docstring): a
    single answer is one item (matched or extraneous), a set answer's items are compared as
    sets. An empty answer is fully incorrect."""
    if answer_type == SET:
        got, want = answer_items(answer), answer_items(gold)
        matched = len(set(got) & set(want))
        return score_counts(matched, len(want), len(got) - matched)
    got_one, want_one = normalize_answer(answer), normalize_answer(gold)
    if not got_one:
        return score_counts(0, 1, 0)
    hit = int(got_one == want_one)
    return score_counts(hit, 1, 1 - hit)


def string_match(
    answer: str, gold: str, answer_type: str = SINGLE, empty_matches: bool = False
) -> bool:
    """The paper's reference fallback when no judge answers: both sides stripped and
    lowercased; a single answer is correct when the gold answer contains it or it contains
    the gold answer; a set answer when it contains every comma-separated gold item. An
    empty answer is incorrect, unless ``empty_matches`` (the reference's own rule, used
    where it falls back from a failed judge call: the empty string is a substring of every
    gold answer, so an empty single answer is correct there; its loop answers empty only
    when a forced answer is empty)."""
    pred, want = answer.strip().lower(), gold.strip().lower()
    if not pred and not empty_matches:
        return False
    if answer_type != SET:
        return want in pred or pred in want
    return all(item.strip() in pred for item in want.split(","))


def answer_reward(answer: str, gold: str, answer_type: str = SINGLE) -> float:
    """The environment's reward for an answer: 1/0 for a single answer, F1 for a set."""
    return answer_score(answer, gold, answer_type).f1


def describe(fmt: EpisodeFormat) -> str:
    """Markdown bullets stating the protocol for ``description.md``."""
    if fmt.protocol == "reference":
        return (
            f"- Each question is played as the paper's reference plays it (`ReferenceEpisode` in "
            f"`data/protocol.py` is that loop without the model and the search): every model "
            f"gets raw text (no chat template): the instructions `REACT_SYSTEM_PROMPT`, then "
            f"`Question: ...`, `Answer type: Single Answer` (or `Set Answer`) and `Thought:`. "
            f"Greedy decoding, at most {fmt.max_new_tokens} new tokens, stopping at `\\nAction:`, "
            f"`\\nThought:` or `\\nObservation:`. The reply (stripped) is appended to the prompt "
            f"after a space, thought included. Its first `Action: search[...]` searches: the "
            f"observation is the top results' snippets joined by ` | ` (`No results found.`), "
            f"appended as `\\nObservation: ...\\nThought:`. Its first `Action: answer[...]` is "
            f"the answer. A reply without an action (so every reply that starts `Action:` on "
            f"a new line: generation stops there) gets `\\nAction: answer[` appended and a second "
            f"generation (at most {FORCED_MAX_NEW_TOKENS} tokens, stopping at `]`) that is the "
            f"answer. At most {fmt.max_steps} steps; then the last `Action: answer[...]` the model "
            f"wrote, else `I don't know`. The template's `your final answer` is never an answer.\n"
            f"- `data/protocol.py` is the grader's own code for this (`ReferenceEpisode`, "
            f"`reference_head`, `reference_snippets`; `string_match` is the grading without a "
            f"judge); `data/eval_format.json` holds these settings."
        )
    if fmt.protocol == "react":
        return (
            f"- Each question is an episode of at most {fmt.max_steps} actions, played as the "
            f"paper's reference plays it: every model gets raw text (no chat template): the "
            f"instructions `REACT_SYSTEM_PROMPT` of `data/protocol.py`, then `Question: ...`, "
            f"`Answer type: Single Answer` (or `Set Answer`) and `Thought:`. The model writes a "
            f"thought and `Action: search[query]` or `Action: answer[text]`; each earlier step "
            f"follows as ` Action: <action>`, `Observation: <results>`, `Thought:`. An episode "
            f"without an answer scores 0.\n"
            f"- Greedy decoding, at most {fmt.max_new_tokens} new tokens, stopping at "
            f"`\\nObservation:` or `\\nThought:`. The action is the first `Action: search[...]` "
            f"/ `Action: answer[...]` in the reply; a reply without one uses the turn and the "
            f"next observation reads `{REFUSED_PREFIX}<why>`. The oldest steps are dropped to "
            f"keep the prompt within {fmt.max_prompt_chars} characters.\n"
            f"- `data/protocol.py` is the grader's own code for this (`build_prompt`, "
            f"`react_prompt`, `parse_action`, `parse_react_action`; `string_match` is the "
            f"grading without a judge); `data/eval_format.json` holds these settings."
        )
    cut = (
        f", cut to {fmt.max_observation_chars} characters (`...` marks the cut)"
        if fmt.max_observation_chars
        else ""
    )
    return (
        f"- Each question is an episode of at most {fmt.max_steps} actions: `search[query]` "
        f"shows the top results, `answer[text]` ends the episode (a set answer: items "
        f"separated by commas). An episode without an answer scores 0.\n"
        f"- At each step the model gets the line `Question: ...`, up to {fmt.history} "
        f"earlier steps (the observation, then `> action`) and the current observation, "
        f"each on one line{cut}. The oldest steps are dropped to keep the prompt within "
        f"{fmt.max_prompt_chars} characters. A base model's prompt ends with `>`; a chat "
        f'model gets the same text plus "{CHAT_INSTRUCTION}" as one user message.\n'
        f"- Greedy decoding, at most {fmt.max_new_tokens} new tokens, cut at a newline. The "
        f"action is the first non-empty line of the reply without a leading `>` or "
        f"`Action:`, whitespace collapsed, `search[...]`/`answer[...]` kept up to the first "
        f"`]`. Anything else uses the turn and the next observation reads "
        f"`{REFUSED_PREFIX}<why>`.\n"
        f"- `data/protocol.py` is the grader's own code for this (`build_prompt`, "
        f"`build_chat_message`, `parse_action`, `transcript`; `answer_score` and "
        f"`answer_reward` are the exact-match scoring); `data/eval_format.json` holds these "
        f"settings."
    )
