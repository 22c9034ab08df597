"""The study's progress display: the ETA from budgets, one line per event on a pipe, and the
live display on a (recorded) terminal."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from agent2rl.study.progress import (
    AttemptView,
    LineReporter,
    LiveReporter,
    Tally,
    make_reporter,
)


def test_eta_from_budgets() -> None:
    t = Tally(total=5, budget_s=100, parallel=2)
    assert t.eta_s(now=0) == pytest.approx(5 * 130 / 2)  # 30 s overhead until measured
    t.running[(1, 1)] = AttemptView(1, 1, "a", queued_at=0, started_at=0)
    t.running[(2, 1)] = AttemptView(2, 1, "b", queued_at=0)  # queued, not started
    t.finished, t.durations = 1, [110.0]  # measured overhead: 10 s
    # running: 110 - 50 left; queued: 110; pending 2 x 110
    assert t.eta_s(now=50) == pytest.approx((60 + 110 + 220) / 2)
    assert (t.pending, t.queued) == (2, 1)


def test_one_line_per_event_on_a_pipe() -> None:
    out = io.StringIO()
    t = Tally(total=2, budget_s=60, parallel=1)
    rep = make_reporter(t, Console(file=out, width=40))
    assert isinstance(rep, LineReporter)
    a = AttemptView(1, 1, "arith-lite reference-sft r0", queued_at=0)
    rep.begin("s: 2 runs")
    t.running[(1, 1)] = a
    rep.queued(a)
    a.started_at, a.node = 1.0, "node1"
    rep.started(a)
    t.running.clear()
    t.finished = 1
    result = {"run_status": "deadline", "best": 3.0, "improvement": 1.5, "run_id": "r1"}
    rep.ended(a, result, "finished", retry=False)
    rep.end("done")
    lines = out.getvalue().splitlines()
    assert lines[0] == "study: s: 2 runs"
    assert lines[2] == (
        "study: started arith-lite reference-sft r0 on node1 [0 done, 1 running, 0 failed / 2]"
    )  # never wrapped, however narrow the console
    assert "finished (deadline)  best 3.00 improvement +1.50  r1" in lines[3]
    assert lines[-1] == "study: done"


def test_live_display_on_a_terminal() -> None:
    out = io.StringIO()
    t = Tally(total=1, budget_s=60, parallel=1)
    rep = make_reporter(t, Console(file=out, force_terminal=True, width=100))
    assert isinstance(rep, LiveReporter)
    a = AttemptView(1, 1, "arith-lite quick r0", queued_at=0, started_at=0)
    rep.begin("s: 1 run")
    t.running[(1, 1)] = a
    rep.started(a)
    rep.note("a note")
    t.running.clear()
    t.finished = 1
    rep.ended(a, {"run_status": "completed", "run_id": "r1"}, "finished", retry=False)
    rep.end("done")
    text = out.getvalue()
    assert "arith-lite quick r0" in text and "1/1" in text and "done" in text
