"""The rollout service's logic without HTTP: :class:`RolloutService` over alfworld-lite's
public games and a real :class:`EnvLedger` in ``tmp_path``. Its refusals are
:class:`Refused` with the status the HTTP layer answers; the clock is a plain function, so
idle sessions are reaped without waiting."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from agent2rl.files import read_jsonl
from agent2rl.http_api import Refused
from agent2rl.rollout import EnvLedger, RolloutLimits, RolloutService


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def ledger(tmp_path: Path) -> Iterator[EnvLedger]:
    with EnvLedger(tmp_path / "env.db") as led:
        yield led


def _service(alfworld_lite, ledger: EnvLedger, **limits) -> tuple[RolloutService, _Clock]:
    task, prepared = alfworld_lite
    clock = _Clock()
    source = task.environment(prepared, "public")
    return RolloutService(source, ledger, RolloutLimits(**limits), clock=clock), clock


def _refused(status: int, call, *args, **kw) -> Refused:
    with pytest.raises(Refused) as err:
        call(*args, **kw)
    assert err.value.status == status, err.value.message
    return err.value


def test_a_walkthrough_wins_and_is_recorded(alfworld_lite, ledger) -> None:
    service, _ = _service(alfworld_lite, ledger)
    walks = {r["game_id"]: r for r in read_jsonl(alfworld_lite[1].public / "walkthroughs.jsonl")}
    assert {g["game_id"] for g in service.games()["games"]} == set(walks)
    gid, walk = sorted(walks.items())[0]
    s = service.open(game_id=gid)
    assert s["goal"] == walk["goal"] and not s["done"]
    for st in walk["steps"]:
        end = service.step(s["session_id"], st["action"])
    assert end["won"] and end["done"] and end["steps"] == len(walk["steps"])
    assert "start a new one" in _refused(409, service.step, s["session_id"], "look").message
    assert service.close(s["session_id"]) == {"session_id": s["session_id"], "closed": True}
    row = next(x for x in ledger.sessions() if x.id == s["session_id"])
    assert (row.steps, row.won, row.done, row.game_id) == (len(walk["steps"]), True, True, gid)
    assert row.closed_at is not None
    assert service.sessions()["sessions"] == []


def test_refusals_leave_the_session_as_it_was(alfworld_lite, ledger) -> None:
    service, _ = _service(alfworld_lite, ledger)
    assert "GET /games" in _refused(404, service.open, game_id="nope").message
    for steps in (0, 10_000):
        assert "max_steps" in _refused(400, service.open, max_steps=steps).message
    sid = service.open(seed=1)["session_id"]
    for action in ("", "   ", "x" * 300, "go to\x00desk 1"):
        _refused(400, service.step, sid, action)
    assert service.step(sid, "look")["steps"] == 1
    service.close(sid)
    assert "POST /sessions" in _refused(404, service.step, sid, "look").message
    _refused(404, service.close, sid)


def test_full_sessions_are_refused_until_idle_ones_are_reaped(alfworld_lite, ledger) -> None:
    service, clock = _service(alfworld_lite, ledger, max_sessions=2, idle_timeout_s=60)
    first = service.open(seed=0)["session_id"]
    clock.now += 30
    second = service.open(seed=1)["session_id"]
    assert "DELETE /sessions" in _refused(429, service.open).message
    clock.now += 31  # the first is idle for 61 s, the second for 31 s
    third = service.open(seed=2)["session_id"]
    listed = {s["session_id"] for s in service.sessions()["sessions"]}
    assert listed == {second, third}
    closed = {s.id: s.closed_at for s in ledger.sessions()}
    assert closed[first] is not None and closed[second] is None


def test_steps_beyond_the_rate_are_refused_with_retry_after(alfworld_lite, ledger) -> None:
    service, _ = _service(alfworld_lite, ledger, steps_per_s=2)
    sid = service.open(seed=0)["session_id"]
    refusals = []
    for _ in range(5):
        try:
            service.step(sid, "look")
        except Refused as err:
            refusals.append(err)
    assert refusals and refusals[0].status == 429 and "steps per second" in refusals[0].message
    assert int((refusals[0].headers or {})["Retry-After"]) >= 1
    played = next(s for s in ledger.sessions() if s.id == sid).steps
    assert played == 5 - len(refusals)
