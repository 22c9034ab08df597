"""Every search query recorded: deepsearchqa's rollout service (its own process, real HTTP on
loopback) searching the keyless web backend, a MediaWiki-speaking server on loopback. Each
query lands in ``env.db`` with its session, step, backend and hits; malformed input gets a
4xx, leaves the session intact and records no query; the provider down is a 503 with
``Retry-After`` (the step not played, the failed query recorded) and the session plays on
once it is back; the run's summary counts searches by backend; a 10,000-character query is
kept bounded in the record."""

from __future__ import annotations

import os
import secrets
import time
from pathlib import Path

import httpx
import pytest
from support.fake_wikipedia import start_fake_wikipedia
from support.rundirs import run_stub

from agent2rl.files import read_jsonl
from agent2rl.orchestration.rollout_service import start_rollout_service
from agent2rl.rollout import EnvLedger, RolloutLimits, SearchRecord, summarize_env
from agent2rl.rollout.env import MAX_RECORDED_QUERY_CHARS

FIXTURE = Path(__file__).resolve().parents[2] / "support" / "fixtures" / "deepsearchqa"


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    from agent2rl.settings import load_settings
    from agent2rl.tasks import get_task, prepare_task, task_root

    wiki = start_fake_wikipedia(read_jsonl(FIXTURE / "corpus.jsonl"))
    old = os.environ.get("AGENT2RL_WIKIPEDIA_URL")
    os.environ["AGENT2RL_WIKIPEDIA_URL"] = wiki.url  # the service process inherits it
    task = get_task("deepsearchqa", {"judge": "exact", "search": "wikipedia"})
    task.import_data(FIXTURE, task_root(task, load_settings().task_store))
    prepared = prepare_task(task, load_settings().task_store)
    paths = run_stub(tmp_path_factory.mktemp("dsqa-queries") / "run", task)
    token = secrets.token_urlsafe(16)
    handle = start_rollout_service(paths, token, RolloutLimits())
    client = httpx.Client(
        base_url=handle.url, timeout=120, headers={"Authorization": f"Bearer {token}"}
    )
    yield paths, client, prepared, wiki
    client.close()
    handle.stop()
    wiki.stop()
    if old is None:
        os.environ.pop("AGENT2RL_WIKIPEDIA_URL", None)
    else:
        os.environ["AGENT2RL_WIKIPEDIA_URL"] = old


def _session(client, prepared, i: int = 0) -> int:
    game = read_jsonl(prepared.public / "questions.jsonl")[i]["game_id"]
    r = client.post("/sessions", json={"game_id": game})
    assert r.status_code == 200, r.text
    return r.json()["session_id"]


def _step(client, sid: int, action: str) -> httpx.Response:
    return client.post(f"/sessions/{sid}/step", json={"action": action})


def _searches(paths, sid: int) -> list[dict]:
    with EnvLedger(paths.env_db) as led:
        return led.searches(sid)


def test_a_sessions_searches_are_in_the_ledger(service) -> None:
    paths, client, prepared, wiki = service
    sid = _session(client, prepared)
    for q in ("Harrowgate Bridge designed", "zzqx nothing matches"):
        r = _step(client, sid, f"search[{q}]")
        assert r.status_code == 200 and r.json()["kind"] == "search", r.text
    assert _step(client, sid, "answer[Ada Fenwick]").status_code == 200
    rows = _searches(paths, sid)
    assert [(r["step"], r["query"], r["backend"]) for r in rows] == [
        (1, "Harrowgate Bridge designed", "wikipedia"),
        (2, "zzqx nothing matches", "wikipedia"),
    ]
    assert rows[0]["hits"] > 0 and rows[1]["hits"] == 0  # no results is a query too
    assert all(r["error"] == "" and r["query_chars"] == len(r["query"]) for r in rows)
    assert wiki.queries[-2:] == ["Harrowgate Bridge designed", "zzqx nothing matches"]
    summary = summarize_env(paths.env_db, t0=time.time() - 60)
    assert summary is not None
    searches = summary["searches"]
    assert searches["by_backend"]["wikipedia"] == searches["queries"] >= 2
    assert summary["by_kind"]["search"] == searches["queries"] - searches["failed"]


