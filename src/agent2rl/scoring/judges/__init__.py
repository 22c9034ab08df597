"""LLM judges: pairwise preferences for judge-based tasks (level 2).

::

    scorer.py             Judge: the scorer of a judge-based task, a pairwise judge's
                          preference over the samples' reference outputs
    win_rates.py          AlpacaEval's metrics: the win rate and the length-controlled (LC)
                          win rate, the package's definitions reimplemented
    base.py               Pair, PairwiseJudge (what a scorer holds), LogprobJudgeBackend
                          (what a logprob judge runs on), NextToken, JudgeUnavailable,
                          USAGE_FILE (the judge's usage lines in a grading directory)
    protocol.py           AlpacaEval 2.0's weighted_alpaca_eval_gpt4_turbo protocol: the
                          template, the position swap, the logprob preference
    logprob.py            LogprobJudge: that protocol over any backend, with cache and meter
    openai_compatible.py  the HTTP backend for OpenAI-compatible servers, on the harness's
                          LLM client (:mod:`agent2rl.scoring.llm_client`); openai_judge()
    local.py              TransformersJudgeBackend: a model run in-process (transformers, GGUF)
    smollm2.py            alpaca-lite's judge: SmolLM2-135M on CPU, compact template in two
                          phrasings, both orders; smollm2_judge()
    cache.py              JudgmentCache: judgments (not requests) in SQLite under
                          AGENT2RL_HOME, shared across runs and by local judges

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
