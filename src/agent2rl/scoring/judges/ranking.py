"""The reference implementation's AlpacaEval judge: a ranking by function call
(``annotators_gpt52_fn``, GPT-5.2), in AlpacaEval's ``*_fn`` annotator style.

What is copied from the ``alpaca-eval`` package (0.6.6), annotator
``alpaca_eval_gpt4_turbo_fn`` (``evaluators_configs/alpaca_eval_gpt4_turbo_fn/``):

- the prompt template ``alpaca_eval_fn.txt`` (read from the installed package, sha256
  checked: :data:`TEMPLATE_SHA256`), placeholders replaced as in
  :func:`agent2rl.scoring.judges.protocol.messages` (template split into chat messages first);
- the function ``make_partial_leaderboard`` and its JSON schema (:data:`TOOL`), forced with
  ``tool_choice``;
- the parser (``pipeline_meta_parser``: ``json_parser`` on ``ordered_models``, then
  ``ranking_parser`` with ``model_1_name="m"``): the rank of model ``m`` (the output shown
  first) is the preference, 1 or 2; any other answer is NaN (AlpacaEval drops the pair);
- the per-instruction position swap of every AlpacaEval pairwise annotator
  (:func:`~agent2rl.scoring.judges.protocol.is_swapped`) and its undoing; identical outputs
  are a draw (1.5) without a request.

What is assumed about the reference's own ``annotators_gpt52_fn`` config, which is not
available here (the reference's public code names it in its evaluation config only): that it
is the package's ``alpaca_eval_gpt4_turbo_fn`` with the model set to ``gpt-5.2``. The
package's ``max_tokens: 100`` is sent as ``max_completion_tokens`` (GPT-5-family models
refuse ``max_tokens``), ``temperature: 0`` as is. A binary preference (no logprobs) means the
length-controlled win rate is fitted on 1/2 labels, as AlpacaEval does for its ``_fn``
annotators.
"""

from __future__ import annotations

import json
import math
from functools import cache
from pathlib import Path
from typing import Any

from agent2rl.scoring.judges import protocol
from agent2rl.scoring.judges.base import Messages, NextToken
from agent2rl.scoring.judges.cache import JudgmentCache
from agent2rl.scoring.judges.logprob import LogprobJudge
from agent2rl.scoring.judges.openai_compatible import OpenAICompatibleBackend
from agent2rl.scoring.llm_client import DEFAULT_BASE_URL, Completion, LLMMeter, UnusableResponse

#: the reference's annotator name, and the model it names
NAME = "annotators_gpt52_fn"
DEFAULT_MODEL = "gpt-5.2"
TEMPLATE_PATH = "alpaca_eval/evaluators_configs/alpaca_eval_gpt4_turbo_fn/alpaca_eval_fn.txt"
#: sha256 of that file in alpaca-eval 0.6.6
TEMPLATE_SHA256 = "12490d7306fcdcc6d3963ae03ea0d16c043cfbe2f2d10a7ff36762b6c1580b2e"
MAX_COMPLETION_TOKENS = 100
TEMPERATURE = 0
FUNCTION = "make_partial_leaderboard"
#: the function as ``alpaca_eval_gpt4_turbo_fn/configs.yaml`` declares it
TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": FUNCTION,
        "description": "Make a leaderboard of models given a list of the models ordered by "
        "the preference of their outputs.",
        "strict": True,
        "parameters": {
            "type": "object",
            "properties": {
                "ordered_models": {
                    "type": "array",
                    "description": "A list of models ordered by the preference of their "
                    "outputs. The first model in the list has the best output.",
                    "items": {
                        "type": "object",
                        "properties": {
                            "model": {"type": "string", "description": "The name of the model"},
                            "rank": {
                                "type": "number",
                                "description": "Order of preference of the model, 1 has the "
                                "best output",
                            },
                        },
                        "additionalProperties": False,
                        "required": ["model", "rank"],
                    },
                }
            },
            "additionalProperties": False,
            "required": ["ordered_models"],
        },
    },
}
TOOL_CHOICE = {"type": "function", "function": {"name": FUNCTION}}


@cache
def template() -> str:
    """The ``_fn`` prompt template from the installed package
    (:func:`~agent2rl.scoring.judges.protocol.read_template`)."""
    return protocol.read_template(TEMPLATE_PATH, TEMPLATE_SHA256, NAME, NAME)


def messages(instruction: str, output_1: str, output_2: str) -> Messages:
    """The judge's chat messages for one pair as shown (template split first, then filled:
    :func:`~agent2rl.scoring.judges.protocol.fill`)."""
    return protocol.fill(protocol.to_messages(template().strip()), instruction, output_1, output_2)


