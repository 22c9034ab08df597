"""webshop-lite on the rollout service over real HTTP on loopback: a walkthrough earns the
full reward with its step kinds recorded; malformed and refused input gets a 4xx and leaves
the session as it was; 32 sessions searching at once stay within the rate limits."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from support.rollout import open_session, post_step, serve_rollout

from agent2rl.files import read_jsonl
from agent2rl.rollout import EnvLedger
from agent2rl.rollout.client import EnvClient

SMALL = {"n_products": 60, "n_train": 20, "n_eval": 8, "n_validation": 8}


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    with serve_rollout("webshop-lite", SMALL, tmp_path_factory.mktemp("webshop")) as served:
        yield served


def test_walkthrough_buys_with_full_reward_and_kinds_are_recorded(service) -> None:
    paths, client, prepared, _, _ = service
    served = {g["game_id"] for g in client.get("/games").json()["games"]}
    graded = {g["game_id"] for g in read_jsonl(prepared.private / "goals.jsonl")}
    assert served and not served & graded  # only public goals are served
    walk = read_jsonl(prepared.public / "walkthroughs.jsonl")[0]
    s = open_session(client, game_id=walk["game_id"])
    assert s["goal"] == walk["goal"] and s["observation"] == walk["steps"][0]["observation"]
    kinds = []
    for step in walk["steps"]:
        r = post_step(client, s["session_id"], step["action"])
        assert r.status_code == 200, r.text
        kinds.append(r.json()["kind"])
    last = r.json()
    assert last["done"] and last["won"] and last["reward"] == 1.0
    assert kinds[0] == "search" and kinds[-1] == "purchase" and "click" in kinds
    with EnvLedger(paths.env_db) as led:
        row = next(x for x in led.sessions() if x.id == s["session_id"])
        assert row.won and row.reward == 1.0 and row.steps == len(walk["steps"])
        assert led.step_kinds()["purchase"] >= 1 and led.step_kinds()["search"] >= 1
        # a search is an admissible step though the page lists only "search[<query>]"
        assert all(ok for _, ok in led.step_times())
        # every query is recorded, with the shop's engine and its number of results
        (search,) = led.searches(s["session_id"])
        query = walk["steps"][0]["action"].removeprefix("search[").removesuffix("]")
        assert (search["query"], search["backend"], search["step"]) == (query, "bm25", 1)
        assert search["hits"] > 0 and search["error"] == ""


def test_bad_input_gets_4xx_and_leaves_the_session_intact(service) -> None:
    _, client, prepared, _, _ = service
    walk = read_jsonl(prepared.public / "walkthroughs.jsonl")[0]
    s = open_session(client, game_id=walk["game_id"])
    sid = s["session_id"]

    def unchanged(expected_obs: str, expected_steps: int) -> None:
        listing = {x["session_id"]: x for x in client.get("/sessions").json()["sessions"]}
        assert listing[sid]["steps"] == expected_steps and not listing[sid]["done"]

    r = post_step(client, sid, "search[" + "shoes " * 1666 + "]")  # 10,000 characters
    assert r.status_code == 400 and "characters" in r.json()["error"]
    unchanged(s["observation"], 0)
    page = post_step(client, sid, walk["steps"][0]["action"]).json()  # the search: results
    for bad in ["click[b0zzzz]", "click[buy now]", "search[again]", "jump", ""]:
        r = post_step(client, sid, bad)
        assert r.status_code == 400, (bad, r.text)
        assert r.json()["error"]
        unchanged(page["observation"], 1)
    # the session plays on from where it was, to the purchase
    for step in walk["steps"][1:]:
        r = post_step(client, sid, step["action"])
        assert r.status_code == 200, r.text
    assert r.json()["won"]
    r = post_step(client, sid, "click[buy now]")  # a second purchase
    assert r.status_code == 409 and "over" in r.json()["error"]
    assert client.delete(f"/sessions/{sid}").status_code == 200


def test_32_parallel_sessions_searching_stay_within_the_limits(service) -> None:
    _, _, prepared, url, token = service
    env = EnvClient(url, token)
    games = [g["game_id"] for g in env.games()]

    def shop(i: int) -> int:
        done = 0
        with env.session(game_id=games[i % len(games)]) as s:
            for q in ("red", "shampoo lavender", "pack of 6 coffee"):
                s.step(f"search[{q}]")
                assert "Total results" in s.observation
                s.step("click[back to search]")
                done += 2
        return done

    with ThreadPoolExecutor(32) as pool:
        assert sum(pool.map(shop, range(32))) == 32 * 6
