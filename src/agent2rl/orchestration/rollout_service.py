"""The rollout service process: ``python -m agent2rl.orchestration.rollout_service RUN_DIR``.

The orchestrator starts one for each interactive run (:func:`start_rollout_service`), with
the run's environment token in ``AGENT2RL_ENV_TOKEN``. It serves the task's environment over
the *public* split with the task-neutral :mod:`agent2rl.rollout` app, recording into
``record/env.db``.

It lives here, not in :mod:`agent2rl.rollout`, because it is where a task meets the rollout
layer: tasks build on the rollout types, so the rollout package cannot import the tasks.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from agent2rl.child_process import ServiceHandle, serve_on_free_port, start_announcing
from agent2rl.files import write_json_atomic
from agent2rl.rollout import EnvLedger, RolloutLimits, RolloutService, create_app
from agent2rl.rundir import RunInfo, RunPaths
from agent2rl.settings import load_settings
from agent2rl.tasks import get_task, prepare_task

TOKEN_ENV = "AGENT2RL_ENV_TOKEN"


def start_rollout_service(paths: RunPaths, token: str, limits: RolloutLimits) -> ServiceHandle:
    """Start the rollout service for the run in ``paths`` and wait until it serves (up to
    two minutes: loading the games can take a while on a big split)."""
    cmd = [sys.executable, "-m", __name__, str(paths.root)]
    cmd += ["--max-sessions", str(limits.max_sessions), "--steps-per-s", str(limits.steps_per_s)]
    cmd += ["--idle-timeout", str(limits.idle_timeout_s)]
    proc, port = start_announcing(
        cmd,
        env={**os.environ, TOKEN_ENV: token, "TOKENIZERS_PARALLELISM": "false"},
        ready_file=paths.env_service / "service.json",
        log_file=paths.env_service / "service.log",
        name="rollout service",
        ready_timeout=120.0,
    )
    return ServiceHandle(proc, port)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--max-sessions", type=int, default=RolloutLimits.max_sessions)
    ap.add_argument("--steps-per-s", type=float, default=RolloutLimits.steps_per_s)
    ap.add_argument("--idle-timeout", type=float, default=RolloutLimits.idle_timeout_s)
    args = ap.parse_args(argv)
    token = os.environ.pop(TOKEN_ENV, "")
    if not token:
        print(f"{TOKEN_ENV} is not set", file=sys.stderr)
        return 2
    paths = RunPaths(args.run_dir.resolve())
    info = RunInfo.load(paths)
    task = get_task(info.task, info.task_options or {})
    if not task.interactive:
        print(f"task {task.name} has no environment to serve", file=sys.stderr)
        return 2
    source = task.environment(prepare_task(task, load_settings().task_store), "public")
    limits = RolloutLimits(args.max_sessions, args.steps_per_s, args.idle_timeout)
    app = create_app(RolloutService(source, EnvLedger(paths.env_db), limits), token)
    ready = paths.env_service / "service.json"
    serve_on_free_port(
        app, lambda port: write_json_atomic(ready, {"port": port, "pid": os.getpid()})
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
