"""The rollout service over real HTTP, in its own process: it serves the public games only,
refuses bad tokens, malformed actions and too many sessions with clear errors (the session
survives), plays actions the game does not know as the game does, and records every step."""

from __future__ import annotations

import json
import secrets
import time

import httpx
import pytest
from support.rundirs import run_stub

from agent2rl.files import read_jsonl
from agent2rl.orchestration.rollout_service import start_rollout_service
from agent2rl.rollout import EnvLedger, RolloutLimits, summarize_env


@pytest.fixture(scope="module")
def rollout(tmp_path_factory, alfworld_lite):
    task, prepared = alfworld_lite
    paths = run_stub(tmp_path_factory.mktemp("rollout") / "run", task)
    token = secrets.token_urlsafe(16)
    handle = start_rollout_service(paths, token, RolloutLimits(max_sessions=3, steps_per_s=1000))
    client = httpx.Client(
        base_url=handle.url, timeout=120, headers={"Authorization": f"Bearer {token}"}
    )
    walks = {r["game_id"]: r for r in read_jsonl(prepared.public / "walkthroughs.jsonl")}
    yield paths, client, walks, prepared
    client.close()
    handle.stop()


def _open(client, **body) -> dict:
    r = client.post("/sessions", json=body)
    assert r.status_code == 200, r.text
    return r.json()


def test_bad_or_missing_token_is_refused(rollout) -> None:
    _, client, _, _ = rollout
    for headers in ({"Authorization": "Bearer wrong"}, {"Authorization": ""}):
        r = httpx.get(f"{client.base_url}/games", headers=headers)
        assert r.status_code == 401 and "ENV_TOKEN" in r.json()["error"]
    assert httpx.get(f"{client.base_url}/health").json()["status"] == "ok"


def test_only_public_games_are_served(rollout) -> None:
    _, client, walks, prepared = rollout
    listed = {g["game_id"] for g in client.get("/games").json()["games"]}
    assert listed == set(walks)
    private_ids = [
        str(p.parent.relative_to(prepared.private / "games"))
        for p in (prepared.private / "games").glob("*/*/game.tw-pddl")
    ]
    assert private_ids and not listed & set(private_ids)
    for gid in (private_ids[0], "../private/games/" + private_ids[0], "nope"):
        r = client.post("/sessions", json={"game_id": gid})
        assert r.status_code == 404 and "GET /games" in r.json()["error"]


def test_walkthrough_wins_and_steps_are_recorded(rollout) -> None:
    paths, client, walks, _ = rollout
    gid, walk = sorted(walks.items())[0]
    s = _open(client, game_id=gid)
    assert s["goal"] == walk["goal"] and s["observation"] == walk["steps"][0]["observation"]
    assert s["admissible_actions"] == walk["steps"][0]["admissible_actions"] and not s["done"]
    for st in walk["steps"]:
        r = client.post(f"/sessions/{s['session_id']}/step", json={"action": st["action"]})
        assert r.status_code == 200, r.text
    end = r.json()
    assert end["won"] and end["done"] and end["reward"] == 1.0
    assert end["steps"] == len(walk["steps"])
    r = client.post(f"/sessions/{s['session_id']}/step", json={"action": "look"})
    assert r.status_code == 409 and "start a new one" in r.json()["error"]
    assert client.delete(f"/sessions/{s['session_id']}").json()["closed"]
    with EnvLedger(paths.env_db) as led:
        row = next(x for x in led.sessions() if x.id == s["session_id"])
    assert (row.steps, row.won, row.done, row.game_id) == (len(walk["steps"]), True, True, gid)
    assert row.closed_at is not None


@pytest.mark.parametrize(
    "body",
    [
        {"action": 5},
        {"action": ""},
        {"action": "   "},
        {"action": "x" * 300},
        {"action": "go to\x00desk 1"},
        {"act": "look"},
        {"action": "look", "extra": 1},
    ],
)
def test_malformed_actions_are_refused_and_the_session_survives(rollout, body) -> None:
    _, client, _, _ = rollout
    s = _open(client, seed=1)
    try:
        r = client.post(f"/sessions/{s['session_id']}/step", json=body)
        assert r.status_code == 400 and r.json()["error"]
        ok = client.post(f"/sessions/{s['session_id']}/step", json={"action": "look"})
        assert ok.status_code == 200 and ok.json()["steps"] == 1
    finally:
        client.delete(f"/sessions/{s['session_id']}")


