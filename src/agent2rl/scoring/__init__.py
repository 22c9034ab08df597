"""Scorers: how a task judges its solver's outputs. A task picks one in
:meth:`~agent2rl.tasks.Task.scorer`.

``base`` (Scorer, ItemResult, EvalResult), ``metrics`` (what a score is: the metrics a scorer
declares, by name; default 100 x the mean item score), ``math_answer`` and ``final_answer``
(GSM8K-style final answers, math-verify), ``opencompass`` (OpenCompass's post-processing, as
the paper's reference grades GSM8K and HumanEval), ``unit_tests`` (HumanEval-style programs in
the program sandbox), ``episode`` (interactive episodes' outcomes, by group), ``judges/``
(level 2: pairwise judges, AlpacaEval's win rates) and ``llm_client`` (the one
OpenAI-compatible client, with retries, metering and a response cache, for every LLM call the
harness makes itself).
"""

from agent2rl.scoring.base import EvalResult, ItemResult, Scorer
from agent2rl.scoring.episode import EpisodeOutcome
from agent2rl.scoring.final_answer import FinalAnswer
from agent2rl.scoring.judges.scorer import Judge
from agent2rl.scoring.math_answer import answers_match, extract_final_answer
from agent2rl.scoring.opencompass import OpenCompassGsm8k, OpenCompassHumanEval
from agent2rl.scoring.unit_tests import UnitTests

__all__ = [
    "EpisodeOutcome",
    "EvalResult",
    "FinalAnswer",
    "ItemResult",
    "Judge",
    "OpenCompassGsm8k",
    "OpenCompassHumanEval",
    "Scorer",
    "UnitTests",
    "answers_match",
    "extract_final_answer",
]
