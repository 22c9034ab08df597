"""The environment interface every interactive task implements, and both of its users share.

The grader's episode solver (:mod:`agent2rl.solvers.episode`) plays the private games through
it, and the rollout service (:mod:`agent2rl.rollout.app`) serves the public ones to the
agent through it: one code path, so an episode the agent plays for training behaves exactly
like one the grader plays. A task provides a :class:`GameSource` per split; nothing here
knows any task.

Terms: a *game* is one playable item (an ALFWorld game file, a WebShop goal, a DeepSearchQA
question); an *episode* is one play of a game, step by step; an *action* is one line of text
the player sends; the *admissible actions* are those the environment lists as valid at this
step (empty when any text may be sent, as in a search/answer tool loop).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

#: the longest action text an environment accepts (longer is a malformed request)
MAX_ACTION_CHARS = 256
#: the longest query text a record keeps (longer is cut; its full length is kept beside it)
MAX_RECORDED_QUERY_CHARS = 1000


@dataclass(frozen=True)
class SearchRecord:
    """One query a step sent to a search engine, for the run's record: the ``query`` as
    sent, the ``backend``'s name (``bm25``, ``serpapi``, ``wikipedia``), the number of
    ``hits``, the ``seconds`` it took and, for a search that failed, its ``error`` (one
    line; ``hits`` 0)."""

    query: str
    backend: str
    hits: int
    seconds: float = 0.0
    error: str = ""

    def to_row(self) -> dict[str, Any]:
        """The record as stored: the query cut to :data:`MAX_RECORDED_QUERY_CHARS` (so a
        runaway query cannot bloat the record), ``query_chars`` its full length."""
        return {
            "backend": self.backend,
            "query": self.query[:MAX_RECORDED_QUERY_CHARS],
            "query_chars": len(self.query),
            "hits": self.hits,
            "seconds": round(self.seconds, 4),
            "error": self.error[:MAX_RECORDED_QUERY_CHARS],
        }


class EnvironmentUnavailable(RuntimeError):
    """A service the environment depends on (a search provider) could not answer. The step
    was not played: the episode is unchanged and the action may be sent again. ``search``
    is the failed query's record when the step was a search (for the run's record)."""

    def __init__(self, message: str, search: SearchRecord | None = None) -> None:
        super().__init__(message)
        self.search = search


@dataclass(frozen=True)
class GameInfo:
    """One game of a split. ``game_id`` is unique within the split; ``group`` is the category
    reports break scores and episodes down by (ALFWorld's task type, a product category, a
    question category), or None; ``meta`` holds what the task needs to open it (a file path)."""

    game_id: str
    group: str | None = None
    meta: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)


@dataclass(frozen=True)
class StepResult:
    """What a player sees after the reset or a step.

    ``observation`` is the text the prompt protocol shows (the opening observation on reset);
    ``reward`` is the reward of this step (an episode's return is their sum); ``won`` is True
    once the game's goal is reached; ``kind`` names what the step was (``search``, ``click``,
    ``answer``...; ``reset`` for the opening) for the run's per-kind step counts; ``search``
    is the query the step sent to a search engine, if any, for the run's record of queries.
    """

    observation: str
    admissible_actions: list[str]
    reward: float
    done: bool
    won: bool
    steps: int
    kind: str = "step"
    search: SearchRecord | None = None


class Episode(Protocol):
    """One game being played. Not thread-safe: one caller at a time (the rollout service
    holds a lock per session). ``last`` is the latest :class:`StepResult`."""

    game: GameInfo
    goal: str
    last: StepResult
    done: bool
    max_steps: int

    def step(self, action: str) -> StepResult:
        """Play ``action`` (already checked by :func:`check_action`). An action the game does
        not understand is played as the game plays it (it uses a step). Raises
        :class:`RuntimeError` once the episode is over, :class:`ValueError` for an
        action the environment refuses outright (e.g. a second purchase), and
        :class:`EnvironmentUnavailable` when a service it needs is down: the episode is
        then unchanged."""
        ...

    def close(self) -> None:
        """Free what the episode holds (a game process, a browser). May raise: the rollout
        service frees the session all the same and answers the error as a JSON 500."""
        ...

    # Optional: ``admits(action) -> bool``, whether the current page or state offers
    # ``action``, for an episode whose admissible list holds templates (``search[<query>]``)
    # rather than every action; the rollout service records it per step.


class GameSource(Protocol):
    """The games of one split and how to start an episode of one."""

    games: list[GameInfo]
    by_id: dict[str, GameInfo]
    #: an episode's default length; ``open`` may be asked for up to ``step_cap``
    max_steps: int
    step_cap: int

    def open(self, game: GameInfo, max_steps: int | None = None) -> Episode: ...


def check_action(action: str) -> str:
    """``action`` if it is one line of printable text of at most :data:`MAX_ACTION_CHARS`
    characters (surrounding whitespace stripped); raises ValueError naming the problem."""
    text = action.strip()
    if not text:
        raise ValueError("the action is empty: send one line of text, e.g. 'go to desk 1'")
    if len(text) > MAX_ACTION_CHARS:
        raise ValueError(f"the action is {len(text)} characters long; at most {MAX_ACTION_CHARS}")
    if any(not ch.isprintable() for ch in text):
        raise ValueError("the action holds control characters: send one line of text")
    return text
