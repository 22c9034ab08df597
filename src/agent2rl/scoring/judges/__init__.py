"""LLM judges: pairwise preferences for judge-based tasks (level 2).

``scorer`` (Judge: a pairwise judge's preference over the samples' reference outputs),
``win_rates`` (AlpacaEval's win rate and length-controlled win rate, reimplemented), ``base``
(the interfaces: PairwiseJudge, LogprobJudgeBackend, Pair, NextToken, JudgeUnavailable),
``protocol`` (AlpacaEval 2.0's template, position swap and logprob preference), ``logprob``
(LogprobJudge: that protocol over any backend, with cache and meter), ``openai_compatible``
(the HTTP backend; openai_judge()), ``ranking`` (the reference's function-call ranking
judge), ``local`` (a model run in-process), ``smollm2`` (alpaca-lite's SmolLM2-135M judge)
and ``cache`` (JudgmentCache: judgments in SQLite under AGENT2RL_HOME, shared across runs).

:func:`smollm2_judge` is imported from its module (it is not re-exported here, so importing
the package never touches transformers).
"""

from agent2rl.scoring.judges.base import (
    USAGE_FILE,
    JudgeUnavailable,
    LogprobJudgeBackend,
    Messages,
    NextToken,
    Pair,
    PairwiseJudge,
)
from agent2rl.scoring.judges.cache import CACHE_RELPATH, JudgmentCache
from agent2rl.scoring.judges.local import TransformersJudgeBackend
from agent2rl.scoring.judges.logprob import LogprobJudge
from agent2rl.scoring.judges.openai_compatible import (
    OpenAICompatibleBackend,
    judge_api_key,
    openai_judge,
)

__all__ = [
    "CACHE_RELPATH",
    "USAGE_FILE",
    "JudgeUnavailable",
    "JudgmentCache",
    "LogprobJudge",
    "LogprobJudgeBackend",
    "Messages",
    "NextToken",
    "OpenAICompatibleBackend",
    "Pair",
    "PairwiseJudge",
    "TransformersJudgeBackend",
    "judge_api_key",
    "openai_judge",
]
