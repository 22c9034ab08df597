"""A task's rollout service over real HTTP on loopback, as a test plays it: the service on a
stub run directory, an authorised client, and the two requests a test sends most."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple

import httpx

from agent2rl.dataset import PreparedTask
from agent2rl.orchestration.rollout_service import start_rollout_service
from agent2rl.rollout import RolloutLimits
from agent2rl.rundir import RunPaths
from support.rundirs import run_stub


class ServedRollout(NamedTuple):
    """A running rollout service: the run's paths, a client sending the run's token, the
    task's prepared splits, and the URL and token for a client of one's own. A tuple, so a
    test unpacks only what it needs."""

    paths: RunPaths
    client: httpx.Client
    prepared: PreparedTask
    url: str
    token: str


@contextmanager
def serve_rollout(
    task_name: str, options: dict[str, Any], root: Path, limits: RolloutLimits | None = None
) -> Iterator[ServedRollout]:
    """The rollout service of task ``task_name`` with ``options`` (prepared in the test
    session's task store) on a run stub under ``root`` (``root/run``), with ``limits`` (the
    service's defaults when None); stopped, and its client closed, on exit."""
    from agent2rl.settings import load_settings
    from agent2rl.tasks import get_task, prepare_task

    task = get_task(task_name, options)
    prepared = prepare_task(task, load_settings().task_store)
    paths = run_stub(root / "run", task)
    token = secrets.token_urlsafe(16)
    handle = start_rollout_service(paths, token, limits or RolloutLimits())
    client = httpx.Client(
        base_url=handle.url, timeout=120, headers={"Authorization": f"Bearer {token}"}
    )
    try:
        yield ServedRollout(paths, client, prepared, handle.url, token)
    finally:
        client.close()
        handle.stop()


def open_session(client: httpx.Client, **body: Any) -> dict[str, Any]:
    """``POST /sessions`` with ``body``; the new session (asserts HTTP 200)."""
    r = client.post("/sessions", json=body)
    assert r.status_code == 200, r.text
    return r.json()


def post_step(client: httpx.Client, sid: int, action: str) -> httpx.Response:
    """``POST /sessions/<sid>/step`` with ``action``; the response as it is (a test checks
    refusals too)."""
    return client.post(f"/sessions/{sid}/step", json={"action": action})
