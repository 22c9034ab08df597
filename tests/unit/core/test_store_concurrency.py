"""Every SQLite store of the harness is safe to share between threads, and between processes.

Each store object is hammered by :data:`THREADS` threads at once, :data:`OPS` operations
each, writers and readers mixed (a FastAPI threadpool does this to the grading ledger). Then a
Jepsen-style check: no call raised, and every write a call acknowledged is in the database
afterwards, exactly once. Where a store writes several rows in one transaction, readers running
meanwhile must see all of it or none of it.

Before :mod:`agent2rl.sqlite_store`, the grading ledger shared one connection across threads
without a lock (``cannot start a transaction within a transaction``: a submission lost) and
the study state refused to be used from a second thread at all.
"""

from __future__ import annotations

import math
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agent2rl.analysis import RunMetrics, list_runs, record_run
from agent2rl.grading.ledger import Ledger
from agent2rl.rollout.env import SearchRecord
from agent2rl.rollout.env_record import EnvLedger
from agent2rl.scoring.judges.base import Pair
from agent2rl.scoring.judges.cache import JudgmentCache
from agent2rl.study.spec import StudySpec, expand
from agent2rl.study.state import StudyState

THREADS = 32
OPS = 20
#: a thread that has not finished by then is stuck (a deadlock): the test fails, not hangs
JOIN_S = 60.0


def hammer(op: Callable[[int, int], Any], threads: int = THREADS, ops: int = OPS) -> list[Any]:
    """Run ``op(thread, i)`` for ``i < ops`` in each of ``threads`` threads started together;
    return the values the calls returned (the acknowledged writes). Fails the test with the
    first exception any call raised, naming how many calls raised."""
    start = threading.Barrier(threads)
    results: list[list[Any]] = [[] for _ in range(threads)]
    errors: list[BaseException] = []

    def worker(t: int) -> None:
        start.wait()
        for i in range(ops):
            try:
                results[t].append(op(t, i))
            except Exception as err:  # every failure counts; the first one is reported
                errors.append(err)

    pool = [threading.Thread(target=worker, args=(t,), daemon=True) for t in range(threads)]
    for th in pool:
        th.start()
    for th in pool:
        th.join(JOIN_S)
    assert not any(th.is_alive() for th in pool), "threads still running: a deadlock"
    if errors:
        raise AssertionError(f"{len(errors)} of {threads * ops} calls raised") from errors[0]
    return [r for rs in results for r in rs]


def test_grading_ledger_under_threads(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "ledger.db")
    ledger.set_meta("baseline", {"score": 0.5})

    def op(t: int, i: int) -> tuple[str, Any]:
        kind = i % 4
        if kind == 0:  # a submission accepted, then graded: both writes must survive
            sid = ledger.add_submission(f"t{t}/s{i}", f"w{t}-{i}", "eh")
            ledger.update_submission(sid, status="graded", score=t + i / 100, n_items=3)
            return ("graded", (sid, t + i / 100))
        if kind == 1:
            return ("rejection", ledger.add_rejection(f"t{t}/r{i}", 400, "bad path"))
        if kind == 2:  # readers of every kind
            ledger.submissions()
            ledger.best()
            ledger.in_flight()
            ledger.graded_with_fingerprint("fp")
            ledger.retryable_failure("fp")
            ledger.submission(1)
            return ("read", ledger.get_meta("baseline"))
        return ("count", ledger.rejection_count())

    results = hammer(op)
    graded = dict(v for k, v in results if k == "graded")
    rejections = [v for k, v in results if k == "rejection"]
    assert all(v == {"score": 0.5} for k, v in results if k == "read")
    subs = {s.id: s for s in ledger.submissions()}
    assert len(graded) == THREADS * OPS // 4 == len(subs)
    for sid, score in graded.items():  # acknowledged => present, with its final score
        assert subs[sid].status == "graded" and subs[sid].score == score
    assert sorted(r.id for r in ledger.rejections()) == sorted(rejections)
    assert ledger.rejection_count() == len(rejections) == THREADS * OPS // 4
    ledger.close()


