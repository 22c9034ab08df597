"""The grader's loop under ``protocol=reference``: DeepSearchQA played exactly as the paper's
reference plays it (RD-Agent ``benchmarks/deepsearchqa/eval.py`` 93-97 and 185-277).

The loop's rules are :class:`~.protocol.ReferenceEpisode`'s (standard library, shipped to the
agent as ``data/protocol.py``); this module drives it over the model and the search backend:
every open question's prompt in one ``generate`` call per step (raw text, greedy, 256 new
tokens, the reference's three stop strings), then one more call for the questions whose reply
had no action (``\\nAction: answer[`` appended, 128 tokens, stop ``]``). Greedy outputs do not
depend on the batch, so ``max_open`` is a speed setting.

A search's observation is the top ``top_k`` results' snippets joined by ``" | "`` (the
reference's SerpAPI format, whatever the backend). Differences that remain, on purpose: a
search that fails after the backend's retries ends the evaluation (the reference puts
``Search error: ...`` in the prompt and goes on, so a network fault scores as the model's);
a prompt longer than the model's context is the backend's to handle (the reference's vLLM,
``max_model_len=4096``, refuses it and the evaluation fails).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agent2rl.dataset import Sample
from agent2rl.inference.backend import Backend, GenerationSettings
from agent2rl.solvers.base import Output
from agent2rl.tasks.deepsearch.games import WIN_REWARD, QuestionGames, render_snippets
from agent2rl.tasks.deepsearch.protocol import (
    FORCED_MAX_NEW_TOKENS,
    FORCED_STOP,
    REFERENCE_STOP,
    ReferenceEpisode,
    answer_reward,
)

#: the loop's version (part of the solver's settings, so of the evaluation hash)
LOOP_VERSION = "1"


@dataclass
class ReferenceReactSolver:
    """Play every sample's question (``sample.id`` is its ``game_id`` in ``source``) once,
    as the reference does (module docstring). An output's text is the answer; its trace:
    ``answer``, ``actions`` (``search[...]`` / ``answer[...]`` as read), ``forced`` (a
    forced answer was asked for), ``steps``, ``searches``, ``reward`` (the environment's
    exact-match reward of the answer), ``won``, ``goal``, ``group``."""

    source: QuestionGames
    max_steps: int = 6
    max_new_tokens: int = 256
    max_open: int = 64
    batch_size: int = 64

    def settings(self) -> dict[str, Any]:
        return reference_solver_settings(self.max_steps, self.max_new_tokens, self.source.top_k)

    def solve(self, backend: Backend, samples: list[Sample]) -> list[Output]:
        step = GenerationSettings(self.max_new_tokens, REFERENCE_STOP, self.batch_size)
        forced = GenerationSettings(FORCED_MAX_NEW_TOKENS, FORCED_STOP, self.batch_size)
        outputs: list[Output] = []
        width = max(1, self.max_open)
        for start in range(0, len(samples), width):
            chunk = samples[start : start + width]
            games = [self.source.open(self.source.by_id[s.id], self.max_steps) for s in chunk]
            loops = [
                ReferenceEpisode(
                    str(g.row["question"]), str(g.row.get("answer_type")), self.max_steps
                )
                for g in games
            ]
            pending = list(range(len(chunk)))
            while pending:
                replies = backend.generate([loops[i].prompt for i in pending], step)
                force = []
                for i, reply in zip(pending, replies, strict=True):
                    what, arg = loops[i].feed(reply)
                    if what == "search":
                        loops[i].observe(render_snippets(games[i].search(arg)))
                    elif what == "force":
                        force.append(i)
                if force:
                    texts = backend.generate([loops[i].prompt for i in force], forced)
                    for i, text in zip(force, texts, strict=True):
                        loops[i].feed_forced(text)
                pending = [i for i in pending if not loops[i].done]
            for g, loop in zip(games, loops, strict=True):
                g.close()
                outputs.append(_output(g, loop))
        return outputs


def _output(game: Any, loop: ReferenceEpisode) -> Output:
    answer = loop.answer or ""
    reward = answer_reward(answer, game.row["answer"], game.row["answer_type"])
    return Output(
        answer,
        {
            "answer": answer,
            "actions": loop.actions,
            "forced": loop.forced,
            "steps": loop.steps,
            "searches": game.searches,
            "reward": reward,
            "won": reward >= WIN_REWARD,
            "goal": game.goal,
            "group": game.game.group,
        },
    )


def reference_solver_settings(max_steps: int, max_new_tokens: int, top_k: int) -> dict[str, Any]:
    """The loop's settings (the solver's part of the evaluation settings), without a
    source."""
    return {
        "solver": "deepsearchqa-reference-react",
        "protocol": {
            "protocol": "reference",
            "version": LOOP_VERSION,
            "max_steps": max_steps,
            "max_new_tokens": max_new_tokens,
            "stop": list(REFERENCE_STOP),
            "forced_answer": {"max_new_tokens": FORCED_MAX_NEW_TOKENS, "stop": list(FORCED_STOP)},
            "top_k": top_k,
            "observation": "snippets joined by ' | '",
        },
    }
