"""deepsearch-lite on the rollout service over real HTTP on loopback: a walkthrough earns the
full reward with its step kinds recorded; an answer before any search is legal; malformed
input (a 10,000-character search included) gets a 4xx and leaves the session intact; 32
sessions searching at once stay within the rate limits."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from support.rollout import open_session, post_step, serve_rollout

from agent2rl.files import read_jsonl
from agent2rl.rollout import EnvLedger
from agent2rl.rollout.client import EnvClient

SMALL = {"n_regions": 6, "n_eval_regions": 1, "n_validation_regions": 1}


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    with serve_rollout("deepsearch-lite", SMALL, tmp_path_factory.mktemp("deepsearch")) as served:
        yield served


def test_walkthrough_answers_with_full_reward_and_kinds_are_recorded(service) -> None:
    paths, client, prepared, _, _ = service
    served = {g["game_id"] for g in client.get("/games").json()["games"]}
    graded = {g["game_id"] for g in read_jsonl(prepared.private / "questions.jsonl")}
    assert served and not served & graded  # only public questions are served
    walk = read_jsonl(prepared.public / "walkthroughs.jsonl")[0]
    s = open_session(client, game_id=walk["game_id"])
    assert s["goal"] == walk["goal"] and s["observation"] == walk["steps"][0]["observation"]
    assert s["admissible_actions"] == []
    kinds = []
    for step in walk["steps"]:
        r = post_step(client, s["session_id"], step["action"])
        assert r.status_code == 200, r.text
        kinds.append(r.json()["kind"])
    last = r.json()
    assert last["done"] and last["won"] and last["reward"] == 1.0
    assert kinds == ["search", "search", "answer"]
    with EnvLedger(paths.env_db) as led:
        row = next(x for x in led.sessions() if x.id == s["session_id"])
        assert row.won and row.reward == 1.0 and row.steps == 3
        assert led.step_kinds()["search"] >= 2 and led.step_kinds()["answer"] >= 1
        assert all(ok for _, ok in led.step_times())


def test_bad_input_gets_4xx_and_leaves_the_session_intact(service) -> None:
    _, client, prepared, _, _ = service
    walk = read_jsonl(prepared.public / "walkthroughs.jsonl")[1]
    sid = open_session(client, game_id=walk["game_id"])["session_id"]

    def unchanged(expected_steps: int) -> None:
        listing = {x["session_id"]: x for x in client.get("/sessions").json()["sessions"]}
        assert listing[sid]["steps"] == expected_steps and not listing[sid]["done"]

    r = post_step(client, sid, "search[" + "who " * 2498 + "]")  # 10,000 characters
    assert r.status_code == 400 and "characters" in r.json()["error"]
    unchanged(0)
    assert post_step(client, sid, walk["steps"][0]["action"]).status_code == 200
    for bad in ["search[]", "answer[]", "click[x]", "lookup Osk", ""]:
        r = post_step(client, sid, bad)
        assert r.status_code == 400, (bad, r.text)
        assert r.json()["error"]
        unchanged(1)
    for step in walk["steps"][1:]:  # the session plays on, to the answer
        r = post_step(client, sid, step["action"])
        assert r.status_code == 200, r.text
    assert r.json()["won"]
    r = post_step(client, sid, "answer[again]")  # the episode is over
    assert r.status_code == 409 and "over" in r.json()["error"]
    assert client.delete(f"/sessions/{sid}").status_code == 200


def test_answer_before_any_search_is_legal(service) -> None:
    _, client, prepared, _, _ = service
    q = read_jsonl(prepared.public / "questions.jsonl")[2]
    sid = open_session(client, game_id=q["game_id"])["session_id"]
    r = post_step(client, sid, "answer[no idea]")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["done"] and body["kind"] == "answer" and body["reward"] == 0.0
    sid = open_session(client, game_id=q["game_id"])["session_id"]
    body = post_step(client, sid, f"answer[{q['answer']}]").json()
    assert body["won"] and body["reward"] == 1.0 and body["steps"] == 1


def test_32_parallel_sessions_searching_stay_within_the_limits(service) -> None:
    _, _, _, url, token = service
    env = EnvClient(url, token)
    games = [g["game_id"] for g in env.games()]

    def search(i: int) -> int:
        done = 0
        with env.session(game_id=games[i % len(games)], max_steps=10) as s:
            for q in ("river", "society founded", "town established", "born"):
                s.step(f"search[{q}]")
                assert s.observation.startswith("[1] ")
                done += 1
        return done

    with ThreadPoolExecutor(32) as pool:
        assert sum(pool.map(search, range(32))) == 32 * 4
