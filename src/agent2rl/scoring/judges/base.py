"""The judge interfaces: :class:`PairwiseJudge`, what a scorer holds, and
:class:`LogprobJudgeBackend`, what a logprob judge
(:class:`~agent2rl.scoring.judges.logprob.LogprobJudge`) runs on: an OpenAI-compatible HTTP
server (:mod:`~agent2rl.scoring.judges.openai_compatible`) or a local model
(:mod:`~agent2rl.scoring.judges.local`), with no change to the judge or the scorer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from agent2rl.metering.usage import TokenCounts
from agent2rl.scoring.llm_client import LLMUnavailable

#: a judge's usage file in a grading directory (next to its ``result.json``): one
#: :class:`~agent2rl.metering.usage.UsageRecord` line per judge request, written by the
#: judge's :class:`~agent2rl.scoring.llm_client.LLMMeter`, never to the agent's usage file
USAGE_FILE = "judge_usage.jsonl"

#: A chat prompt: ``[{"role": "system" | "user" | "assistant", "content": str}, ...]``.
Messages = list[dict[str, str]]


@dataclass(frozen=True)
class Pair:
    """One pairwise comparison: ``output_1`` is the reference's output, ``output_2`` the
    model's (AlpacaEval's order; the judge may present them swapped)."""

    instruction: str
    output_1: str
    output_2: str


class JudgeUnavailable(LLMUnavailable):
    """The judge could not give a judgment (unreachable after its retries, refused the key,
    answered without logprobs). One line naming the judge and the cause. Not the model's
    fault: the evaluation fails as the harness's, and the same weights can be graded again
    once the judge is back."""


class PairwiseJudge(Protocol):
    """Compares a model's outputs with reference outputs.

    :meth:`preferences` returns one float per pair, in order, in AlpacaEval's convention:
    in [1, 2], 1 = the reference (``output_1``) is better, 2 = the model's output is, 1.5 a
    draw; NaN when the judge answered but its answer names neither output (AlpacaEval
    drops such pairs from the win rate). It raises :class:`JudgeUnavailable` when it cannot
    judge at all.
    """

    def preferences(self, pairs: Sequence[Pair]) -> list[float]: ...

    def identity(self) -> dict[str, Any]:
        """Everything about the judge that can change a preference (protocol, model,
        endpoint): part of the evaluation hash and of the judgment cache key."""
        ...

    def totals(self) -> dict[str, Any]:
        """What judging has cost so far: requests, cache hits, tokens, cost (for the
        report)."""
        ...


@dataclass(frozen=True)
class NextToken:
    """The top candidates for the next token: ``(token text, log-probability)``, most
    likely first, and the tokens the request used (None when the backend cannot tell)."""

    top: list[tuple[str, float]]
    tokens: TokenCounts | None = None
    raw: dict[str, Any] = field(default_factory=dict)


class LogprobJudgeBackend(Protocol):
    """A model that gives next-token log-probabilities for chat prompts.

    ``batch_size`` is how many prompts :meth:`next_tokens` takes at once (an HTTP backend
    sends them concurrently, a local model runs them as one batch). :meth:`next_tokens`
    returns one :class:`NextToken` per prompt, in order, with up to ``top_logprobs``
    candidates each, decoding the first token as the model would at temperature 1 (no
    sampling needed: only the distribution is read). It raises
    :class:`JudgeUnavailable` when the model cannot answer (after any retries of its own);
    a backend records what each request used through the meter it was given.
    """

    batch_size: int

    def identity(self) -> dict[str, Any]:
        """The model and where it runs (part of the judge's identity)."""
        ...

    def next_tokens(self, prompts: Sequence[Messages], top_logprobs: int) -> list[NextToken]: ...

    def close(self) -> None: ...
