"""Scorers: how a task judges its solver's outputs.

::

    base.py          Scorer (the interface), ItemResult, EvalResult
    metrics.py       what a score is: the metrics a scorer declares (default: 100 x mean
                     item score), registered by name, read back by the score's readers
    math_answer.py   final-answer extraction and numeric comparison (math-verify)
    final_answer.py  FinalAnswer: GSM8K-style final-answer accuracy
    opencompass.py   OpenCompassGsm8k, OpenCompassHumanEval: OpenCompass's post-processing
                     and comparison, as the paper's reference grades GSM8K and HumanEval
    unit_tests.py    UnitTests: HumanEval-style programs run in the program sandbox
    episode.py       EpisodeOutcome: won / reward of interactive episodes, by group
    judges/          level 2: the Judge scorer (a pairwise judge's preference over reference
                     outputs), AlpacaEval's protocol over an HTTP or local logprob backend,
                     its win rate and length-controlled win rate
    llm_client.py    LLMClient: the one OpenAI-compatible client (retries, timeouts,
                     metering, response cache) for every LLM call the harness makes itself

A task picks one in :meth:`~agent2rl.tasks.Task.scorer`.
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
