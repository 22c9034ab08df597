"""AlpacaEval 2.0's judging protocol, ``weighted_alpaca_eval_gpt4_turbo``, as data and pure
functions (no I/O besides reading the prompt template once).

The annotator's configuration in the ``alpaca-eval`` package (0.6.6),
``alpaca_eval/evaluators_configs/weighted_alpaca_eval_gpt4_turbo/configs.yaml``::

    prompt_template: "alpaca_eval_clf_gpt4_turbo/alpaca_eval_clf.txt"
    fn_completions: "openai_completions"
    completions_kwargs: {model_name: "gpt-4-1106-preview", max_tokens: 1, temperature: 1,
                         logprobs: true, top_logprobs: 5}
    fn_completion_parser: "logprob_parser"
    completion_parser_kwargs: {numerator_token: "m", denominator_tokens: ["m", "M"],
                               is_binarize: false}

and what the package does around it, step by step (each function below cites its source):

1. identical outputs are a draw (1.5) without asking the judge
   (``PairwiseAnnotatorLocal._preprocess``);
2. the two outputs are swapped when ``random.Random("is_switched_outputs" + instruction +
   "0").choices([False, True])`` says so (``RandomSwitchTwoColumnsProcessor`` with the
   annotator's seed 0) — checked against every official annotation in the tests;
3. the template's ``{instruction}``, ``{output_1}``, ``{output_2}`` are replaced, each once
   and in that order (``utils.make_prompts``), the prompt is stripped and split into chat
   messages at ``<|im_start|>`` (``utils.prompt_to_chatml``); here the template is split
   first and the values go into the messages, the same messages unless an output holds a
   ChatML marker, which then stays text (:func:`messages`);
4. one chat completion: ``max_tokens=1, temperature=1, top_p=1, logprobs=true,
   top_logprobs=5`` (``decoders.openai._openai_completion_helper``);
5. the preference is ``2 - P(m) / (P(m) + P(M))`` over the first token's top logprobs
   (``completion_parsers.logprob_parser``), NaN when neither label is among them;
6. a swapped pair's preference is flipped back: ``3 - p``.

The template is read from the installed ``alpaca-eval`` distribution's files without
importing the package (its import needs ``pkg_resources``, gone from setuptools >= 81).
"""

from __future__ import annotations

import hashlib
import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from importlib import metadata
from pathlib import Path
from typing import Any

from agent2rl.errors import UserError
from agent2rl.scoring.judges.base import Messages

#: the annotator's name in AlpacaEval (its leaderboard and annotation files carry it)
NAME = "weighted_alpaca_eval_gpt4_turbo"
#: the official judge model of AlpacaEval 2.0
DEFAULT_MODEL = "gpt-4-1106-preview"
#: the prompt template, inside the ``alpaca-eval`` distribution
TEMPLATE_PATH = "alpaca_eval/evaluators_configs/alpaca_eval_clf_gpt4_turbo/alpaca_eval_clf.txt"
#: sha256 of that file in alpaca-eval 0.6.6; another version's template is refused rather
#: than silently changing every score
TEMPLATE_SHA256 = "784227e6dc2832fc08c43d2c8ea3a308e7523780187a1aaad2f85e30bac85f62"
#: the completion request's settings (``completions_kwargs`` plus the decoder's ``top_p``)
MAX_TOKENS = 1
TEMPERATURE = 1
TOP_P = 1.0
TOP_LOGPROBS = 5
#: the label naming output_1 (``numerator_token``) and both labels (``denominator_tokens``)
FIRST = "m"
LABELS = ("m", "M")
#: the switch processor's column name and the pairwise annotator's seed, both in the seed
SWITCH_SEED_PREFIX = "is_switched_outputs"
SWITCH_SEED = 0
#: the placeholders, replaced in this order
PLACEHOLDERS = ("instruction", "output_1", "output_2")


