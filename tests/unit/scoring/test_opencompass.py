"""OpenCompass's post-processing and comparison, reproduced exactly.

The expected values are data: each is what OpenCompass 0.5.1's own functions return for the
input (``opencompass/datasets/gsm8k.py``: ``gsm8k_postprocess``,
``gsm8k_dataset_postprocess``, ``Gsm8kEvaluator.is_equal``;
``opencompass/utils/text_postprocessors.py``: ``extract_non_reasoning_content``, whose
docstring examples are the first two cases below; ``opencompass/datasets/humaneval.py``:
``humaneval_postprocess_v2``), odd edge cases included.
"""

from __future__ import annotations

import pytest

from agent2rl.dataset import Sample
from agent2rl.scoring import OpenCompassGsm8k
from agent2rl.scoring.opencompass import (
    OpenCompassHumanEval,
    extract_non_reasoning_content,
    gsm8k_dataset_postprocess,
    gsm8k_is_equal,
    gsm8k_postprocess,
    humaneval_postprocess_v2,
)
from agent2rl.solvers.base import Output


@pytest.mark.parametrize(
    "text,expected",
    [
        ("This is a test.</think> How are you?", "How are you?"),
        ("Start<think>reasoning here</think> End", "Start End"),
        ("  no tags at all \n", "no tags at all"),
        ("<think>unclosed reasoning 5", "<think>unclosed reasoning 5"),
        ("<think>a</think>b<think>c</think>d", "bd"),
    ],
)
def test_extract_non_reasoning_content(text: str, expected: str) -> None:
    assert extract_non_reasoning_content(text) == expected


@pytest.mark.parametrize(
    "text,expected",
    [
        (
            "Janet sells 16 - 3 - 4 = 9 duck eggs a day.\nShe makes 9 * 2 = $18 every day at "
            "the farmer's market.\nThe answer is 18\n",
            "18",
        ),
        # a new question the model goes on to write is cut off, with its numbers
        (
            "The answer is 18\n\nQuestion: Tom has 5 apples. He gets 7 more.\nLet's think "
            "step by step\nAnswer: 12",
            "18",
        ),
        ("The total is 1,234 dollars.", "234"),  # a thousands separator splits the number
        ("So she pays $5.50 in total, or -3.25 after the refund.", "-3.25"),
        ("Half of it is 3/4.", "4"),
        ("No numbers here.", "NULL"),
        ("<think>It might be 7.</think>The answer is 9", "9"),
        ("I think 4</think> so the answer is 6", "6"),
        ("<think>unclosed reasoning 5", "5"),
        ("The answer is 72.", "72"),
        ("  \n The answer is 0042\n", "0042"),
        ("Question: what is 3+4?", "NULL"),
    ],
)
def test_gsm8k_prediction(text: str, expected: str) -> None:
    """The model's pred_postprocessor (extract-non-reasoning-content), then the dataset's."""
    assert gsm8k_postprocess(extract_non_reasoning_content(text)) == expected


@pytest.mark.parametrize(
    "answer,expected",
    [
        ("Natalia sold 48/2 = <<48/2=24>>24 clips in May.\n#### 72", "72"),
        ("x\n#### 1,000", "1000"),
        ("a #### 5\n#### 6", "5\n"),  # the first "#### ", not the last
    ],
)
def test_gsm8k_gold(answer: str, expected: str) -> None:
    assert gsm8k_dataset_postprocess(answer) == expected


@pytest.mark.parametrize(
    "pred,refer,equal",
    [
        ("18", "18", True),
        ("18.0", "18", True),
        ("18.0000001", "18", True),
        ("18.00001", "18", False),
        ("NULL", "18", False),
        ("0042", "42", True),
        ("-3", "-3", True),
        ("1.5", "1.5", True),  # equal strings, though int("1.5") would not parse
        ("1.50", "1.5", False),
        ("5", "1.5", False),
        (" 18", "18", True),
        ("18", "18\n", True),
        ("1e1", "10", True),
        ("9" * 26, "9" * 26, True),
        ("1" * 400, "1" * 401, False),  # float overflow: unequal, no error
    ],
)
def test_gsm8k_comparison(pred: str, refer: str, equal: bool) -> None:
    assert gsm8k_is_equal(pred, refer) is equal


def test_gsm8k_scorer_combines_the_three() -> None:
    samples = [Sample("a", {}, "18"), Sample("b", {}, "1000"), Sample("c", {}, "5")]
    outputs = [
        Output("<think>maybe 17</think>The answer is 18\n"),
        Output("The answer is 1,000"),  # OpenCompass reads 000
        Output("It is 5\n\nQuestion: and 6?"),
    ]
    items = OpenCompassGsm8k().score(samples, outputs)
    assert [i.correct for i in items] == [True, False, True]
    assert [i.prediction for i in items] == [o.text for o in outputs]
    assert OpenCompassGsm8k().settings()["scorer"] == "opencompass_gsm8k"


@pytest.mark.parametrize(
    "reply,completion",
    [
        ("```python\ndef f():\n    return 1\n```", "def f():\n    return 1\n"),
        ("Sure:\n```\n  x = 1\n```\nand ```py\ny\n```", "x = 1\n"),
        ("```python def f(): pass```", "```python def f(): pass```"),  # no newline: no block
        ("    return 1\n", "return 1"),  # a bare body loses its indentation (and is stripped)
        ("```python\nunclosed", "```python\nunclosed"),
        ("<think>```python\nbad\n```</think>\n```python\ngood\n```", "good\n"),
    ],
)
def test_humaneval_completion(reply: str, completion: str) -> None:
    assert OpenCompassHumanEval.completion(reply) == completion
    assert humaneval_postprocess_v2(extract_non_reasoning_content(reply)) == completion