def test_env_ledger_under_threads(tmp_path: Path) -> None:
    """One step writes a step row, a search row and the session's totals in one
    transaction: a reader never sees a session whose total disagrees with its step rows."""
    led = EnvLedger(tmp_path / "env.db")
    sessions = [led.open_session(f"game{t}", "g") for t in range(THREADS)]
    torn: list[str] = []

    def op(t: int, i: int) -> tuple[str, Any]:
        if i % 2 == 0:
            search = SearchRecord(f"q{t}-{i}", "bm25", hits=1)
            led.record_step(sessions[t], True, 1.0, False, False, "search", search, step=i)
            return ("step", sessions[t])
        with led._db.read() as db:  # one snapshot: totals and rows agree
            totals = dict(db.execute("SELECT id, steps FROM sessions").fetchall())
            rows = dict(
                db.execute("SELECT session_id, COUNT(*) FROM steps GROUP BY session_id").fetchall()
            )
        torn.extend(
            f"{s}: {n} vs {rows.get(s, 0)}" for s, n in totals.items() if n != rows.get(s, 0)
        )
        led.search_counts()
        led.step_kinds()
        return ("read", None)

    results = hammer(op)
    assert not torn
    steps = [v for k, v in results if k == "step"]
    by_session = {s.id: s for s in led.sessions()}
    assert sum(s.steps for s in by_session.values()) == len(steps) == THREADS * OPS // 2
    assert all(by_session[s].steps == OPS // 2 for s in sessions)
    assert len(led.step_times()) == len(steps)
    assert led.search_counts()["queries"] == len(steps)
    led.close()


def test_env_ledger_step_is_all_or_nothing_under_threads_old_api(tmp_path: Path) -> None:
    """The same invariant through the public readers only (no snapshot): after the storm,
    every session's total equals its step rows."""
    led = EnvLedger(tmp_path / "env.db")
    sessions = [led.open_session(f"game{t}", None) for t in range(THREADS)]

    def op(t: int, i: int) -> None:
        led.record_step(sessions[t], i % 3 == 0, 0.5, False, i == OPS - 1)
        if i % 5 == 0:
            led.close_session(sessions[(t + 1) % THREADS])
            led.sessions()

    hammer(op)
    assert [s.steps for s in led.sessions()] == [OPS] * THREADS
    assert len(led.step_times()) == THREADS * OPS
    led.close()


def _metrics(run_id: str) -> RunMetrics:
    return RunMetrics(
        run_id=run_id,
        ended_at=1.0,
        task="arith-lite",
        task_version="1",
        agent="reference-sft",
        driver=None,
        model="tiny",
        baseline=1.0,
        best_score=2.0,
        improvement=1.0,
        submissions=1,
        duration_s=1.0,
        status="completed",
        eval_hash="h",
    )


def test_results_ledger_under_threads(tmp_path: Path) -> None:
    runs = tmp_path / "runs"

    def op(t: int, i: int) -> str | None:
        if i % 2 == 0:
            run_id = f"r{t}-{i}"
            record_run(runs, runs / run_id, _metrics(run_id))
            return run_id
        list_runs(runs)
        return None

    written = {r for r in hammer(op, ops=6) if r}  # each call opens the file: fewer calls
    assert {r["run_id"] for r in list_runs(runs)} == written
    assert len(written) == THREADS * 3


def test_study_state_under_threads(tmp_path: Path) -> None:
    """Attempts are numbered 1..n per slot with no gap and no duplicate, and each slot's
    ``attempts`` counter equals its attempt rows (queue_attempt is one transaction)."""
    spec = StudySpec.model_validate(
        {
            "name": "s",
            "tasks": ["arith-lite"],
            "agents": ["reference-sft"],
            "budget": "1m",
            "repeats": 4,
        }  # fmt: skip
    )
    state = StudyState(tmp_path, create=True)
    state.bind(spec, "text")
    state.sync_slots(expand(spec))
    slot_ids = [s.id for s in state.slots()]

    def op(t: int, i: int) -> tuple[int, int] | None:
        slot = slot_ids[(t + i) % len(slot_ids)]
        if i % 4 == 3:
            state.counts()
            state.open_attempts()
            state.get_meta("settings_hash")
            return None
        n = state.queue_attempt(slot)
        state.mark_started(slot, n, 1.0, f"node{t}")
        state.end_attempt(slot, n, run_id=f"r{t}-{i}", run_dir=None, run_status="harness_error",
                          error=None)  # fmt: skip
        return (slot, n)

    queued = [r for r in hammer(op) if r]
    assert len(queued) == THREADS * OPS * 3 // 4
    for slot in slot_ids:
        ns = sorted(n for s, n in queued if s == slot)
        assert ns == list(range(1, len(ns) + 1))
        assert sorted(a.n for a in state.attempts(slot)) == ns
        assert state.slot(slot).attempts == len(ns)
    state.close()


def test_judgment_cache_under_threads(tmp_path: Path) -> None:
    cache = JudgmentCache(tmp_path / "judgments.sqlite3")

    def op(t: int, i: int) -> list[Pair]:
        pairs = [Pair(f"q{t}-{i}-{k}", "ref", "out") for k in range(3)]
        cache.put_many("judge", [(p, 1.0 + k / 2, None) for k, p in enumerate(pairs)])
        assert cache.get_many("judge", pairs) == [1.0, 1.5, 2.0]
        cache.get_many("judge", [Pair(f"q{(t + 1) % THREADS}-{i}-0", "ref", "out")])
        return pairs

    written = [p for ps in hammer(op) for p in ps]
    got = cache.get_many("judge", written)
    assert len(written) == THREADS * OPS * 3
    assert all(g is not None and not math.isnan(g) for g in got)
    cache.close()


_WRITER = textwrap.dedent(
    """
    import sys
    from agent2rl.grading.ledger import Ledger

    path, tag, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    with Ledger(path) as ledger:
        ids = []
        for i in range(n):
            sid = ledger.add_submission(f"{tag}/{i}", None, "eh")
            ledger.update_submission(sid, status="graded", score=float(i))
            ledger.add_rejection(f"{tag}/{i}", 401, "bad token")
            ids.append(sid)
    print(" ".join(map(str, ids)))
    """
)


def test_two_processes_write_one_ledger(tmp_path: Path) -> None:
    """Two processes writing the same ledger at once (the grading service and the
    orchestrator) lose nothing: every id each acknowledged is there, graded."""
    path = tmp_path / "ledger.db"
    Ledger(path).close()  # created once, so the two race on writes, not on the schema
    n = 100
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _WRITER, str(path), tag, str(n)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for tag in ("a", "b")
    ]
    acked: dict[str, list[int]] = {}
    for tag, proc in zip(("a", "b"), procs, strict=True):
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        acked[tag] = [int(x) for x in out.split()]
    with Ledger(path) as ledger:
        subs = {s.id: s for s in ledger.submissions()}
        assert len(subs) == 2 * n
        for tag, ids in acked.items():
            assert len(ids) == n
            assert [subs[i].path for i in ids] == [f"{tag}/{i}" for i in range(n)]
            assert all(subs[i].status == "graded" for i in ids)
        assert ledger.rejection_count() == 2 * n