def read_template(path: str, sha256: str, judge: str, kind: str) -> str:
    """The prompt template at ``path`` inside the installed ``alpaca-eval`` distribution.

    Raises :class:`UserError` (naming the ``judge`` and the template's ``kind``) when the
    package is missing or ships another template (a sha256 other than ``sha256``).
    """
    try:
        text = Path(str(metadata.distribution("alpaca-eval").locate_file(path))).read_text(
            encoding="utf-8"
        )
    except (metadata.PackageNotFoundError, OSError):
        raise UserError(
            f"the {judge} judge needs the alpaca-eval package's prompt template: "
            "pip install 'alpaca-eval>=0.6.6'"
        ) from None
    digest = hashlib.sha256(text.encode()).hexdigest()
    if digest != sha256:
        raise UserError(
            f"the installed alpaca-eval ships another {kind} template ({path}, sha256 "
            f"{digest[:12]}): install alpaca-eval 0.6.6, whose template this judge implements"
        )
    return text


@cache
def template() -> str:
    """The prompt template from the installed ``alpaca-eval`` package (:func:`read_template`)."""
    return read_template(TEMPLATE_PATH, TEMPLATE_SHA256, "AlpacaEval", "judge")


def is_swapped(instruction: str) -> bool:
    """Whether the judge sees the model's output first for ``instruction`` (seeded by the
    instruction alone, so every model's outputs are presented the same way)."""
    seed = SWITCH_SEED_PREFIX + instruction + str(SWITCH_SEED)
    return random.Random(seed).choices([False, True], k=1)[0]


def prompt(instruction: str, output_1: str, output_2: str) -> str:
    """The template filled in as the package does: each placeholder's *first* occurrence
    replaced in turn (so an instruction that itself contains ``{output_1}`` gets the output
    there, exactly as in AlpacaEval), then stripped."""
    text = template()
    for name, value in zip(PLACEHOLDERS, (instruction, output_1, output_2), strict=True):
        text = text.replace("{" + name + "}", value, 1)
    return text.strip()


def to_messages(text: str) -> Messages:
    """A ChatML-style prompt (``<|im_start|>role\\n...<|im_end|>``) as chat messages, each
    content stripped (``utils.prompt_to_chatml``; the template uses no ``system name=``
    roles). An output containing ``<|im_start|>`` splits the prompt there, as in the
    package."""
    out: Messages = []
    for part in text.split("<|im_start|>")[1:]:
        head, _, rest = part.partition("\n")
        out.append({"role": head.strip(), "content": rest.split("<|im_end|>", 1)[0].strip()})
    return out


@cache
def _template_messages() -> Messages:
    """The template split into chat messages, before any value is in (never mutated)."""
    return to_messages(template().strip())


def fill(parts: Messages, instruction: str, output_1: str, output_2: str) -> Messages:
    """A template's chat messages ``parts`` with each placeholder's first occurrence (in the
    first message that has it) replaced in turn, so an output stays text whatever it holds."""
    contents = [m["content"] for m in parts]
    for name, value in zip(PLACEHOLDERS, (instruction, output_1, output_2), strict=True):
        slot = "{" + name + "}"
        for i, content in enumerate(contents):
            if slot in content:
                contents[i] = content.replace(slot, value, 1)
                break
    return [{"role": m["role"], "content": c} for m, c in zip(parts, contents, strict=True)]


def messages(instruction: str, output_1: str, output_2: str) -> Messages:
    """The judge's chat messages for one pair as presented (already in display order).

    The same messages as the package's (:func:`to_messages` of :func:`prompt`) for every
    text without ChatML markers, each placeholder's first occurrence replaced in turn; but
    the template is split into messages *before* the values go in. The package splits the
    filled prompt, so a model output holding ``<|im_end|>`` or ``<|im_start|>assistant`` could
    end the user's message early or write turns of its own, the judge's answer included.
    Here an output stays text inside the user message, whatever it holds (:func:`fill`).
    """
    return fill(_template_messages(), instruction, output_1, output_2)