def preference_from_ranking(arguments: str | None) -> float:
    """The function call's arguments (JSON) to a preference over the shown order: the rank
    of model ``m`` (1: the first output is better, 2: the second), NaN for anything else
    (not JSON, no ``ordered_models``, no ``m``, a rank other than 1 or 2)."""
    try:
        ordered = json.loads(arguments or "")["ordered_models"]
        rank = next(c["rank"] for c in ordered if c["model"] == protocol.FIRST)
    except (ValueError, TypeError, KeyError, StopIteration):
        return math.nan
    return float(rank) if rank in (1, 2) else math.nan


class FunctionCallBackend(OpenAICompatibleBackend):
    """Chat completions that force the ranking function; the same client (retries, timeouts,
    metering) as the logprob backend (:class:`OpenAICompatibleBackend`). ``NextToken.raw``
    holds ``{"arguments": <the call's JSON text or None>}``; ``top`` is empty."""

    def identity(self) -> dict[str, Any]:
        return {**super().identity(), "kind": "openai-compatible-fn"}

    def request_body(self, messages: Messages, top_logprobs: int) -> dict[str, Any]:
        return {
            "model": self.model,
            "messages": messages,
            "max_completion_tokens": MAX_COMPLETION_TOKENS,
            "temperature": TEMPERATURE,
            "tools": [TOOL],
            "tool_choice": TOOL_CHOICE,
        }

    def read(self, answer: Completion) -> NextToken:
        try:
            calls = answer.message().get("tool_calls") or []
            call = next((c for c in calls if c.get("function", {}).get("name") == FUNCTION), None)
        except (UnusableResponse, TypeError, AttributeError):
            raise UnusableResponse(
                "did not answer with a chat completion", "not a chat completion"
            ) from None
        # A completion without the call is the judge's answer all the same: NaN, not an outage.
        args = call["function"].get("arguments") if call else None
        return NextToken(top=[], tokens=answer.tokens, raw={"arguments": args})


#: the protocol's prompt and swap; the preference is read from the function call
#: (:meth:`RankingJudge.read`), so no candidates are asked for
RANKING = protocol.JudgeProtocol(NAME, messages, TEMPLATE_SHA256, top_logprobs=0)


class RankingJudge(LogprobJudge):
    """A :class:`~agent2rl.scoring.judges.base.PairwiseJudge` that asks for a ranking by
    function call; preferences are 1 or 2 (1.5 for identical outputs, NaN for an answer
    that names neither). Swapped, cached and metered like :class:`LogprobJudge`."""

    def __init__(
        self,
        backend: FunctionCallBackend,
        cache: JudgmentCache | None = None,
        meter: LLMMeter | None = None,
    ) -> None:
        super().__init__(backend, cache, meter or backend.meter, RANKING)

    def identity(self) -> dict[str, Any]:
        return {
            "protocol": NAME,
            "template_sha256": TEMPLATE_SHA256,
            "function": FUNCTION,
            "labels": list(protocol.LABELS),
            "swap_seed": protocol.SWITCH_SEED,
            "backend": self.backend.identity(),
        }

    def read(self, answer: NextToken) -> float:
        return preference_from_ranking(answer.raw.get("arguments"))


def ranking_judge(
    model: str = DEFAULT_MODEL,
    base_url: str = DEFAULT_BASE_URL,
    *,
    cache_path: Path | None = None,
    usage_path: Path | None = None,
    api_key: str | None = None,
    **backend_options: Any,
) -> RankingJudge:
    """The ``annotators_gpt52_fn`` judge on an OpenAI-compatible endpoint (see
    :func:`~agent2rl.scoring.judges.openai_compatible.openai_judge` for the arguments)."""
    meter = LLMMeter(usage_path)
    backend = FunctionCallBackend(model, base_url, api_key, meter, **backend_options)
    cache = JudgmentCache(cache_path) if cache_path is not None else None
    return RankingJudge(backend, cache=cache, meter=meter)


#: the named judge configs the ``alpacaeval`` task offers (``--task-opt judge=NAME``): name ->
#: (its default model, what it is)
JUDGE_CONFIGS: dict[str, tuple[str, str]] = {
    NAME: (
        DEFAULT_MODEL,
        "the reference implementation's evaluation config: GPT-5.2 ranking the two outputs "
        "by function call (AlpacaEval's _fn annotator style)",
    ),
    protocol.NAME: (
        protocol.DEFAULT_MODEL,
        "AlpacaEval 2.0's official annotator: GPT-4 Turbo's next-token logprobs of m / M",
    ),
}
