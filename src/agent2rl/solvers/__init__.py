"""Solvers: how a task's samples become the model's outputs.

::

    base.py           Solver (the interface) and Output
    prompt_format.py  PromptFormat: a single-turn task's prompt protocol, as data
    generate.py       Generate: one greedy completion per sample
    episode.py        EpisodeSolver: multi-turn play against the task's environment (the
                      rollout layer's GameSource), with the task's EpisodeProtocol; a tool
                      loop (search / answer) is an episode whose environment is the tool

A task picks one in :meth:`~agent2rl.tasks.Task.solver`; the scorer then judges the outputs.
"""

from agent2rl.solvers.base import Output, Solver
from agent2rl.solvers.episode import EpisodeProtocol, EpisodeSolver, EpisodeState
from agent2rl.solvers.generate import Generate
from agent2rl.solvers.prompt_format import PromptFormat, is_chat

__all__ = [
    "EpisodeProtocol",
    "EpisodeSolver",
    "EpisodeState",
    "Generate",
    "Output",
    "PromptFormat",
    "Solver",
    "is_chat",
]
