"""A small client for the rollout service (standard library only).

Copied into the agent's workspace as ``data/env_client.py``::

    import sys; sys.path.insert(0, os.environ["DATA_PATH"])
    from env_client import EnvClient

    env = EnvClient()                      # $ENV_SERVER_URL and $ENV_TOKEN
    with env.session(game_id=None, seed=0) as s:
        print(s.goal, s.observation, s.admissible_actions)
        while not s.done:
            s.step(s.admissible_actions[0])
        print(s.won, s.steps)

Every HTTP error becomes an :class:`EnvError` carrying the service's message and status; a
429 (too many sessions or steps per second) or a 503 (a search provider down; the step was
not played) is retried after the service's ``Retry-After`` up to ``retries`` times before it
is raised.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from typing import Any


class EnvError(RuntimeError):
    """An error answer of the rollout service (``status`` is its HTTP status)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}")
        self.status, self.message = status, message


class EnvClient:
    """The rollout service at ``url`` with ``token`` (default: the workspace's environment
    variables ``ENV_SERVER_URL`` and ``ENV_TOKEN``)."""

    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        timeout: float = 120.0,
        retries: int = 20,
    ) -> None:
        self.url = (url or os.environ["ENV_SERVER_URL"]).rstrip("/")
        self.token = token or os.environ["ENV_TOKEN"]
        self.timeout, self.retries = timeout, retries

    def request(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        """One call; returns the decoded JSON answer (see the module docstring for errors)."""
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"}
        for attempt in range(self.retries + 1):
            req = urllib.request.Request(self.url + path, data=data, method=method, headers=headers)
            try:
                with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                    return json.loads(resp.read())
            except urllib.error.HTTPError as err:
                try:
                    message = json.loads(err.read()).get("error", "")
                except ValueError:
                    message = err.reason
                if err.code in (429, 503) and attempt < self.retries:
                    time.sleep(float(err.headers.get("Retry-After") or 1))
                    continue
                raise EnvError(err.code, message) from None
        raise AssertionError("unreachable")

    def games(self) -> list[dict[str, str]]:
        """The public training games: ``{"game_id", "group"}`` each (``group``: the task type,
        category or kind of the game, or None)."""
        return self.request("GET", "/games")["games"]

    def session(
        self, game_id: str | None = None, seed: int | None = None, max_steps: int | None = None
    ) -> Session:
        """Start an episode of ``game_id`` (None: a game drawn with ``seed``, else at random)."""
        body = {"game_id": game_id, "seed": seed, "max_steps": max_steps}
        state = self.request("POST", "/sessions", {k: v for k, v in body.items() if v is not None})
        return Session(self, state)


class Session:
    """One episode. The fields of the service's last answer are attributes: ``goal``,
    ``observation``, ``admissible_actions``, ``reward``, ``done``, ``won``, ``steps``,
    ``max_steps``, ``game_id``, ``group``, ``kind`` (of the last step). ``history`` holds
    (action, observation) pairs."""

    def __init__(self, client: EnvClient, state: dict[str, Any]) -> None:
        self.client = client
        self.id = state["session_id"]
        self.history: list[tuple[str, str]] = []
        self.closed = False
        self._update(state)

    def _update(self, state: dict[str, Any]) -> None:
        for key, value in state.items():
            setattr(self, key, value)

    def step(self, action: str) -> Session:
        """Play ``action``; updates and returns this session."""
        state = self.client.request("POST", f"/sessions/{self.id}/step", {"action": action})
        self.history.append((action, state["observation"]))
        self._update(state)
        return self

    def close(self) -> None:
        """End the session on the service (idempotent)."""
        if not self.closed:
            self.closed = True
            try:
                self.client.request("DELETE", f"/sessions/{self.id}")
            except EnvError as err:
                if err.status != 404:
                    raise

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
