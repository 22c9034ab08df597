"""Multi-turn play: each sample is a game, played greedily step by step against its
environment through the task-neutral :class:`~agent2rl.rollout.env.GameSource` interface (the
rollout service serves the agent the same interface over the public games).

At each step the task's :class:`EpisodeProtocol` turns the episode so far into a prompt, the
model replies, and the protocol reads the action out of the reply. Up to ``env_batch`` games
are open side by side, and each step is one ``generate`` call over the unfinished ones.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from agent2rl.dataset import Sample
from agent2rl.inference.backend import Backend, GenerationSettings
from agent2rl.rollout.env import Episode, GameSource
from agent2rl.solvers.base import Output
from agent2rl.solvers.prompt_format import is_chat


@dataclass(frozen=True)
class EpisodeState:
    """An episode as the prompt protocol sees it before a step: the goal, the earlier steps as
    (the observation shown, the action taken), the current observation, the admissible
    actions (empty when the environment takes free text) and the game's group (its category,
    e.g. ALFWorld's task type, whose worked examples a few-shot prompt shows; None if the
    game has none)."""

    goal: str
    steps: Sequence[tuple[str, str]]
    observation: str
    admissible: Sequence[str]
    group: str | None = None


class EpisodeProtocol(Protocol):
    """How a task prompts a model in an episode and reads its action (a task ships it to the
    agent as a file, so training code builds the very same prompts)."""

    max_steps: int
    max_new_tokens: int
    stop: tuple[str, ...]

    @property
    def use_chat_template(self) -> bool:
        """Whether a model with a chat template is prompted through it (with
        :meth:`chat_message`); False: every model gets :meth:`prompt`'s text as it is."""
        ...

    def prompt(self, state: EpisodeState) -> str:
        """The prompt for a model without a chat template (a base model), and for every model
        when :attr:`use_chat_template` is False."""
        ...

    def chat_message(self, state: EpisodeState) -> str:
        """The user message for a model with a chat template."""
        ...

    def parse(self, reply: str, state: EpisodeState) -> str:
        """The action in the model's reply (it may be one the game does not admit)."""
        ...

    def to_dict(self) -> dict[str, Any]: ...


@dataclass
class EpisodeSolver:
    """Play every sample's game (``sample.id`` is its ``game_id`` in ``source``) once.

    An output's ``trace``: ``actions``, ``won``, ``reward`` (the episode's return), ``steps``,
    ``goal`` and ``group``. An action the environment refuses outright (``ValueError`` from
    ``step``) still uses one of the episode's ``max_steps`` turns, so a model that repeats
    it cannot stall the evaluation. Deterministic for a given model and backend.
    """

    source: GameSource
    protocol: EpisodeProtocol
    env_batch: int = 16
    batch_size: int = 64

    def settings(self) -> dict[str, Any]:
        return {"solver": "episode", "protocol": self.protocol.to_dict()}

    def solve(self, backend: Backend, samples: list[Sample]) -> list[Output]:
        chat = is_chat(backend) and self.protocol.use_chat_template
        gen = GenerationSettings(
            max_new_tokens=self.protocol.max_new_tokens,
            stop=tuple(self.protocol.stop),
            batch_size=self.batch_size,
        )
        outputs: list[Output] = []
        for start in range(0, len(samples), self.env_batch):
            chunk = samples[start : start + self.env_batch]
            outputs += self._play(backend, chunk, gen, chat)
        return outputs

    def _play(
        self, backend: Backend, chunk: list[Sample], gen: GenerationSettings, chat: bool
    ) -> list[Output]:
        max_steps = self.protocol.max_steps
        episodes: list[Episode] = []
        try:
            for s in chunk:
                episodes.append(self.source.open(self.source.by_id[s.id], max_steps))
            shown = [ep.last.observation for ep in episodes]
            steps: list[list[tuple[str, str]]] = [[] for _ in episodes]
            rewards = [0.0] * len(episodes)
            for _ in range(max_steps):
                # A refused action uses a turn too, so every episode ends within max_steps.
                active = [
                    i for i, ep in enumerate(episodes) if not ep.done and len(steps[i]) < max_steps
                ]
                if not active:
                    break
                states = {
                    i: EpisodeState(
                        episodes[i].goal,
                        steps[i],
                        shown[i],
                        episodes[i].last.admissible_actions,
                        episodes[i].game.group,
                    )
                    for i in active
                }
                render = self.protocol.chat_message if chat else self.protocol.prompt
                texts = [render(states[i]) for i in active]
                if chat:
                    texts = [backend.chat_prompt([{"role": "user", "content": t}]) for t in texts]
                replies = backend.generate(texts, gen)
                for i, reply in zip(active, replies, strict=True):
                    action = self.protocol.parse(reply, states[i])
                    steps[i].append((shown[i], action))
                    try:
                        result = episodes[i].step(action)
                    except ValueError as err:
                        shown[i] = f"Refused: {err}"
                        continue
                    shown[i] = result.observation
                    rewards[i] += result.reward
            return [
                Output(
                    " | ".join(a for _, a in steps[i]),
                    {
                        "actions": [a for _, a in steps[i]],
                        "won": bool(ep.last.won),
                        "reward": rewards[i],
                        "steps": len(steps[i]),
                        "goal": ep.goal,
                        "group": ep.game.group,
                    },
                )
                for i, ep in enumerate(episodes)
            ]
        finally:
            for ep in episodes:
                ep.close()
