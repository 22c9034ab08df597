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
opened and stepped from that many threads, one per worker, and its episodes are played as two
groups in turn (one group's games step while the other's replies are generated); any other
source, one episode after another in this thread (stepping webshop-lite's or
deepsearch-lite's games is cheap beside generating).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
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
    ``generate_s`` in the backend, ``env_s`` opening, stepping and closing environments
    (in whichever thread), ``env_wait_s`` the part of the solve spent waiting for them
    (``env_s`` less what ran behind generation: equal to it when play is not pipelined),
    ``generate_calls`` batched calls and ``prompts`` prompts over them (their mean is the
    mean batch)."""

    generate_s: float = 0.0
    env_s: float = 0.0
    env_wait_s: float = 0.0
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


@dataclass
class EpisodeSolver:
    """Play every sample's game (``sample.id`` is its ``game_id`` in ``source``) once.

    An output's ``trace``: ``actions``, ``won``, ``reward`` (the episode's return), ``steps``,
    ``goal`` and ``group``. An action the environment refuses outright (``ValueError`` from
    ``step``) still uses one of the episode's ``max_steps`` turns, so a model that repeats
    it cannot stall the evaluation. Deterministic for a given model and backend, and the
    same whatever ``max_open`` and ``batch_size`` (see the module docstring).

    ``max_open``: the most episodes open at once, all stepped by one ``generate`` call per
    step (at least 1); ``batch_size``: prompts per forward pass inside that call. With
    ``max_open <= batch_size`` a step is one forward pass. ``pipeline``: with a source whose
    ``parallelism`` is above 1, play the open episodes as two groups in turn, one group's
    actions stepped in the environments while the other's replies are generated (each
    ``generate`` call then holds at most half of ``max_open``, rounded up); no effect on
    any other source. ``timings`` is where the last
    :meth:`solve` spent its time. An exception from an environment (one that is down:
    :class:`~agent2rl.rollout.env.EnvironmentUnavailable`) or the backend ends the solve;
    every open episode is closed first.
    """

    source: GameSource
    protocol: EpisodeProtocol
    max_open: int = 64
    batch_size: int = 64
    pipeline: bool = True
    timings: EpisodeTimings = field(default_factory=EpisodeTimings, compare=False)

    def settings(self) -> dict[str, Any]:
        # max_open, batch_size and pipeline are left out: greedy outputs do not depend on them.
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
        # Environments that can run several engine calls at once (worker processes, see
        # agent2rl.solvers.env_pool) are opened and stepped from that many threads, and their
        # episodes are played as two groups in turn: one group's actions are stepped in the
        # workers (waited on from a background thread) while the other's replies are
        # generated here, so the environments' time hides behind generation's.
        parallel = max(1, int(getattr(self.source, "parallelism", 1)))
        groups = 2 if self.pipeline and parallel > 1 else 1
        per_group = -(-min(max(1, self.max_open), max(1, len(samples))) // groups)
        pool = _Pool(parallel)
        stepper = ThreadPoolExecutor(1) if groups > 1 else None
        lives: list[list[_Live]] = [[] for _ in range(groups)]
        stepping: list[Future[float] | None] = [None] * groups

        def open_games(live: list[_Live]) -> None:
            """Open waiting games into ``live`` up to its group's size (an episode over at its
            opening is reported at once); the first failure is raised after the rest."""
            batch = [waiting.pop() for _ in range(min(per_group - len(live), len(waiting)))]
            games = [self.source.by_id[samples[i].id] for i in batch]
            opened = pool.map(lambda game: _attempt(self.source.open, game, max_steps), games)
            for i, ep in zip(batch, opened, strict=True):
                if isinstance(ep, Exception):
                    continue
                e = _Live(i, ep, ep.last.observation)
                if ep.done or max_steps < 1:  # over before its first step
                    outputs[i] = _output(e)
                    ep.close()
                else:
                    live.append(e)
            failed = next((ep for ep in opened if isinstance(ep, Exception)), None)
            if failed is not None:  # after the games that did open joined live (closed below)
                raise failed

        def choose_actions(live: list[_Live]) -> None:
            """One ``generate`` call over ``live``; each episode's reply parsed to its action."""
            states = [
                EpisodeState(
                    e.episode.goal,
                    e.steps,
                    e.shown,
                    e.episode.last.admissible_actions,
                    e.episode.game.group,
                )
                for e in live
            ]
            texts = [render(st) for st in states]
            if chat:
                texts = [backend.chat_prompt([{"role": "user", "content": t}]) for t in texts]
            clock = time.perf_counter()
            replies = backend.generate(texts, gen)
            timings.generate_s += time.perf_counter() - clock
            timings.generate_calls += 1
            timings.prompts += len(texts)
            for e, st, reply in zip(live, states, replies, strict=True):
                e.steps.append((e.shown, self.protocol.parse(reply, st)))

        def play(live: list[_Live]) -> float:
            """Step every episode of ``live`` with its last action and retire those that
            ended; the seconds it took."""
            clock = time.perf_counter()
            lanes: dict[Any, list[_Live]] = {}
            for e in live:
                lanes.setdefault(getattr(e.episode, "lane", None), []).append(e)
            pool.map(_play_last_actions, list(lanes.values()))
            # A refused action uses a turn too, so every episode ends within max_steps.
            for e in [e for e in live if e.episode.done or len(e.steps) >= max_steps]:
                live.remove(e)
                outputs[e.index] = _output(e)
                e.episode.close()
            return time.perf_counter() - clock

        try:
            while waiting or any(lives) or any(f is not None for f in stepping):
                for g, live in enumerate(lives):
                    clock = time.perf_counter()
                    pending, stepping[g] = stepping[g], None
                    if pending is not None:  # this group's last actions, stepped meanwhile
                        timings.env_s += pending.result()
                    opening = time.perf_counter()
                    open_games(live)
                    timings.env_s += time.perf_counter() - opening
                    timings.env_wait_s += time.perf_counter() - clock
                    if not live:
                        continue
                    choose_actions(live)
                    if stepper is not None:
                        stepping[g] = stepper.submit(play, live)
                    else:
                        took = play(live)
                        timings.env_s += took
                        timings.env_wait_s += took
        finally:
            try:
                # nothing may still be stepping an episode when it is closed
                for pending in stepping:
                    if pending is not None:
                        wait([pending])
                for live in lives:
                    for e in live:
                        e.episode.close()
            finally:
                if stepper is not None:
                    stepper.shutdown(wait=True)
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