def preference_from_logprobs(top: list[tuple[str, float]]) -> float:
    """``2 - P(m) / (P(m) + P(M))`` over the candidates that are a label (a label listed twice
    counts with its last log-probability, as the package's dict does): 1 when only ``m``
    (output_1) is there, 2 when only ``M``, NaN when neither is."""
    found = {token: lp for token, lp in top if token in LABELS}
    if not found:
        return math.nan
    first = found.get(FIRST, -math.inf)
    # log-sum-exp of the labels present; a missing one has probability 0
    peak = max(found.values())
    denominator = peak + math.log(sum(math.exp(lp - peak) for lp in found.values()))
    return 2.0 - math.exp(first - denominator)


def unswap(preference: float, swapped: bool) -> float:
    """A preference over the displayed order turned into AlpacaEval's order."""
    return 3.0 - preference if swapped else preference


@dataclass(frozen=True)
class JudgeProtocol:
    """A pairwise logprob protocol: how a pair becomes chat messages, and whether it is
    judged in one order or in both.

    Everything else is AlpacaEval's and shared: the labels ``m`` / ``M``, the preference
    from their log-probabilities (:func:`preference_from_logprobs`), the seeded swap
    (:func:`is_swapped`) and its undoing (:func:`unswap`), draws for identical outputs.

    ``both_orders``: the pair is also judged with the two outputs the other way round and
    the two (unswapped) preferences are combined by :func:`combine_orders`. That cancels a
    judge's position bias, which a small model has in excess: SmolLM2-135M names the second
    output about four times in five whatever the outputs are. The seeded order is asked
    first.
    """

    name: str
    #: ``(instruction, shown first, shown second) -> messages``
    build: Callable[[str, str, str], Messages]
    #: sha256 of the template text (part of the identity: another template, another cache)
    template_sha256: str
    top_logprobs: int = TOP_LOGPROBS
    both_orders: bool = False
    #: more phrasings of the same question, each ``(instruction, shown first, shown second)
    #: -> messages`` like ``build``: each order is also asked in every one of them, and all
    #: the (unswapped) preferences are combined by :func:`combine_orders`. One phrasing's
    #: quirks (a small judge's verdict moves with the wording) then count for less. The
    #: ``template_sha256`` must cover them all.
    also: tuple[Callable[[str, str, str], Messages], ...] = ()

    @property
    def views(self) -> int:
        """Prompts per pair: orders times phrasings."""
        return (2 if self.both_orders else 1) * (1 + len(self.also))

    def identity(self) -> dict[str, Any]:
        """The protocol's part of a judge's identity. AlpacaEval's own has no
        ``both_orders`` or ``phrasings`` key, so its identity (and every cached judgment) is
        as before."""
        out: dict[str, Any] = {
            "protocol": self.name,
            "template_sha256": self.template_sha256,
            "top_logprobs": self.top_logprobs,
            "labels": list(LABELS),
            "swap_seed": SWITCH_SEED,
        }
        if self.both_orders:
            out["both_orders"] = True
        if self.also:
            out["phrasings"] = 1 + len(self.also)
        return out


def combine_orders(preferences: list[float]) -> float:
    """One preference from the (unswapped) preferences of a pair judged in both orders (and
    in every phrasing of :attr:`JudgeProtocol.also`): the mean of their log-odds, mapped
    back to [1, 2].

    Why log-odds: a position bias ``b`` adds to the log-odds of the first-shown output, so
    the two orders read ``s + b`` and ``s - b`` for the same pair, and their mean is the
    unbiased ``s``. A mean of probabilities would keep the bias's squashing (every pair
    near 1.5). NaN preferences are left out (NaN when all are); a preference of exactly 1
    or 2 is clipped to 1e-6 from the bound so one certain order does not decide alone.
    """
    found = [p for p in preferences if not math.isnan(p)]
    if not found:
        return math.nan
    eps = 1e-6
    clipped = [min(max(p - 1.0, eps), 1.0 - eps) for p in found]
    mean = sum(math.log(q / (1.0 - q)) for q in clipped) / len(clipped)
    return 1.0 + 1.0 / (1.0 + math.exp(-mean))


#: AlpacaEval 2.0's own protocol (``weighted_alpaca_eval_gpt4_turbo``)
ALPACA_EVAL = JudgeProtocol(NAME, messages, TEMPLATE_SHA256)
