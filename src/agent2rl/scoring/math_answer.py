"""Final-answer extraction and equivalence for math word problems (GSM8K format).

GSM8K answers end in ``#### <number>``. A model's completion is graded by its final answer:
the text after the last ``####`` when present, else the last number in the completion.
Equivalence goes through ``math-verify`` (so ``68``, ``68.0``, ``1/2`` and ``0.5`` compare as
numbers), with a plain numeric comparison as a fallback when math-verify cannot parse.
"""

from __future__ import annotations

import re
from fractions import Fraction

_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?(?:/\d+)?")


def _clean(number: str) -> str:
    return number.replace(",", "").rstrip(".")


def extract_final_answer(text: str) -> str | None:
    """Return the final answer in ``text`` as a plain number string, or None.

    Edge cases: thousands separators are removed (``1,234`` -> ``1234``); a ``####`` followed
    by no number falls back to the last number anywhere; an empty or number-free text gives
    None; negative numbers and simple fractions (``3/4``) are kept.
    """
    if "####" in text:
        found = _NUMBER.findall(text.rsplit("####", 1)[1])
        if found:
            return _clean(found[0])
    found = _NUMBER.findall(text)
    return _clean(found[-1]) if found else None


def _as_fraction(number: str) -> Fraction | None:
    try:
        return Fraction(number)
    except (ValueError, ZeroDivisionError):
        return None


def answers_match(gold: str, predicted: str | None) -> bool:
    """Whether ``predicted`` (an extracted answer, or None) equals the ``gold`` answer.

    None never matches. Exact numeric equality is checked first (cheap, exact for integers and
    fractions); otherwise math-verify decides, which handles LaTeX and other forms.
    """
    if predicted is None:
        return False
    g, p = _as_fraction(_clean(gold)), _as_fraction(_clean(predicted))
    if g is not None and p is not None:
        return g == p
    from math_verify import parse, verify

    try:
        return bool(verify(parse(gold), parse(predicted)))
    except Exception:  # math-verify raises on odd input; an unparsable answer is wrong
        return False
