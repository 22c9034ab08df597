"""The solver interface: how a task turns samples into the model's outputs.

A solver owns everything between the samples and the scorer: building prompts, calling the
inference backend (once for a single-turn task, once per step for an episode), parsing the
model's replies. It never sees the target; the scorer never calls the model.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from agent2rl.dataset import Sample
from agent2rl.inference.backend import Backend


@dataclass(frozen=True)
class Output:
    """What the model produced for one sample. ``text`` is what the report shows as the
    prediction (a completion; an episode's actions joined by `` | ``); ``trace`` holds the
    solver's record for the scorer (``chat``: whether the model was prompted as a chat model;
    an episode's ``actions``, ``won``, ``reward``, ``steps``)."""

    text: str
    trace: dict[str, Any] = field(default_factory=dict)


class Solver(Protocol):
    """Produces one :class:`Output` per sample, in the samples' order, deterministically for a
    given model and backend (greedy decoding)."""

    def solve(self, backend: Backend, samples: list[Sample]) -> list[Output]: ...

    def settings(self) -> dict[str, Any]:
        """Everything about the solver that can change an output (prompt format, generation
        settings, protocol): part of the evaluation hash."""
        ...
