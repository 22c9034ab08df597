"""The rollout service (:class:`RolloutService`) and its HTTP API (FastAPI,
:func:`create_app`): agents play the public games for online RL.

One instance per interactive run, on 127.0.0.1, serving only the task's public split (it is
never given the private games). Every endpoint but ``/health`` needs
``Authorization: Bearer <ENV_TOKEN>``; errors are 4xx with ``{"error": "..."}`` naming the fix.

- ``GET /games``: the public game ids with their groups, and the default step limit.
- ``POST /sessions {"game_id"?, "seed"?, "max_steps"?}``: start an episode of the given game
  (or of one drawn with ``seed``, else at random); answers the session id, the goal, the first
  observation and the admissible actions.
- ``POST /sessions/{id}/step {"action": "..."}``: play one action; answers the observation,
  the step's reward, ``done``, ``won``, the step count, the admissible actions. An action the
  game does not understand is played like in the game itself (one step used); a malformed one
  (not text, empty, too long, control characters) or one the environment refuses outright is
  answered with 400 and the session is untouched. When a service the environment needs is
  down (a search provider), 503 with ``Retry-After``: the step was not played.
- ``DELETE /sessions/{id}``: end a session. ``GET /sessions``: the open ones.

Anything else an environment raises is a 500 naming it (a session that fails to close is freed).

Limits: at most ``max_sessions`` open sessions (429 beyond, naming DELETE), ``steps_per_s``
steps per second over all sessions with bursts of as many (429 with ``Retry-After``), and
sessions idle for ``idle_timeout_s`` are closed to free their slot. Every session and step is
recorded in the run's :class:`~agent2rl.rollout.env_record.EnvLedger`, and so is every query a
step sends to a search engine (a failed one too), with its session and step number.

The games come from a :class:`~agent2rl.rollout.env.GameSource`: this module knows no task.
"""

from __future__ import annotations

import contextlib
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, StrictInt, StrictStr

from agent2rl.http_api import Refused, error, install_errors, require_bearer
from agent2rl.rollout.env import (
    MAX_ACTION_CHARS,
    EnvironmentUnavailable,
    Episode,
    GameInfo,
    GameSource,
    StepResult,
    check_action,
)
from agent2rl.rollout.env_record import EnvLedger

#: the Retry-After of a 503 (a search provider down): long enough not to hammer it
UNAVAILABLE_RETRY_S = 5


@dataclass
class RolloutLimits:
    max_sessions: int = 32
    steps_per_s: float = 500.0
    idle_timeout_s: float = 900.0


class NewSession(BaseModel):
    model_config = ConfigDict(extra="forbid")
    game_id: StrictStr | None = None
    seed: StrictInt | None = None
    max_steps: StrictInt | None = None


class StepRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    action: StrictStr


@dataclass
class _Slot:
    id: int
    episode: Episode
    #: on the service's clock (a test's own one too)
    last_used: float
    lock: threading.Lock = field(default_factory=threading.Lock)
    closed: bool = False


class _Bucket:
    """A token bucket: ``rate`` tokens per second, at most ``rate`` stored (one second's
    burst). ``take`` returns 0 when a token was taken, else the seconds until one is due."""

    def __init__(self, rate: float) -> None:
        self.rate, self.tokens, self.at = rate, rate, time.monotonic()
        self.lock = threading.Lock()

    def take(self) -> float:
        with self.lock:
            now = time.monotonic()
            self.tokens = min(self.rate, self.tokens + (now - self.at) * self.rate)
            self.at = now
            if self.tokens >= 1.0:
                self.tokens -= 1.0
                return 0.0
            return (1.0 - self.tokens) / self.rate


