"""Multi-turn play: each sample is a game, played greedily step by step against its
environment through the task-neutral :class:`~agent2rl.rollout.env.GameSource` interface (the
rollout service serves the agent the same interface over the public games).

At each step the task's :class:`EpisodeProtocol` turns the episode so far into a prompt, the
model replies, and the protocol reads the action out of the reply. Play is step-synchronous:
up to ``max_open`` games are open side by side, every step is one ``generate`` call over all
of them still running (the batch shrinks as episodes end), and a game that ends makes room
for the next one, which joins at the next step. Greedy outputs do not depend on which
episodes share a batch (left padding with an attention mask; ``tests/unit/solvers/
test_episode_batching.py`` plays the same games one at a time, 16 and all at once), so
``max_open`` is a speed setting, not an evaluation setting. A source with a ``parallelism``
above 1 (games in worker processes, :class:`~agent2rl.solvers.env_pool.ProcessGames`) is
opened and stepped from that many threads, one per worker; any other source, one episode
after another in this thread (stepping webshop-lite's or deepsearch-lite's games is cheap
beside generating).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass, field
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
class EpisodeTimings:
    """Where a :meth:`EpisodeSolver.solve` spent its time, for benchmarks and logs:
    ``generate_s`` in the backend, ``env_s`` opening, stepping and closing environments,
    ``generate_calls`` batched calls and ``prompts`` prompts over them (their mean is the
    mean batch)."""

    generate_s: float = 0.0
    env_s: float = 0.0
    generate_calls: int = 0
    prompts: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class _Live:
    """An open episode of the sample at ``index``: what the protocol needs to prompt it."""

    index: int
    episode: Episode
    shown: str
    steps: list[tuple[str, str]] = field(default_factory=list)
    reward: float = 0.0

    def state(self) -> EpisodeState:
        ep = self.episode
        return EpisodeState(
            ep.goal, self.steps, self.shown, ep.last.admissible_actions, ep.game.group
        )


@dataclass
class EpisodeSolver:
    """Play every sample's game (``sample.id`` is its ``game_id`` in ``source``) once.

    An output's ``trace``: ``actions``, ``won``, ``reward`` (the episode's return), ``steps``,
    ``goal`` and ``group``. An action the environment refuses outright (``ValueError`` from
    ``step``) still uses one of the episode's ``max_steps`` turns, so a model that repeats
    it cannot stall the evaluation.

    ``max_open``: the most episodes open at once, all stepped by one ``generate`` call per
    step (at least 1); ``batch_size``: prompts per forward pass inside that call (neither
    changes an output, see the module docstring). ``timings`` is where the last
    :meth:`solve` spent its time. An exception from an environment (one that is down:
    :class:`~agent2rl.rollout.env.EnvironmentUnavailable`) or the backend ends the solve;
    every open episode is closed first."""

    source: GameSource
    protocol: EpisodeProtocol
    max_open: int = 64
    batch_size: int = 64
    timings: EpisodeTimings = field(default_factory=EpisodeTimings, compare=False)

    def settings(self) -> dict[str, Any]:
        # max_open and batch_size are left out: greedy outputs do not depend on them.
        return {"solver": "episode", "protocol": self.protocol.to_dict()}

    def solve(self, backend: Backend, samples: list[Sample]) -> list[Output]:
        chat = is_chat(backend) and self.protocol.use_chat_template
        gen = GenerationSettings(
            max_new_tokens=self.protocol.max_new_tokens,
            stop=tuple(self.protocol.stop),
            batch_size=self.batch_size,
        )
        render = self.protocol.chat_message if chat else self.protocol.prompt
        max_steps = self.protocol.max_steps
        self.timings = timings = EpisodeTimings()
        outputs: list[Output | None] = [None] * len(samples)
        waiting = list(range(len(samples)))[::-1]  # popped from the end: samples in order
        live: list[_Live] = []
        # Environments that can run several engine calls at once (worker processes, see
        # agent2rl.solvers.env_pool) are opened and stepped from that many threads.
        parallel = max(1, int(getattr(self.source, "parallelism", 1)))
        pool = _Pool(parallel)
        try:
            while waiting or live:
                clock = time.perf_counter()
                room = max(1, self.max_open) - len(live)
                batch = [waiting.pop() for _ in range(min(room, len(waiting)))]
                games = [self.source.by_id[samples[i].id] for i in batch]
                opened = pool.map(lambda g: _attempt(self.source.open, g, max_steps), games)
                failed = next((ep for ep in opened if isinstance(ep, Exception)), None)
                for i, ep in zip(batch, opened, strict=True):
                    if isinstance(ep, Exception):
                        continue
                    e = _Live(i, ep, ep.last.observation)
                    if ep.done or max_steps < 1:  # over before its first step
                        outputs[i] = _output(e)
                        ep.close()
                    else:
                        live.append(e)
                timings.env_s += time.perf_counter() - clock
                if failed is not None:  # after the games that did open joined live (closed below)
                    raise failed
                if not live:
                    continue
                states = [e.state() for e in live]
                texts = [render(st) for st in states]
                if chat:
                    texts = [backend.chat_prompt([{"role": "user", "content": t}]) for t in texts]
                clock = time.perf_counter()
                replies = backend.generate(texts, gen)
                timings.generate_s += time.perf_counter() - clock
                timings.generate_calls += 1
                timings.prompts += len(texts)
                clock = time.perf_counter()
                lanes: dict[Any, list[_Live]] = {}
                for e, st, reply in zip(live, states, replies, strict=True):
                    e.steps.append((e.shown, self.protocol.parse(reply, st)))
                    lanes.setdefault(getattr(e.episode, "lane", None), []).append(e)
                list(pool.map(_play_last_actions, lanes.values()))
                # A refused action uses a turn too, so every episode ends within max_steps.
                for e in [e for e in live if e.episode.done or len(e.steps) >= max_steps]:
                    live.remove(e)
                    outputs[e.index] = _output(e)
                    e.episode.close()
                timings.env_s += time.perf_counter() - clock
        finally:
            try:
                for e in live:
                    e.episode.close()
            finally:
                pool.close()
                release = getattr(self.source, "release", None)
                if release is not None:
                    release()
        assert all(o is not None for o in outputs), "every sample's episode was played"
        return outputs  # type: ignore[return-value]


def _attempt(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)``, or the exception it raised (returned, so that the calls beside it that
    succeeded are not lost)."""
    try:
        return fn(*args)
    except Exception as err:  # noqa: BLE001 (raised again by the caller)
        return err


