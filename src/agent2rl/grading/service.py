"""The grading service process: ``python -m agent2rl.grading.service RUN_DIR``.

The orchestrator starts it (one per run) with the run token in the environment variable
``AGENT2RL_GRADING_TOKEN``. It binds a random free port on 127.0.0.1, writes
``grading/service.json`` (port, pid) atomically once it is ready to accept connections, and
serves until SIGTERM. :func:`start_service` is the orchestrator's side of that handshake
(:mod:`agent2rl.child_process`).

The clock: the service takes the run's start and deadline from run.json once, when it starts
(a service restarted on a running run), and is then *told* them by the orchestrator when the
run starts (:func:`tell_clock`): one JSON line ``{"start": ..., "deadline": ...}`` on its
stdin, a pipe only the orchestrator holds (the agent holds the grading token, so an HTTP
endpoint would let it move its own deadline). The service never reads run.json again.

The run's end settles every accepted submission or says why not: :func:`wait_for_in_flight`
while the service still runs, then :func:`close_unfinished`.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import IO, TYPE_CHECKING

from agent2rl.child_process import ServiceHandle, serve_on_free_port, start_announcing
from agent2rl.errors import UserError
from agent2rl.files import write_json_atomic
from agent2rl.grading.ledger import Ledger
from agent2rl.rundir import RunInfo, RunPaths
from agent2rl.settings import load_settings

if TYPE_CHECKING:
    from agent2rl.grading.app import GradingService

TOKEN_ENV = "AGENT2RL_GRADING_TOKEN"
#: The :class:`~agent2rl.grading.app.GradingContext` settings ``start_service`` may pass.
OPTIONS = {
    "eval_lock_wait_s": float,
    "disk_margin_bytes": int,
    "rejections_per_minute": int,
    "staging_slots": int,
    "grader": str,  # warm: one worker kept up between submissions; cold: one per submission
}


def start_service(
    paths: RunPaths,
    token: str,
    *,
    eval_timeout_s: float,
    max_bytes: int,
    base_model_dir: Path,
    ready_timeout: float = 60.0,
    options: dict[str, float | int | str] | None = None,
) -> ServiceHandle:
    """Start the service for the run in ``paths`` and wait until it answers.

    ``options``: :data:`OPTIONS` by name; unset ones keep their defaults."""
    cmd = [sys.executable, "-m", "agent2rl.grading.service", str(paths.root)]
    given = {"eval_timeout": eval_timeout_s, "max_bytes": max_bytes, "base_model": base_model_dir}
    for name, value in {**given, **(options or {})}.items():
        cmd += ["--" + name.replace("_", "-"), str(value)]
    proc, port = start_announcing(
        cmd,
        env={**os.environ, TOKEN_ENV: token},
        ready_file=paths.service_json,
        log_file=paths.service_log,
        name="grading service",
        ready_timeout=ready_timeout,
        stdin=subprocess.PIPE,  # the clock's channel (tell_clock)
    )
    return ServiceHandle(proc, port)


def tell_clock(
    handle: ServiceHandle, token: str, start: float, deadline: float, timeout_s: float = 30.0
) -> None:
    """Tell the service ``handle`` (started by :func:`start_service`) the run's clock, and
    return once it answers ``GET /time`` with it (the agent, started next, must not find a
    service that has not heard yet). Raises RuntimeError when the service is gone or does not
    take it within ``timeout_s``."""
    assert handle.proc.stdin is not None, "start the service with start_service"
    try:
        handle.proc.stdin.write(json.dumps({"start": start, "deadline": deadline}).encode() + b"\n")
        handle.proc.stdin.flush()
        ask = urllib.request.Request(
            f"{handle.url}/time", headers={"Authorization": f"Bearer {token}"}
        )
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            with urllib.request.urlopen(ask, timeout=timeout_s) as answer:
                if json.load(answer)["deadline"] == deadline:  # a float survives JSON exactly
                    return
            time.sleep(0.02)
    except OSError as err:  # the service is gone (a broken pipe, a refused connection)
        raise RuntimeError(f"the grading service could not be told the clock: {err}") from None
    raise RuntimeError(f"the grading service did not take the clock in {timeout_s:.0f}s")


def _listen_for_clock(service: GradingService, pipe: IO[bytes]) -> None:
    """Pass every clock line on ``pipe`` to ``service`` (in a daemon thread, until EOF);
    a malformed line is logged and ignored."""

    def listen() -> None:
        for line in pipe:
            try:
                told = json.loads(line)
                service.tell_clock(float(told["start"]), float(told["deadline"]))
            except (ValueError, KeyError, TypeError) as err:
                print(f"grading service: ignored a clock line ({err!r})", file=sys.stderr)

    threading.Thread(target=listen, name="clock", daemon=True).start()


def main(argv: list[str] | None = None) -> int:
    from agent2rl.grading.app import GradingContext, GradingService, create_app
    from agent2rl.grading.evaluator import EvalSpec
    from agent2rl.grading.submission import SubmissionLimits
    from agent2rl.recording import CodeRecorder

    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--eval-timeout", type=float, required=True)
    ap.add_argument("--max-bytes", type=int, required=True)
    ap.add_argument("--base-model", type=Path, required=True)
    for name, kind in OPTIONS.items():  # unset: GradingContext's default
        ap.add_argument("--" + name.replace("_", "-"), type=kind, dest=name)
    args = ap.parse_args(argv)
    token = os.environ.pop(TOKEN_ENV, "")
    if not token:
        raise UserError(f"{TOKEN_ENV} is not set")
    paths = RunPaths(args.run_dir.resolve())
    info = RunInfo.load(paths)
    ctx = GradingContext(
        paths=paths,
        info=info,
        token=token,
        settings=load_settings(),
        limits=SubmissionLimits(max_bytes=args.max_bytes),
        eval_timeout_s=args.eval_timeout,
        base_model_dir=args.base_model,
        eval_spec=EvalSpec.of_run(info),
        snapshot=CodeRecorder(paths.code_git, paths.workspace).snapshot,
        feedback=info.feedback,
        **{name: value for name in OPTIONS if (value := getattr(args, name)) is not None},
    )
    service = GradingService(ctx)
    _listen_for_clock(service, sys.stdin.buffer)
    app = create_app(service)
    _warm_up_staging(args.base_model)
    serve_on_free_port(
        app,
        lambda port: write_json_atomic(paths.service_json, {"port": port, "pid": os.getpid()}),
    )
    return 0


def _warm_up_staging(base_model: Path) -> None:
    """Check the base model as a submission is checked, before the service announces itself
    (so before the budget starts): the first check imports torch, transformers and the
    model's class (4 s on an idle core, 8 s on a loaded one), which the agent's first
    submission would otherwise pay while it is staged. Never fails the service: a base
    model the check refuses only leaves the imports to the first submission."""
    from agent2rl.grading.submission import check_model_files

    try:
        check_model_files(base_model)
    except Exception as err:  # noqa: BLE001 - a warm-up, not a gate
        print(f"staging warm-up on the base model: {type(err).__name__}: {err}", flush=True)


def wait_for_in_flight(
    ledger: Ledger, per_row_timeout_s: float, tick: Callable[[int], None] | None = None
) -> list[int]:
    """Wait while rows are ``evaluating`` (the service still running): as long as some row
    settles within ``per_row_timeout_s`` of the last one (evaluations queued behind one
    another each get their own time), or until none is left. ``tick(n_left)`` is called about
    twice a second. Returns the ids still unsettled (for :func:`close_unfinished`)."""
    left = {s.id for s in ledger.in_flight()}
    last_progress = time.monotonic()
    while left and time.monotonic() - last_progress < per_row_timeout_s:
        if tick is not None:
            tick(len(left))
        time.sleep(0.5)
        now_left = {s.id for s in ledger.in_flight()}
        if now_left - left or left - now_left:  # one settled (or a late one was recorded)
            last_progress = time.monotonic()
        left = now_left
    return sorted(left)


def close_unfinished(ledger: Ledger) -> list[int]:
    """After the service has stopped: every row still ``evaluating`` ends ``failed`` as a
    ``harness`` failure, "the run ended before it was graded"; returns their ids. A service
    stopped by SIGTERM has done this already for its own rows; this covers one killed."""
    from agent2rl.grading.submission import RUN_ENDED

    return ledger.fail_unfinished(RUN_ENDED)


if __name__ == "__main__":
    sys.exit(main())