class RolloutService:
    """The open sessions over ``source``, recorded in ``ledger``: one method per endpoint
    (the module docstring), a refusal raised as :class:`~agent2rl.http_api.Refused` with its
    status; anything else the environment raises propagates. Thread-safe."""

    def __init__(
        self,
        source: GameSource,
        ledger: EnvLedger,
        limits: RolloutLimits | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.source, self.ledger, self.clock = source, ledger, clock
        self.limits = limits or RolloutLimits()
        self._slots: dict[int, _Slot] = {}
        self._lock = threading.Lock()
        self._bucket = _Bucket(self.limits.steps_per_s)
        self._pending = 0  # sessions being started: they count against max_sessions

    def health(self) -> dict[str, Any]:
        return {"status": "ok", "games": len(self.source.games)}

    def games(self) -> dict[str, Any]:
        return {
            "games": [{"game_id": g.game_id, "group": g.group} for g in self.source.games],
            "max_steps": self.source.max_steps,
        }

    def sessions(self) -> dict[str, Any]:
        with self._lock:
            open_slots = list(self._slots.values())
        rows = [
            {
                "session_id": s.id,
                "game_id": s.episode.game.game_id,
                "steps": s.episode.last.steps,
                "done": s.episode.done,
            }
            for s in open_slots
        ]
        return {"sessions": rows, "max_sessions": self.limits.max_sessions}

    def open(
        self, game_id: str | None = None, seed: int | None = None, max_steps: int | None = None
    ) -> dict[str, Any]:
        """Start an episode (idle sessions reaped first); a place is reserved while the game
        starts, and given back if starting it raises."""
        game = self._game(game_id, seed)
        max_steps = self.source.max_steps if max_steps is None else max_steps
        if not 1 <= max_steps <= self.source.step_cap:
            raise Refused(400, f"max_steps must be between 1 and {self.source.step_cap}")
        self._reap_idle()
        # Reserve a place first: starting a game takes a while and must not hold the lock.
        with self._lock:
            if len(self._slots) + self._pending >= self.limits.max_sessions:
                raise Refused(
                    429,
                    f"too many open sessions ({self.limits.max_sessions}): close finished ones "
                    "with DELETE /sessions/{id}",
                )
            self._pending += 1
        slot = None
        try:
            episode = self.source.open(game, max_steps)
            slot = _Slot(self.ledger.open_session(game.game_id, game.group), episode, self.clock())
        finally:
            with self._lock:
                self._pending -= 1
                if slot is not None:
                    self._slots[slot.id] = slot
        return _view(slot, episode.last)

    def step(self, session_id: int, action: str) -> dict[str, Any]:
        """Play ``action`` and record the step; a refused one leaves the episode as it was
        (a 503's search query is recorded all the same)."""
        slot = self._slot(session_id)
        try:
            action = check_action(action)
        except ValueError as err:
            raise Refused(400, str(err)) from None
        wait = self._bucket.take()
        if wait > 0:
            raise Refused(
                429,
                f"more than {self.limits.steps_per_s:g} steps per second: retry after {wait:.2f}s",
                {"Retry-After": f"{max(1, round(wait + 0.5))}"},
            )
        with slot.lock:
            if slot.closed:
                raise Refused(404, f"session {session_id} was closed: start a new one")
            ep = slot.episode
            if ep.done:
                raise Refused(409, f"session {session_id}'s episode is over: start a new one")
            listed = ep.last.admissible_actions
            # With no list (a free-text tool loop) every well-formed action is admissible; an
            # episode whose list holds templates (WebShop's "search[<query>]") says itself.
            admits = getattr(ep, "admits", None)
            admissible = admits(action) if admits else (not listed or action in listed)
            try:
                result = ep.step(action)
            except ValueError as err:  # refused by the environment; the episode is unchanged
                raise Refused(400, str(err)) from None
            except EnvironmentUnavailable as err:  # not played; the episode is unchanged
                slot.last_used = self.clock()
                if err.search is not None:
                    self.ledger.record_search(slot.id, ep.last.steps + 1, err.search)
                raise Refused(
                    503,
                    f"{err}; the step was not played: send it again later",
                    {"Retry-After": str(UNAVAILABLE_RETRY_S)},
                ) from None
            slot.last_used = self.clock()
            self.ledger.record_step(
                slot.id, admissible, result.reward, result.won, result.done, result.kind,
                search=result.search, step=result.steps,
            )  # fmt: skip
        return _view(slot, result)

    def close(self, session_id: int) -> dict[str, Any]:
        """End a session; its place is freed even when the environment's close raises."""
        self._close(self._slot(session_id))
        return {"session_id": session_id, "closed": True}

    def _game(self, game_id: str | None, seed: int | None) -> GameInfo:
        if game_id is None:
            rng = random.Random(seed) if seed is not None else random.SystemRandom()
            return rng.choice(self.source.games)
        game = self.source.by_id.get(game_id)
        if game is None:
            raise Refused(
                404,
                f"unknown game {game_id!r}: this service plays the public training "
                "games only; GET /games lists them",
            )
        return game

    def _slot(self, session_id: int) -> _Slot:
        with self._lock:
            slot = self._slots.get(session_id)
        if slot is None:
            raise Refused(404, f"no open session {session_id}: start one with POST /sessions")
        return slot

    def _close(self, slot: _Slot) -> None:
        # A session whose close failed must not hold one of max_sessions forever: its place
        # is freed and its end recorded before the error is re-raised.
        with slot.lock:
            if slot.closed:
                return
            slot.closed = True
            try:
                slot.episode.close()
            finally:
                with self._lock:
                    self._slots.pop(slot.id, None)
                self.ledger.close_session(slot.id)

    def _reap_idle(self) -> None:
        oldest = self.clock() - self.limits.idle_timeout_s
        with self._lock:
            idle = [s for s in self._slots.values() if s.last_used < oldest]
        for s in idle:
            # freed anyway; an idle session's close error is no one's answer
            with contextlib.suppress(Exception):
                self._close(s)


def _view(slot: _Slot, result: StepResult) -> dict[str, Any]:
    ep = slot.episode
    return {
        "session_id": slot.id,
        "game_id": ep.game.game_id,
        "group": ep.game.group,
        "goal": ep.goal,
        "observation": result.observation,
        "admissible_actions": result.admissible_actions,
        "reward": result.reward,
        "done": result.done,
        "won": result.won,
        "steps": result.steps,
        "max_steps": ep.max_steps,
        "kind": result.kind,
    }


async def _bad_body(request: Request) -> JSONResponse:
    if request.url.path.endswith("/step"):
        return error(400, 'request body must be JSON like {"action": "go to desk 1"} (a string)')
    return error(
        400,
        'request body must be JSON like {"game_id": "...", "seed": 0, "max_steps": 20}'
        " (every field optional)",
    )


async def _environment_failed(request: Request, call_next: Any) -> Any:
    # Anything else an environment raises (a game engine's bug, a close that fails) is
    # answered in the API's own shape, not as a plain-text 500; the service goes on.
    try:
        return await call_next(request)
    except Exception as exc:
        message = f"{type(exc).__name__}: {exc}".splitlines()[0][:500]
        return error(500, f"the environment failed: {message}; start a new session")


def create_app(service: RolloutService, token: str) -> FastAPI:
    """The rollout API over ``service``, every route but ``/health`` behind ``token`` (see
    the module docstring)."""
    app = FastAPI(title="agent2rl rollout service", docs_url=None, redoc_url=None, openapi_url=None)
    install_errors(app, "rollout service", bad_body=_bad_body)
    app.middleware("http")(_environment_failed)

    def authorize(request: Request) -> None:
        require_bearer(request, token, "ENV_TOKEN")

    authorized = [Depends(authorize)]

    app.get("/health")(service.health)
    app.get("/games", dependencies=authorized)(service.games)
    app.get("/sessions", dependencies=authorized)(service.sessions)
    app.delete("/sessions/{session_id}", dependencies=authorized)(service.close)

    @app.post("/sessions", dependencies=authorized)
    def open_session(req: NewSession) -> dict[str, Any]:
        return service.open(req.game_id, req.seed, req.max_steps)

    @app.post("/sessions/{session_id}/step", dependencies=authorized)
    def step(session_id: int, req: StepRequest) -> dict[str, Any]:
        return service.step(session_id, req.action)

    return app


def describe_api(max_steps: int, reward: str, example_action: str) -> str:
    """Markdown for a task's ``description.md``: how the agent reaches the rollout service,
    with the task's default episode length, what its ``reward`` is and an example action."""
    return f"""A service over the public training games runs for you at `$ENV_SERVER_URL` (token
`$ENV_TOKEN`, header `Authorization: Bearer $ENV_TOKEN`). `data/env_client.py` wraps it:

```python
import os, sys; sys.path.insert(0, os.environ["DATA_PATH"])
from env_client import EnvClient
env = EnvClient()
with env.session(seed=0) as s:          # or game_id=...; a random public game otherwise
    while not s.done:
        s.step({example_action!r})  # s.observation, s.reward, s.won, s.steps, s.goal
```

- `GET /games`: the public game ids and their groups.
- `POST /sessions` with `{{"game_id"?, "seed"?, "max_steps"?}}`: a new episode (default
  {max_steps} steps): `session_id`, `goal`, `observation`, `admissible_actions`.
- `POST /sessions/<id>/step` with `{{"action": "..."}}`: `observation`, `reward` ({reward}),
  `done`, `won`, `steps`, `admissible_actions`, `kind` (what the step was). An action the game
  does not understand uses a step, as in evaluation; a malformed one (empty, over
  {MAX_ACTION_CHARS} characters, control characters) gets HTTP 400 and changes nothing.
- `DELETE /sessions/<id>` ends a session. At most a few dozen sessions may be open at once
  and steps are rate-limited (HTTP 429 with `Retry-After`; the client retries). A service
  the game needs that is down (a search engine) gets HTTP 503 with `Retry-After`: the step
  was not played (the client retries).
- Every episode, step and search query is recorded for the run's report.
"""