def test_nonsense_action_is_played_like_the_game(rollout) -> None:
    _, client, _, _ = rollout
    s = _open(client, seed=2, max_steps=2)
    r = client.post(f"/sessions/{s['session_id']}/step", json={"action": "fly to the moon"})
    body = r.json()
    assert r.status_code == 200 and body["observation"] == "Nothing happens."
    assert body["steps"] == 1 and not body["done"]
    assert body["admissible_actions"] == s["admissible_actions"]  # nothing changed
    body = client.post(f"/sessions/{s['session_id']}/step", json={"action": "dance"}).json()
    assert body["done"] and not body["won"] and body["steps"] == 2  # its own step limit
    client.delete(f"/sessions/{s['session_id']}")


def test_seeded_sessions_pick_the_same_game(rollout) -> None:
    _, client, _, _ = rollout
    a, b = _open(client, seed=7), _open(client, seed=7)
    assert a["game_id"] == b["game_id"] and a["session_id"] != b["session_id"]
    for s in (a, b):
        client.delete(f"/sessions/{s['session_id']}")


def test_too_many_sessions(rollout) -> None:
    _, client, _, _ = rollout
    opened = [_open(client, seed=i) for i in range(3)]
    try:
        r = client.post("/sessions", json={})
        assert r.status_code == 429 and "DELETE /sessions" in r.json()["error"]
        listed = client.get("/sessions").json()["sessions"]
        assert {x["session_id"] for x in listed} == {s["session_id"] for s in opened}
    finally:
        for s in opened:
            client.delete(f"/sessions/{s['session_id']}")
    fresh = _open(client, seed=0)  # closing freed the slots
    client.delete(f"/sessions/{fresh['session_id']}")
    r = client.post(f"/sessions/{fresh['session_id']}/step", json={"action": "look"})
    assert r.status_code == 404


def test_bad_session_request_bodies(rollout) -> None:
    _, client, _, _ = rollout
    for body in ({"max_steps": 0}, {"max_steps": 10_000}):
        r = client.post("/sessions", json=body)
        assert r.status_code == 400 and "max_steps" in r.json()["error"]
    for body in ({"game_id": 3}, {"seed": "x"}, {"nope": 1}):
        r = client.post("/sessions", json=body)
        assert r.status_code == 400 and "game_id" in r.json()["error"]


def test_rate_limit(tmp_path, alfworld_lite) -> None:
    task, _ = alfworld_lite
    paths = run_stub(tmp_path / "run", task)
    token = secrets.token_urlsafe(16)
    handle = start_rollout_service(paths, token, RolloutLimits(max_sessions=2, steps_per_s=2))
    try:
        with httpx.Client(
            base_url=handle.url, timeout=60, headers={"Authorization": f"Bearer {token}"}
        ) as client:
            sid = _open(client, seed=0)["session_id"]
            codes = [
                client.post(f"/sessions/{sid}/step", json={"action": "look"}) for _ in range(5)
            ]
            refused = [r for r in codes if r.status_code == 429]
            assert refused and int(refused[0].headers["retry-after"]) >= 1
            assert "steps per second" in refused[0].json()["error"]
            played = sum(r.status_code == 200 for r in codes)
        summary = summarize_env(paths.env_db, t0=time.time() - 60)
        assert summary["steps"] == played and summary["episodes"] == 1
    finally:
        handle.stop()


def test_client_in_the_workspace_plays_a_game(rollout, monkeypatch) -> None:
    """data/env_client.py (stdlib only) against the real service."""
    from agent2rl.rollout.client import EnvClient, EnvError

    _, client, walks, _ = rollout
    token = client.headers["authorization"].split()[1]
    env = EnvClient(str(client.base_url), token)
    gid, walk = sorted(walks.items())[-1]
    with env.session(game_id=gid) as s:
        for st in walk["steps"]:
            s.step(st["action"])
        assert s.won and s.done and len(s.history) == len(walk["steps"])
    with pytest.raises(EnvError) as err:
        env.session(game_id="missing")
    assert err.value.status == 404
    assert json.dumps(env.games())
