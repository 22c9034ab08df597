"""The rollout service's HTTP API (FastAPI): agents play the public games for online RL.

One instance per level-3 run, on 127.0.0.1, serving only the task's public split (it is never
given the private games). Every endpoint but ``/health`` needs
``Authorization: Bearer <ENV_TOKEN>``; errors are 4xx with ``{"error": "..."}`` naming the fix.

- ``GET /games``: the public game ids with their task types, and the default step limit.
- ``POST /sessions {"game_id"?, "seed"?, "max_steps"?}``: start an episode of the given game
  (or of one drawn with ``seed``, else at random); answers the session id, the goal, the first
  observation and the admissible actions.
- ``POST /sessions/{id}/step {"action": "..."}``: play one action; answers the observation,
  reward (1.0 on the winning step), ``done``, ``won``, the step count, the admissible actions.
  An action the game does not admit is played like in the game itself ("Nothing happens.",
  one step used); a malformed one (not text, empty, too long, control characters) is refused
  with 400 and the session is untouched.
- ``DELETE /sessions/{id}``: end a session. ``GET /sessions``: the open ones.

Limits: at most ``max_sessions`` open sessions (429 beyond, naming DELETE), ``steps_per_s``
steps per second over all sessions with bursts of as many (429 with ``Retry-After``), and
sessions idle for ``idle_timeout_s`` are closed to free their slot. Every session and step is
recorded in the run's :class:`~agent2rl.envs.ledger.EnvLedger`.
"""

from __future__ import annotations

import hmac
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, StrictInt, StrictStr
from starlette.exceptions import HTTPException as StarletteHTTPException

from agent2rl.envs.alfworld import GameInfo, StepResult
from agent2rl.envs.ledger import EnvLedger

MAX_ACTION_CHARS = 256
MAX_STEPS_CAP = 500


class Episode(Protocol):
    """One game being played (e.g. :class:`~agent2rl.envs.alfworld.GameSession`)."""

    game: GameInfo
    goal: str
    last: StepResult
    done: bool

    def step(self, action: str) -> StepResult: ...

    def close(self) -> None: ...


class GameSource(Protocol):
    """The games a rollout service serves and how to start one (the public split only)."""

    games: list[GameInfo]
    by_id: dict[str, GameInfo]
    max_steps: int

    def open(self, game: GameInfo, max_steps: int) -> Episode: ...


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


class _Refused(Exception):
    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers


@dataclass
class _Slot:
    id: int
    episode: Episode
    lock: threading.Lock = field(default_factory=threading.Lock)
    last_used: float = field(default_factory=time.monotonic)
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


def check_action(action: str) -> str:
    """``action`` if it is one line of printable text of at most :data:`MAX_ACTION_CHARS`
    characters (surrounding whitespace stripped); raises ValueError naming the problem."""
    text = action.strip()
    if not text:
        raise ValueError("the action is empty: send a command such as 'go to desk 1'")
    if len(text) > MAX_ACTION_CHARS:
        raise ValueError(f"the action is {len(text)} characters long; at most {MAX_ACTION_CHARS}")
    if any(not ch.isprintable() for ch in text):
        raise ValueError("the action holds control characters: send one line of text")
    return text


