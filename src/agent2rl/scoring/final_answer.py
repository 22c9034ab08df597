"""The final-answer scorer of math word problems (GSM8K and its format)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agent2rl.dataset import Sample
from agent2rl.scoring.base import ItemResult
from agent2rl.scoring.math_answer import answers_match, extract_final_answer
from agent2rl.solvers.base import Output


@dataclass(frozen=True)
class FinalAnswer:
    """Correct when the completion's final answer (after the last ``####``, else its last
    number: :func:`extract_final_answer`) equals the sample's target numerically
    (:func:`answers_match`, via math-verify). The target is the bare gold number."""

    def score(self, samples: list[Sample], outputs: list[Output]) -> list[ItemResult]:
        items = []
        for sample, out in zip(samples, outputs, strict=True):
            ok = answers_match(str(sample.target), extract_final_answer(out.text))
            items.append(ItemResult(sample.id, out.text, str(sample.target), ok, float(ok)))
        return items

    def settings(self) -> dict[str, Any]:
        return {"scorer": "final_answer", "extract": "####-or-last-number", "match": "math-verify"}

    def details(self, items: list[ItemResult], outputs: list[Output]) -> dict[str, Any]:
        return {}