def _play_last_actions(episodes: list[_Live]) -> None:
    """Play each episode's last chosen action, one episode after another (the episodes of one
    lane share an engine)."""
    for e in episodes:
        action = e.steps[-1][1]
        try:
            result = e.episode.step(action)
        except ValueError as err:
            e.shown = f"Refused: {err}"
            continue
        e.shown = result.observation
        e.reward += result.reward


class _Pool:
    """``map`` in this thread (``workers`` 1) or over a thread pool, results in order; the
    first exception is raised after every call has finished."""

    def __init__(self, workers: int) -> None:
        self._executor = ThreadPoolExecutor(workers) if workers > 1 else None

    def map(self, fn: Callable[[Any], Any], items: Sequence[Any]) -> list[Any]:
        if self._executor is None or len(items) < 2:
            return [fn(x) for x in items]
        futures = [self._executor.submit(fn, x) for x in items]
        wait(futures)
        return [f.result() for f in futures]

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=True)


def _output(e: _Live) -> Output:
    ep = e.episode
    actions = [a for _, a in e.steps]
    return Output(
        " | ".join(actions),
        {
            "actions": actions,
            "won": bool(ep.last.won),
            "reward": e.reward,
            "steps": len(e.steps),
            "goal": ep.goal,
            "group": ep.game.group,
        },
    )