def create_app(
    source: GameSource,
    token: str,
    ledger: EnvLedger,
    limits: RolloutLimits | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> FastAPI:
    """The rollout API over ``source`` (see the module docstring)."""
    limits = limits or RolloutLimits()
    app = FastAPI(title="agent2rl rollout service", docs_url=None, redoc_url=None, openapi_url=None)
    slots: dict[int, _Slot] = {}
    slots_lock = threading.Lock()
    bucket = _Bucket(limits.steps_per_s)
    pending = [0]  # sessions being started: they count against max_sessions

    def authorize(request: Request) -> None:
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip(), token):
            raise _Refused(
                401, "missing or wrong token: send the header 'Authorization: Bearer $ENV_TOKEN'"
            )

    @app.exception_handler(_Refused)
    async def _refused(request: Request, exc: _Refused) -> JSONResponse:
        return JSONResponse({"error": exc.message}, status_code=exc.status, headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _bad_body(request: Request, exc: RequestValidationError) -> JSONResponse:
        if request.url.path.endswith("/step"):
            msg = 'request body must be JSON like {"action": "go to desk 1"} (a string)'
        else:
            msg = (
                'request body must be JSON like {"game_id": "...", "seed": 0, "max_steps": 20}'
                " (every field optional)"
            )
        return JSONResponse({"error": msg}, status_code=400)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return JSONResponse({"error": str(exc.detail)}, status_code=exc.status_code)

    def close_slot(slot: _Slot) -> None:
        with slot.lock:
            if slot.closed:
                return
            slot.closed = True
            slot.episode.close()
        ledger.close_session(slot.id)
        with slots_lock:
            slots.pop(slot.id, None)

    def reap_idle() -> None:
        now = clock()
        with slots_lock:
            idle = [s for s in slots.values() if now - s.last_used > limits.idle_timeout_s]
        for s in idle:
            close_slot(s)

    def slot_for(session_id: int) -> _Slot:
        with slots_lock:
            slot = slots.get(session_id)
        if slot is None:
            raise _Refused(404, f"no open session {session_id}: start one with POST /sessions")
        return slot

    def view(slot: _Slot, result: StepResult) -> dict[str, Any]:
        ep = slot.episode
        return {
            "session_id": slot.id,
            "game_id": ep.game.game_id,
            "task_type": ep.game.task_type,
            "goal": ep.goal,
            "observation": result.observation,
            "admissible_actions": result.admissible_actions,
            "reward": result.reward,
            "done": result.done,
            "won": result.won,
            "steps": result.steps,
            "max_steps": getattr(ep, "max_steps", source.max_steps),
        }

    @app.get("/health")
    def health() -> dict[str, Any]:
        return {"status": "ok", "games": len(source.games)}

    @app.get("/games")
    def games(request: Request) -> dict[str, Any]:
        authorize(request)
        return {
            "games": [{"game_id": g.game_id, "task_type": g.task_type} for g in source.games],
            "max_steps": source.max_steps,
        }

    @app.get("/sessions")
    def list_sessions(request: Request) -> dict[str, Any]:
        authorize(request)
        with slots_lock:
            open_slots = list(slots.values())
        return {
            "sessions": [
                {
                    "session_id": s.id,
                    "game_id": s.episode.game.game_id,
                    "steps": s.episode.last.steps,
                    "done": s.episode.done,
                }
                for s in open_slots
            ],
            "max_sessions": limits.max_sessions,
        }

    @app.post("/sessions")
    def new_session(req: NewSession, request: Request) -> dict[str, Any]:
        authorize(request)
        if req.game_id is not None:
            game = source.by_id.get(req.game_id)
            if game is None:
                raise _Refused(
                    404,
                    f"unknown game {req.game_id!r}: this service plays the public training "
                    "games only; GET /games lists them",
                )
        else:
            rng = random.Random(req.seed) if req.seed is not None else random.SystemRandom()
            game = rng.choice(source.games)
        max_steps = source.max_steps if req.max_steps is None else req.max_steps
        if not 1 <= max_steps <= MAX_STEPS_CAP:
            raise _Refused(400, f"max_steps must be between 1 and {MAX_STEPS_CAP}")
        reap_idle()
        # Reserve a place first: starting a game takes a while and must not hold the lock.
        with slots_lock:
            if len(slots) + pending[0] >= limits.max_sessions:
                raise _Refused(
                    429,
                    f"too many open sessions ({limits.max_sessions}): close finished ones "
                    "with DELETE /sessions/{id}",
                )
            pending[0] += 1
        slot = None
        try:
            episode = source.open(game, max_steps)
            slot = _Slot(ledger.open_session(game.game_id, game.task_type), episode)
        finally:
            with slots_lock:
                pending[0] -= 1
                if slot is not None:
                    slots[slot.id] = slot
        return view(slot, episode.last)

    @app.post("/sessions/{session_id}/step")
    def step(session_id: int, req: StepRequest, request: Request) -> dict[str, Any]:
        authorize(request)
        slot = slot_for(session_id)
        try:
            action = check_action(req.action)
        except ValueError as err:
            raise _Refused(400, str(err)) from None
        wait = bucket.take()
        if wait > 0:
            raise _Refused(
                429,
                f"more than {limits.steps_per_s:g} steps per second: retry after {wait:.2f}s",
                {"Retry-After": f"{max(1, round(wait + 0.5))}"},
            )
        with slot.lock:
            if slot.closed:
                raise _Refused(404, f"session {session_id} was closed: start a new one")
            ep = slot.episode
            if ep.done:
                raise _Refused(409, f"session {session_id}'s episode is over: start a new one")
            admissible = action in ep.last.admissible_actions
            result = ep.step(action)
            slot.last_used = clock()
            ledger.record_step(slot.id, admissible, result.reward, result.won, result.done)
        return view(slot, result)

    @app.delete("/sessions/{session_id}")
    def delete(session_id: int, request: Request) -> dict[str, Any]:
        authorize(request)
        close_slot(slot_for(session_id))
        return {"session_id": session_id, "closed": True}

    return app
