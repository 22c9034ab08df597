"""Questions as the rollout layer's games: :class:`QuestionGames` (a
:class:`~agent2rl.rollout.env.GameSource`) and :class:`SearchEpisode` (an
:class:`~agent2rl.rollout.env.Episode`), over a :class:`~.search.SearchBackend`.

A game is one question of a split's ``questions.jsonl`` (``game_id``, ``question``,
``answer``, ``answer_type``, ``category`` = its group); an episode is one search-and-answer
loop for it. Both the grader's episode solver and the rollout service open episodes here,
with the same backend.

Actions (free text: the admissible list is empty):

``search[query]`` (step kind ``search``)
    the observation is the top ``top_k`` hits, ``[1] Title: snippet [2] ...`` (``No
    results.`` when none); reward 0. The step's :class:`~agent2rl.rollout.env.SearchRecord`
    (query, backend, hits) rides on its result for the rollout service's record, and the
    episode's :class:`~.search.QueryLog` (the grader's) gets a line. A backend that cannot
    answer raises :class:`~.search.SearchUnavailable` (the record on it): no step is used.
``answer[text]`` (step kind ``answer``)
    ends the episode; the reward is the offline correctness
    (:func:`~.protocol.answer_reward`: normalised exact match for a single answer, F1 for
    a set); ``won`` is a reward of 1. Legal at any step, the first included.

An episode also ends, unrewarded, after ``max_steps`` actions. Anything else (another
command, an empty query or answer, a query over
:data:`~agent2rl.rollout.env.MAX_ACTION_CHARS` characters) raises :class:`ValueError` and
uses no step (the service answers 400; the grader counts the turn).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agent2rl.files import read_jsonl
from agent2rl.rollout.env import MAX_ACTION_CHARS, GameInfo, SearchRecord, StepResult
from agent2rl.tasks.deepsearch.protocol import (
    EpisodeFormat,
    answer_items,
    answer_reward,
    react_goal,
    reference_snippets,
    shown_observation,
    split_action,
)
from agent2rl.tasks.deepsearch.search import Hit, QueryLog, SearchBackend, SearchUnavailable

#: the opening observation of every episode
INTRO = "Search with search[query]; answer with answer[text]."
#: an answer rewarded at least this is correct (F1 is a ratio of small integers)
WIN_REWARD = 1.0 - 1e-9


def render_hits(hits: list[Hit]) -> str:
    """The observation of a search: ``[1] Title: snippet [2] ...`` (``No results.``)."""
    if not hits:
        return "No results."
    return " ".join(f"[{i}] {h.title}: {h.snippet}" for i, h in enumerate(hits, 1))


def render_snippets(hits: list[Hit]) -> str:
    """The observation of a search as the reference's loop shows it: the hits' snippets
    joined by ``" | "`` (``No results found.``)."""
    return reference_snippets([h.snippet for h in hits])


class QuestionGames:
    """The questions of one split (``questions_file``) searched through ``backend`` (a
    backend, or a function returning one, called once on the first episode: a remote backend
    is not built for a source only asked for its games). ``games`` keep the file's order.
    Raises FileNotFoundError for a missing file and ValueError for a split without
    questions."""

    def __init__(
        self,
        questions_file: Path,
        backend: SearchBackend | Callable[[], SearchBackend],
        max_steps: int,
        top_k: int,
        step_cap: int | None = None,
        log: QueryLog | None = None,
        protocol: str = "transcript",
    ) -> None:
        rows = read_jsonl(Path(questions_file))
        #: the episode protocol: under ``react`` and ``reference`` an episode's goal is the
        #: question and its ``Answer type:`` line (their prompts show both); under
        #: ``reference`` a search's observation is its snippets joined by " | "
        self.protocol = protocol
        if not rows:
            raise ValueError(f"no questions in {questions_file}")
        self.games = [GameInfo(r["game_id"], r.get("category"), {"row": r}) for r in rows]
        self.by_id = {g.game_id: g for g in self.games}
        self.max_steps = max_steps
        self.step_cap = max(max_steps, step_cap or max_steps)
        self.top_k = top_k
        self.log = log or QueryLog(None)
        self._backend = backend

    @property
    def backend(self) -> SearchBackend:
        if callable(self._backend) and not hasattr(self._backend, "search"):
            self._backend = self._backend()
        return self._backend  # type: ignore[return-value]

    def open(self, game: GameInfo, max_steps: int | None = None) -> SearchEpisode:
        """A new episode of ``game``, at most ``max_steps`` actions (default
        ``self.max_steps``, at most ``step_cap``)."""
        steps = min(max_steps or self.max_steps, self.step_cap)
        render = render_snippets if self.protocol == "reference" else render_hits
        episode = SearchEpisode(self.backend, game, steps, self.top_k, self.log, render)
        if self.protocol in ("react", "reference"):
            episode.goal = react_goal(episode.goal, str(episode.row.get("answer_type")))
        return episode


class SearchEpisode:
    """One search-and-answer loop (see the module docstring). Not thread-safe."""

    def __init__(
        self,
        backend: SearchBackend,
        game: GameInfo,
        max_steps: int,
        top_k: int,
        log: QueryLog | None = None,
        render: Callable[[list[Hit]], str] = render_hits,
    ) -> None:
        self.backend = backend
        self.render = render
        self.game = game
        self.row: dict[str, Any] = game.meta["row"]
        self.goal = self.row["question"]
        self.max_steps = max_steps
        self.top_k = top_k
        self.log = log or QueryLog(None)
        self.steps = 0
        self.searches = 0
        self.answer: str | None = None
        self.done = False
        self.last = StepResult(INTRO, [], 0.0, False, False, 0, "reset")

    def admits(self, action: str) -> bool:
        """Whether ``action`` is a well-formed ``search[...]`` or ``answer[...]``."""
        parsed = split_action(action)
        return parsed is not None and bool(parsed[1])

    def step(self, action: str) -> StepResult:
        """Play ``action``; ValueError (nothing changes, no step used) for a malformed one,
        RuntimeError once the episode is over."""
        if self.done:
            raise RuntimeError("the episode is over")
        parsed = split_action(action)
        if parsed is None:
            raise ValueError("unknown action: use search[query] or answer[text]")
        kind, arg = parsed
        if not arg:
            raise ValueError(f"empty {kind}: write {kind}[...] with text inside the brackets")
        if len(arg) > MAX_ACTION_CHARS:
            raise ValueError(
                f"the {kind} is {len(arg)} characters long; at most {MAX_ACTION_CHARS}"
            )
        reward = 0.0
        search = None
        if kind == "search":
            hits, search = self._search(arg)
            observation = self.render(hits)
            self.searches += 1
        else:
            self.answer = arg
            reward = answer_reward(arg, self.row["answer"], self.row["answer_type"])
            observation = "Answer given."
        self.steps += 1
        self.done = kind == "answer" or self.steps >= self.max_steps
        self.last = StepResult(
            observation, [], reward, self.done, reward >= WIN_REWARD, self.steps, kind, search
        )
        return self.last

    def search(self, query: str) -> list[Hit]:
        """The hits for ``query`` outside the action protocol (the reference's loop, which
        searches whatever its regex read: no length or emptiness check), logged and counted
        as a step; a failure is raised as by :meth:`step`."""
        hits, _ = self._search(query)
        self.searches += 1
        self.steps += 1
        return hits

    def _search(self, query: str) -> tuple[list[Hit], SearchRecord]:
        """The hits for ``query`` and its record, logged as this episode's next step. A
        failure is logged too, then re-raised (a :class:`SearchUnavailable` carrying its
        record, for the rollout service's)."""
        started = time.monotonic()
        name, game_id, step = self.backend.name, self.game.game_id, self.steps + 1
        try:
            hits = self.backend.search(query, self.top_k)
        except Exception as err:
            failed = SearchRecord(query, name, 0, time.monotonic() - started, str(err) or repr(err))
            self.log.record(failed, game_id, step)
            if isinstance(err, SearchUnavailable):
                err.search = failed
            raise
        record = SearchRecord(query, name, len(hits), time.monotonic() - started)
        self.log.record(record, game_id, step)
        return hits, record

    def close(self) -> None:
        """Nothing to release (the backend is shared)."""


def expert_walkthrough(
    backend: SearchBackend, row: dict[str, Any], fmt: EpisodeFormat, top_k: int
) -> dict[str, Any] | None:
    """A walkthrough row (``game_id``, ``group``, ``goal``, ``steps`` of ``{observation,
    admissible_actions, action}``, ``final_observation``, ``won``, ``reward``) of the expert
    that plays a generated question's ``plan``: each query, checking that its results as the
    prompt shows them (cut to ``fmt.max_observation_chars``) hold the fact it looks for (the
    last one: every item of the answer), then ``answer[<gold answer>]``. None when a check
    fails or the plan does not fit in ``fmt.max_steps``."""
    plan = row.get("plan") or []
    if len(plan) + 1 > fmt.max_steps:
        return None
    game = GameInfo(row["game_id"], row.get("category"), {"row": row})
    episode = SearchEpisode(backend, game, fmt.max_steps, top_k)
    steps: list[dict[str, Any]] = []

    def play(action: str) -> str:
        steps.append({"observation": episode.last.observation, "admissible_actions": [],
                      "action": action})  # fmt: skip
        return shown_observation(episode.step(action).observation, fmt).lower()

    for i, (query, fact) in enumerate(plan):
        seen = play(f"search[{query}]")
        wanted = [fact]
        if i == len(plan) - 1:
            wanted += answer_items(row["answer"]) if row["answer_type"] == "set" else []
            wanted.append(row["answer"] if row["answer_type"] != "set" else fact)
        if not all(w.lower() in seen for w in wanted):
            return None
    play(f"answer[{row['answer']}]")
    if not episode.last.won:
        return None
    return {
        "game_id": row["game_id"],
        "group": row.get("category"),
        "goal": row["question"],
        "steps": steps,
        "final_observation": episode.last.observation,
        "won": True,
        "reward": episode.last.reward,
    }
