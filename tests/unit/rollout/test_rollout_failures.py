"""An environment that fails inside the rollout service: the answer is a JSON 500 naming the
failure (never a plain-text one), the service goes on, and a session whose ``close`` raises
is freed all the same (it must not hold one of ``max_sessions`` forever).

The service is the real app over real HTTP on loopback, with a small game source of its own
whose episodes fail on demand."""

from __future__ import annotations

import asyncio
import secrets
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
import uvicorn

from agent2rl.rollout import EnvLedger, RolloutLimits, RolloutService, create_app
from agent2rl.rollout.env import GameInfo, StepResult


@dataclass
class _Episode:
    game: GameInfo
    max_steps: int
    goal: str = "survive"
    done: bool = False
    last: StepResult = field(default_factory=lambda: StepResult("start", [], 0.0, False, False, 0))

    def step(self, action: str) -> StepResult:
        if action == "crash":
            raise KeyError("the engine lost its state")
        self.last = StepResult("ok", [], 0.0, False, False, self.last.steps + 1)
        return self.last

    def close(self) -> None:
        if self.game.game_id == "bad-close":
            raise OSError("the game process is already gone")


class _Source:
    def __init__(self) -> None:
        self.games = [GameInfo(g) for g in ("bad-close", "fine", "bad-open")]
        self.by_id = {g.game_id: g for g in self.games}
        self.max_steps, self.step_cap = 10, 20

    def open(self, game: GameInfo, max_steps: int | None = None) -> _Episode:
        if game.game_id == "bad-open":
            raise RuntimeError("the game file is corrupt")
        return _Episode(game, max_steps or self.max_steps)


@pytest.fixture
def service(tmp_path: Path) -> Iterator[tuple[httpx.Client, EnvLedger]]:
    token = secrets.token_urlsafe(16)
    ledger = EnvLedger(tmp_path / "env.db")
    app = create_app(RolloutService(_Source(), ledger, RolloutLimits(max_sessions=1)), token)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    server = uvicorn.Server(uvicorn.Config(app, log_level="critical"))
    thread = threading.Thread(target=lambda: asyncio.run(server.serve(sockets=[sock])))
    thread.start()
    deadline = time.time() + 10
    while not server.started and time.time() < deadline:
        time.sleep(0.01)
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    client = httpx.Client(base_url=url, timeout=10, headers={"Authorization": f"Bearer {token}"})
    try:
        yield client, ledger
    finally:
        client.close()
        server.should_exit = True
        thread.join(timeout=10)
        ledger.close()


def test_a_session_whose_close_raises_is_freed(service) -> None:
    client, ledger = service
    sid = client.post("/sessions", json={"game_id": "bad-close"}).json()["session_id"]
    r = client.delete(f"/sessions/{sid}")
    assert r.status_code == 500 and "already gone" in r.json()["error"]
    # Its place is free (max_sessions is 1) and it is recorded as closed.
    assert client.get("/sessions").json()["sessions"] == []
    r = client.post("/sessions", json={"game_id": "fine"})
    assert r.status_code == 200, r.text
    assert client.delete(f"/sessions/{r.json()['session_id']}").status_code == 200
    closed = {s.id: s.closed_at for s in ledger.sessions()}
    assert closed[sid] is not None


def test_environment_exceptions_are_json_500s(service) -> None:
    client, _ = service
    r = client.post("/sessions", json={"game_id": "bad-open"})
    assert r.status_code == 500 and "corrupt" in r.json()["error"]
    # The place reserved for it was given back.
    sid = client.post("/sessions", json={"game_id": "fine"}).json()["session_id"]
    r = client.post(f"/sessions/{sid}/step", json={"action": "crash"})
    assert r.status_code == 500 and r.headers["content-type"] == "application/json"
    assert "KeyError" in r.json()["error"]
    # The service goes on.
    r = client.post(f"/sessions/{sid}/step", json={"action": "wait"})
    assert r.status_code == 200 and r.json()["steps"] == 1
