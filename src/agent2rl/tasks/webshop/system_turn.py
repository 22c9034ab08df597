"""The episode solver with a system turn: the reference sends WebShop's chat ReAct prompt as
a system message and a user message (RD-Agent ``benchmarks/webshop/eval.py``,
``llm_engine.chat([{"role": "system", ...}, {"role": "user", ...}])``); the task-neutral
:class:`~agent2rl.solvers.episode.EpisodeSolver` renders one user message per step. This
solver gives it a backend whose chat template puts the protocol's system message first."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agent2rl.dataset import Sample
from agent2rl.inference.backend import Backend
from agent2rl.solvers.base import Output
from agent2rl.solvers.episode import EpisodeSolver


class _WithSystem:
    """``backend`` whose :meth:`chat_prompt` renders ``system`` as a system turn before the
    messages it is given; everything else is the backend's."""

    def __init__(self, backend: Backend, system: str) -> None:
        self._backend = backend
        self._system = system

    def chat_prompt(self, messages: list[dict[str, str]]) -> Any:
        return self._backend.chat_prompt([{"role": "system", "content": self._system}, *messages])

    def __getattr__(self, name: str) -> Any:
        return getattr(self._backend, name)


@dataclass
class SystemTurnSolver(EpisodeSolver):
    """:class:`EpisodeSolver` whose chat prompts start with ``system`` as a system turn (a
    model without a chat template gets the protocol's raw text, as before)."""

    system: str = ""

    def solve(self, backend: Backend, samples: list[Sample]) -> list[Output]:
        return super().solve(_WithSystem(backend, self.system), samples)  # type: ignore[arg-type]
