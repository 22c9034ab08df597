"""A run whose harness died: recognise it and close its record.

A harness killed by SIGKILL (or a crash of the interpreter) writes nothing more: its
``run.json`` still says ``preparing`` or ``running`` and a submission that was being graded
stays ``evaluating`` in the ledger. ``run.json`` records which process ran the run
(``harness``: pid, start time in clock ticks, host); :func:`close_dead_run` finds that
process gone (or its pid taken by another process) and marks the run ``interrupted`` and its
unfinished ledger rows failed, the harness's fault, so that ``agent2rl report`` can then
write the report of what the run did.

Under the ``validation`` feedback protocol (:mod:`agent2rl.grading.final`) the run's score is
the end-of-run grade on the private split, which a dead (or interrupted) harness may not have
done: :func:`complete_final_grade` does it for a run that is no longer live, and says so.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from pathlib import Path

from agent2rl.grading.final import describe_grade, grade_final
from agent2rl.grading.ledger import Ledger
from agent2rl.orchestration.guard import start_ticks
from agent2rl.run_record import RunRecord
from agent2rl.rundir import LIVE_RUN_STATUSES, RunInfo, RunPaths, RunStatus


def harness_record() -> dict[str, object]:
    """This process as the run's harness, for ``run.json``."""
    pid = os.getpid()
    return {"pid": pid, "start_ticks": start_ticks(pid), "host": socket.gethostname()}


def harness_alive(info: RunInfo) -> bool | None:
    """Whether the process that ran ``info``'s run is still alive: None when that cannot be
    told here (no record: an older run, or a run of another host)."""
    rec = info.harness or {}
    if not rec.get("pid") or rec.get("host") != socket.gethostname():
        return None
    ticks = start_ticks(int(rec["pid"]))
    if ticks is None:
        return False
    return rec.get("start_ticks") is None or ticks == int(rec["start_ticks"])


def fail_in_flight(ledger_path: Path, reason: str) -> int:
    """Mark every submission of the ledger still being graded as failed, the harness's fault
    (:meth:`Ledger.fail_unfinished`), with ``reason``; returns how many. Only for a run whose
    grading service is gone (nothing else will finish those rows). A run with no ledger yet
    has none (and is given none)."""
    if not ledger_path.exists():
        return 0
    with Ledger(ledger_path) as ledger:
        return len(ledger.fail_unfinished(reason))


def close_dead_run(paths: RunPaths) -> str | None:
    """If the run in ``paths`` is recorded as live but its harness is dead, mark it
    ``interrupted`` and its unfinished submissions failed; returns a sentence saying what
    was done, else None. A live harness, a finished run, or a harness that cannot be checked
    from here (another host, an older run.json) leaves the run as it is."""
    info = RunInfo.load(paths)
    if info.status not in LIVE_RUN_STATUSES or harness_alive(info) is not False:
        return None
    was = info.status
    failed = fail_in_flight(paths.ledger, "the harness died while this submission was being graded")
    info.status = RunStatus.INTERRUPTED
    info.error = f"the harness process died while the run was {was} (killed, e.g. SIGKILL)"
    if info.ended_at is None:
        info.ended_at = _last_sign_of_life(paths)
    info.save(paths)
    rows = f"; {failed} submission(s) in flight marked failed (harness)" if failed else ""
    return f"the run's harness is dead: marked the run interrupted{rows}"


def complete_final_grade(paths: RunPaths) -> str | None:
    """For a run that is no longer live under the ``validation`` feedback protocol: do its
    end-of-run grade on the private split if it was not done
    (:func:`~agent2rl.grading.final.grade_final` is idempotent) and return a sentence saying
    what the grade is; None for a live run or a run of the ``private`` protocol."""
    info = RunRecord(paths.root).info()
    if info is None or info.status in LIVE_RUN_STATUSES or info.feedback != "validation":
        return None
    grade = grade_final(paths)
    return describe_grade(grade) if grade is not None else None


def _last_sign_of_life(paths: RunPaths) -> float:
    """When the run last wrote anything the harness or its agent writes as it goes: the
    best estimate of when the harness died."""
    times = []
    wal = paths.ledger.with_name(paths.ledger.name + "-wal")
    for p in (paths.run_json, paths.agent_log, paths.resources, paths.ledger, wal, paths.llm_usage):
        with contextlib.suppress(OSError):
            times.append(p.stat().st_mtime)
    return max(times, default=time.time())