def test_malformed_input_gets_4xx_records_nothing_and_the_session_survives(service) -> None:
    paths, client, prepared, _ = service
    sid = _session(client, prepared, 1)

    def unchanged(steps: int) -> None:
        listing = {x["session_id"]: x for x in client.get("/sessions").json()["sessions"]}
        assert listing[sid]["steps"] == steps and not listing[sid]["done"]

    r = _step(client, sid, "search[" + "who " * 2498 + "]")  # 10,000 characters
    assert r.status_code == 400 and "characters" in r.json()["error"]
    for bad in ["search[]", "lookup Tamsin", "", "search[a\x00b]"]:
        r = _step(client, sid, bad)
        assert 400 <= r.status_code < 500 and r.json()["error"], (bad, r.text)
    r = client.post(f"/sessions/{sid}/step", json={"action": 5})
    assert r.status_code == 400
    r = client.post(f"/sessions/{sid}/step", content=b"{not json")
    assert r.status_code == 400
    unchanged(0)
    assert _searches(paths, sid) == []  # nothing reached the search engine
    r = _step(client, sid, "search[Tamsin Observatory]")
    # the reference's observation (protocol=reference): snippets joined by " | "
    assert r.status_code == 200 and r.json()["observation"].startswith("The Tamsin Observatory")
    unchanged(1)
    assert [x["step"] for x in _searches(paths, sid)] == [1]


def test_provider_down_is_503_the_step_unplayed_and_the_query_recorded(service) -> None:
    paths, client, prepared, wiki = service
    sid = _session(client, prepared, 2)
    wiki.fail = 1000
    try:
        r = _step(client, sid, "search[Velloran Archipelago capital]")
    finally:
        wiki.fail = 0
    assert r.status_code == 503, r.text
    assert "Wikipedia" in r.json()["error"] and "not played" in r.json()["error"]
    assert int(r.headers["Retry-After"]) >= 1
    listing = {x["session_id"]: x for x in client.get("/sessions").json()["sessions"]}
    assert listing[sid]["steps"] == 0
    r = _step(client, sid, "search[Velloran Archipelago capital]")  # provider back
    assert r.status_code == 200 and r.json()["steps"] == 1, r.text
    rows = _searches(paths, sid)
    assert [(x["step"], x["hits"] > 0, bool(x["error"])) for x in rows] == [
        (1, False, True),
        (1, True, False),
    ]
    assert "HTTP 503" in rows[0]["error"]
    summary = summarize_env(paths.env_db, t0=time.time() - 60)
    assert summary is not None and summary["searches"]["failed"] >= 1


def test_the_record_keeps_a_runaway_query_bounded(tmp_path) -> None:
    huge = "q" * 10_000
    with EnvLedger(tmp_path / "env.db") as led:
        sid = led.open_session("g1", None)
        led.record_step(sid, True, 0.0, False, False, "search",
                        search=SearchRecord(huge, "bm25", 3, 0.01), step=1)  # fmt: skip
        led.record_search(sid, 2, SearchRecord(huge, "bm25", 0, 0.5, "x" * 10_000))
        rows = led.searches(sid)
        assert [len(r["query"]) for r in rows] == [MAX_RECORDED_QUERY_CHARS] * 2
        assert [r["query_chars"] for r in rows] == [10_000, 10_000]
        assert len(rows[1]["error"]) == MAX_RECORDED_QUERY_CHARS
        assert led.search_counts() == {
            "queries": 2, "failed": 1, "sessions": 1, "by_backend": {"bm25": 2}
        }  # fmt: skip
