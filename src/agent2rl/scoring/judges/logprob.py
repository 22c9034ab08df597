"""``LogprobJudge``: AlpacaEval's pairwise protocol over any logprob backend.

The judge owns everything that makes two backends' preferences comparable — the prompt, the
per-instruction position swap and its undoing, the parser, draws for identical outputs —
plus the cache and the meter; the backend only answers "which next tokens, how likely". So
a judge served by OpenAI, by a vLLM server or by a local transformers model differs only in
its backend (and hence its identity, which keys the cache and the evaluation hash).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agent2rl.scoring.judges import protocol
from agent2rl.scoring.judges.base import LogprobJudgeBackend, NextToken, Pair
from agent2rl.scoring.judges.cache import Judgment, JudgmentCache, judge_with_cache
from agent2rl.scoring.llm_client import LLMMeter


class LogprobJudge:
    """A :class:`~agent2rl.scoring.judges.base.PairwiseJudge` running AlpacaEval 2.0's
    ``weighted_alpaca_eval_gpt4_turbo`` protocol (:mod:`~agent2rl.scoring.judges.protocol`)
    on ``backend``.

    ``cache`` (optional) answers pairs judged before by the same judge; ``meter`` counts the
    cache hits (the backend records its own requests on the same meter). ``judge_protocol``
    is AlpacaEval's own by default; a variant (:class:`~agent2rl.scoring.judges.protocol.
    JudgeProtocol`: another template, both orders) keeps the labels, the preference, the swap
    and the cache, and has its own identity.
    """

    def __init__(
        self,
        backend: LogprobJudgeBackend,
        cache: JudgmentCache | None = None,
        meter: LLMMeter | None = None,
        judge_protocol: protocol.JudgeProtocol = protocol.ALPACA_EVAL,
    ) -> None:
        self.backend = backend
        self.cache = cache
        self.meter = meter or LLMMeter()
        self.protocol = judge_protocol

    def identity(self) -> dict[str, Any]:
        return {**self.protocol.identity(), "backend": self.backend.identity()}

    def totals(self) -> dict[str, Any]:
        return self.meter.totals()

    def read(self, answer: NextToken) -> float:
        """The preference over the shown order that one answer gives."""
        return protocol.preference_from_logprobs(answer.top)

    def preferences(self, pairs: Sequence[Pair]) -> list[float]:
        """One preference per pair, asking only what the cache lacks, ``backend.batch_size``
        prompts at a time (:func:`~agent2rl.scoring.judges.cache.judge_with_cache`), each pair
        shown in the order :func:`~agent2rl.scoring.judges.protocol.is_swapped` gives. Raises
        :class:`~agent2rl.scoring.judges.base.JudgeUnavailable` from the backend."""
        orders = 2 if self.protocol.both_orders else 1
        builds = (self.protocol.build, *self.protocol.also)
        views = self.protocol.views

        def judge_chunk(chunk: list[int]) -> list[Judgment]:
            # the seeded order first, then (both orders) the other one; each in every phrasing
            shown = [
                (i, swap if n == 0 else not swap, build)
                for i in chunk
                for swap in [protocol.is_swapped(pairs[i].instruction)]
                for n in range(orders)
                for build in builds
            ]
            prompts = []
            for i, swap, build in shown:
                p = pairs[i]
                first, second = (p.output_2, p.output_1) if swap else (p.output_1, p.output_2)
                prompts.append(build(p.instruction, first, second))
            answers = self.backend.next_tokens(prompts, self.protocol.top_logprobs)
            judged: list[Judgment] = []
            for k in range(len(chunk)):
                pair_views = slice(k * views, (k + 1) * views)
                asked = list(zip(shown[pair_views], answers[pair_views], strict=True))
                prefs = [protocol.unswap(self.read(a), swap) for (_, swap, _), a in asked]
                pref = prefs[0] if views == 1 else protocol.combine_orders(prefs)
                top = asked[0][1].top if views == 1 else [t for _, a in asked for t in a.top]
                # a protocol that asks for no candidates (a ranking) has none to keep
                judged.append((pref, top if self.protocol.top_logprobs else None))
            return judged

        return judge_with_cache(
            pairs,
            self.identity(),
            self.cache,
            self.meter,
            int(self.backend.batch_size) // views,
            judge_chunk,
        )

    def close(self) -> None:
        self.backend.close()
        if self.cache is not None:
            self.cache.close()
