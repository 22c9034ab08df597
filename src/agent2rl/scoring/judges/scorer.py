"""``Judge``: a scorer whose reward is a pairwise judge's preference over a reference output.

A judge is a scorer argument with its own backend and metering: the task builds a
:class:`~agent2rl.scoring.judges.PairwiseJudge` (an HTTP judge, or a local model) and hands
it to :class:`Judge`, which compares each output with its sample's reference output (the
sample's ``target``) and summarises the judgments with AlpacaEval's metrics
(:mod:`agent2rl.scoring.judges.win_rates`).

The score is the first of the declared metrics, :attr:`Judge.metrics`
(:mod:`agent2rl.scoring.metrics`), computed from the items' records:

``length_controlled_winrate``
    when the task has the LC GLM's data (``df_gamed``), with ``win_rate`` beside it. The GLM
    is fitted once over the evaluation's items and each item's ``meta["lc_preference"]`` is
    its prediction at equal lengths; the metric is their mean (x 100, exactly the LC win
    rate), its interval as :data:`~agent2rl.scoring.judges.win_rates.LC_WIN_RATE` says
    (narrower than the raw win rate's). When the GLM cannot be fitted (fewer than two items,
    one length difference for all) it falls back to the raw win rate, and the details'
    ``metric`` says so.
``win_rate``
    otherwise: the mean preference ``p - 1``; an item the judge could not judge (no label
    among its top tokens) counts as a draw, 0.5 — AlpacaEval drops such items instead, so
    the details' ``win_rate`` differs from the score only when that happened (``unjudged``
    says how often).

An item's ``score`` is its preference either way (``p - 1``, 0.5 unjudged), for per-item
displays.

Without ``df_gamed`` a task may ask for the package's ``length_controlled_minimal`` GLM
(:attr:`Judge.lc_glm`; alpaca-lite does, its eval set being outside AlpacaEval's data): its
LC win rate is reported in the details beside the raw score, never as the score (it predicts
one number for every item, so it has no per-item spread for the harness's interval).

Either way ``correct`` is ``preference > 1.5`` (the judge preferred the model's output) and
``meta`` keeps the raw ``preference``. Per-item preferences reach only the grader's record
(``items.jsonl``), never the agent.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from agent2rl.dataset import Sample
from agent2rl.scoring.base import ItemResult
from agent2rl.scoring.judges.base import Pair, PairwiseJudge
from agent2rl.scoring.judges.win_rates import (
    LC_MINIMAL,
    LC_V1,
    LC_WIN_RATE,
    WIN_RATE,
    length_controlled,
    win_rates,
)
from agent2rl.solvers.base import Output
from agent2rl.statistics import Metric

LC = "length_controlled_winrate"
RAW = "win_rate"


@dataclass
class Judge:
    """Scores outputs by ``judge``'s preference over the samples' reference outputs.

    A sample needs ``input["instruction"]`` and the reference output as its ``target``;
    ``metadata["index"]`` (its position in the eval set, for the LC GLM's instruction
    difficulty; default: its position in the list) and ``metadata["group"]`` are optional.
    ``df_gamed`` enables the LC metric (:func:`~agent2rl.scoring.judges.win_rates.read_df_gamed`).
    ``lc_glm``: without ``df_gamed``, :data:`~agent2rl.scoring.judges.win_rates.LC_MINIMAL` puts
    that GLM's LC win rate in the details (the score stays the raw win rate); ignored with
    ``df_gamed``.
    """

    judge: PairwiseJudge
    df_gamed: pd.DataFrame | None = None
    lc_glm: str | None = None

    def __post_init__(self) -> None:
        if self.lc_glm not in (None, LC_MINIMAL):
            raise ValueError(f"lc_glm: only {LC_MINIMAL!r} (or None) without df_gamed")

    @property
    def metric(self) -> str:
        """The declared score's name: :data:`LC` with the GLM's data, else :data:`RAW`."""
        return self.metrics[0].name

    @property
    def metrics(self) -> list[Metric]:
        """The declared metrics, the score's first."""
        return [LC_WIN_RATE, WIN_RATE] if self.df_gamed is not None else [WIN_RATE]

    def settings(self) -> dict[str, Any]:
        out = {"scorer": "judge", "metric": self.metric, "judge": self.judge.identity()}
        if self.df_gamed is None and self.lc_glm:
            out["lc_glm"] = self.lc_glm
        return out

    def score(self, samples: list[Sample], outputs: list[Output]) -> list[ItemResult]:
        """Judge every output (the judge raises
        :class:`~agent2rl.scoring.judges.JudgeUnavailable` when it cannot: a harness
        failure, never a silent 0)."""
        pairs = [
            Pair(str(s.input["instruction"]), str(s.target), o.text)
            for s, o in zip(samples, outputs, strict=True)
        ]
        prefs = self.judge.preferences(pairs)
        indices = [s.metadata.get("index", i) for i, s in enumerate(samples)]
        annotations = _annotations(pairs, prefs, indices)
        lc = None
        if self.df_gamed is not None:
            # Not fitted (fewer than two items, one length difference for all): the score
            # falls back to the raw win rate, and the details' ``metric`` says so.
            with contextlib.suppress(ValueError):
                lc = length_controlled(annotations, self.df_gamed).predictions
        items = []
        for s, pair, pref, i in zip(samples, pairs, prefs, range(len(samples)), strict=True):
            judged = not math.isnan(pref)
            meta: dict[str, Any] = {
                "preference": pref if judged else None,
                "output_chars": len(pair.output_2),
                "reference_chars": len(pair.output_1),
                "index": indices[i],
            }
            if "group" in s.metadata:
                meta["group"] = s.metadata["group"]
            if lc is not None:
                meta["lc_preference"] = float(lc[i])  # what LC_WIN_RATE averages
            correct = judged and pref > 1.5  # the judge preferred the model's output
            score = pref - 1.0 if judged else 0.5
            items.append(ItemResult(s.id, pair.output_2, pair.output_1, correct, score, meta))
        return items

    def details(self, items: list[ItemResult], outputs: list[Output]) -> dict[str, Any]:
        """The leaderboard's metrics over the items (win rate, standard error, counts, the
        LC win rate when declared), the average output length in characters against the
        reference's (the first sign of length gaming), ``unjudged`` items, the metric the
        score is, and the judge's totals (requests, cache hits, tokens, cost)."""
        metas = [it.meta or {} for it in items]
        annotations = _annotations(
            [Pair("", it.target, it.prediction) for it in items],
            [meta.get("preference") for meta in metas],
            [meta.get("index", i) for i, meta in enumerate(metas)],
        )
        stats = win_rates(annotations) if items else {}
        metric = RAW
        glm = LC_V1 if self.df_gamed is not None else self.lc_glm
        if glm and items:
            try:
                lc = length_controlled(annotations, self.df_gamed, glm)
            except ValueError as err:
                stats["lc_error"] = str(err)
            else:
                stats[LC], stats["lc_standard_error"] = lc.winrate, lc.standard_error
                stats["lc_glm"] = glm
                metric = LC if glm == LC_V1 else RAW
        n = len(items)
        return {
            "metric": metric,
            # NaN -> None, so the details stay JSON
            **{k: None if isinstance(v, float) and math.isnan(v) else v for k, v in stats.items()},
            "unjudged": sum(1 for meta in metas if meta.get("preference") is None),
            "avg_length": sum(len(it.prediction) for it in items) / n if n else None,
            "reference_avg_length": sum(len(str(it.target)) for it in items) / n if n else None,
            "judge": self.judge.totals(),
        }


def _annotations(
    pairs: Sequence[Pair], prefs: Sequence[float | None], indices: Sequence[Any]
) -> list[dict[str, Any]]:
    """AlpacaEval's annotations (:mod:`~agent2rl.scoring.judges.win_rates`) of judged pairs."""
    return [
        {**dataclasses.asdict(p), "preference": pref, "index": index}
        for p, pref, index in zip(pairs, prefs, indices, strict=True)
    ]
