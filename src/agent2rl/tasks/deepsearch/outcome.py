"""The scorer of the search tasks: the final answer of each episode against the gold answer,
DeepSearchQA's way. An episode's answer is the text of its last ``answer[...]`` action
(none: the empty answer, fully incorrect). The ``metric`` says what an item scores:

- ``accuracy`` (the default since task version 2: the paper's reference): 1 when the answer
  is correct, else 0; the task score is the accuracy x 100. Correct means the binary LLM
  judge's verdict (:class:`~.judge.AnswerJudge`), ``grading = "llm-judge-binary"``, or
  without a judge the reference's string match (:func:`~.protocol.string_match`),
  ``grading = "string-match"``.
- ``f1`` (task version 1's default): the item's F1 (a single answer: 1 or 0 unless it adds
  extraneous items), by DeepSearchQA's rubric judge (for every expected item whether the
  answer has it, and the extraneous items), ``grading = "llm-judge"``, or without one by
  normalised exact match (:func:`~.protocol.answer_score`), ``grading = "exact-match"``;
  the task score is the mean F1 x 100 (DeepSearchQA's own primary metric) and ``correct``
  is the *fully correct* outcome.

The grading (metric and judge) is part of the scorer's settings, so different kinds of
score never share an evaluation hash. The details hold precision, recall and the rates of
DeepSearchQA's four outcome categories (under ``accuracy`` only two occur: fully correct,
fully incorrect), by category and answer type, and ``accuracy_x100``.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from agent2rl.dataset import Sample
from agent2rl.scoring.base import ItemResult
from agent2rl.solvers.base import Output
from agent2rl.tasks.deepsearch.judge import AnswerJudge
from agent2rl.tasks.deepsearch.protocol import (
    AnswerScore,
    answer_score,
    score_counts,
    split_action,
    string_match,
)

#: what an item scores (module docstring)
METRICS = ("accuracy", "f1")
OUTCOMES = ("fully_correct", "correct_with_extraneous", "partially_correct", "fully_incorrect")


def final_answer(actions: list[str]) -> str:
    """The argument of the last ``answer[...]`` among ``actions`` (``""`` without one)."""
    for action in reversed(actions):
        parsed = split_action(action)
        if parsed and parsed[0] == "answer":
            return parsed[1]
    return ""


@dataclass
class AnswerOutcome:
    """Scores :class:`~agent2rl.solvers.episode.EpisodeSolver` outputs of search episodes
    (module docstring). A sample's ``target`` is the gold answer; ``input["question"]`` the
    question; ``metadata["answer_type"]`` ``single`` or ``set``; ``metadata["group"]`` its
    category. ``judge`` None: exact match (``f1``) or string match (``accuracy``).
    ``search`` names the search backend in the details. ``metric``: ``accuracy`` or
    ``f1``; ValueError for another."""

    judge: AnswerJudge | None = None
    #: the search backend's name, for the report (the solver's settings hold its identity)
    search: str = ""
    metric: str = "f1"

    def __post_init__(self) -> None:
        if self.metric not in METRICS:
            raise ValueError(f"metric {self.metric!r}: choose one of {', '.join(METRICS)}")

    @property
    def grading(self) -> str:
        if self.metric == "accuracy":
            return "llm-judge-binary" if self.judge is not None else "string-match"
        return "llm-judge" if self.judge is not None else "exact-match"

    def settings(self) -> dict[str, Any]:
        out: dict[str, Any] = {"scorer": "deepsearchqa-answer", "grading": self.grading}
        if self.metric != "f1":  # f1's settings as before metrics were options (same hashes)
            out["metric"] = self.metric
        if self.judge is not None:
            out["judge"] = self.judge.identity()
        return out

    def _without_judge(self, answer: str, gold: str, answer_type: str) -> AnswerScore:
        if self.metric == "accuracy":
            n = 1  # one verdict: the answer as a whole
            return score_counts(n if string_match(answer, gold, answer_type) else 0, n, 0)
        return answer_score(answer, gold, answer_type)

    def score(self, samples: list[Sample], outputs: list[Output]) -> list[ItemResult]:
        """Grade every answer (the judge raises
        :class:`~agent2rl.scoring.judges.JudgeUnavailable` when it cannot: a harness failure,
        never a silent 0)."""
        # The reference loop's outputs carry their answer (it may come from no action the
        # environment would take: a forced answer, "I don't know").
        answers = [
            str(o.trace["answer"])
            if "answer" in o.trace
            else final_answer(list(o.trace.get("actions", [])))
            for o in outputs
        ]
        fallbacks: list[str | None] = [None] * len(outputs)
        types = [str(s.metadata.get("answer_type", "single")) for s in samples]
        if self.judge is not None:
            graded = self.judge.grade(
                [(str(s.input.get("question", "")), str(s.target), t, a)
                 for s, t, a in zip(samples, types, answers, strict=True)]
            )  # fmt: skip
            scores = [g.score for g in graded]
            fallbacks = [g.fallback for g in graded]
        else:
            scores = [
                self._without_judge(a, str(s.target), t)
                for s, t, a in zip(samples, types, answers, strict=True)
            ]
        items = []
        for s, out, a, t, sc, fb in zip(
            samples, outputs, answers, types, scores, fallbacks, strict=True
        ):
            actions = list(out.trace.get("actions", []))
            meta: dict[str, Any] = {
                "group": s.metadata.get("group"),
                "answer_type": t,
                "steps": out.trace.get("steps", len(actions)),
                "searches": sum(1 for x in actions if x.startswith("search[")),
                "answered": bool(a),
                "unjudged": sc is None,
            }
            if fb is not None:  # the reference judge failed: string match graded it
                meta["judge_fallback"] = fb
            if "forced" in out.trace:
                meta["forced_answer"] = bool(out.trace["forced"])
            shown = sc or score_counts(0, 1, 0)  # unjudged: fully incorrect, all 0
            meta.update(outcome=shown.outcome, precision=shown.precision, recall=shown.recall,
                        f1=shown.f1)  # fmt: skip
            correct = meta["outcome"] == "fully_correct"
            items.append(ItemResult(s.id, a, str(s.target), correct, float(meta["f1"]), meta))
        return items

    def details(self, items: list[ItemResult], outputs: list[Output]) -> dict[str, Any]:
        def figures(its: list[ItemResult]) -> dict[str, Any]:
            n = max(1, len(its))
            metas = [i.meta or {} for i in its]
            out = {
                "items": len(its),
                "f1_x100": 100.0 * sum(m["f1"] for m in metas) / n,
                "precision_x100": 100.0 * sum(m["precision"] for m in metas) / n,
                "recall_x100": 100.0 * sum(m["recall"] for m in metas) / n,
                "accuracy_x100": 100.0 * sum(i.correct for i in its) / n,
            }
            for o in OUTCOMES:
                out[f"{o}_rate"] = 100.0 * sum(m["outcome"] == o for m in metas) / n
            return out

        by_group: dict[str, list[ItemResult]] = defaultdict(list)
        by_type: dict[str, list[ItemResult]] = defaultdict(list)
        for i in items:
            by_group[str((i.meta or {}).get("group"))].append(i)
            by_type[str((i.meta or {}).get("answer_type"))].append(i)
        n = max(1, len(items))
        details: dict[str, Any] = {
            "grading": self.grading,
            "metric": self.metric,
            "search_backend": self.search,
            **figures(items),
            "answered_rate": 100.0 * sum((i.meta or {}).get("answered", False) for i in items) / n,
            "unjudged": sum(1 for i in items if (i.meta or {}).get("unjudged")),
            "by_group": {g: figures(v) for g, v in sorted(by_group.items())},
            "by_answer_type": {t: figures(v) for t, v in sorted(by_type.items())},
            "mean_steps": sum(o.trace.get("steps", 0) for o in outputs) / max(1, len(outputs)),
            "mean_searches": sum((i.meta or {}).get("searches", 0) for i in items) / n,
        }
        if self.judge is not None:
            details["judge"] = self.judge.totals()
            # answers the reference judge could not grade, graded by string match instead
            details["judge_fallbacks"] = sum(
                1 for i in items if (i.meta or {}).get("judge_fallback") is not None
            )
        if any("forced" in o.trace for o in outputs):
            details["forced_answers"] = sum(1 for o in outputs if o.trace.get("forced"))
        return details
