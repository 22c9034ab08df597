"""The grading service process: ``python -m agent2rl.grading.service RUN_DIR``.

The orchestrator starts it (one per run) with the run token in the environment variable
``AGENT2RL_GRADING_TOKEN``. It binds a random free port on 127.0.0.1, writes
``grading/service.json`` (port, pid) atomically once it is ready to accept connections, and
serves until SIGTERM. :func:`start_service` is the orchestrator's side of that handshake
(:mod:`agent2rl.child_process`).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from agent2rl.child_process import ServiceHandle, serve_on_free_port, start_announcing
from agent2rl.errors import UserError
from agent2rl.files import write_json_atomic
from agent2rl.rundir import RunInfo, RunPaths
from agent2rl.settings import load_settings

TOKEN_ENV = "AGENT2RL_GRADING_TOKEN"


def start_service(
    paths: RunPaths,
    token: str,
    *,
    eval_timeout_s: float,
    max_bytes: int,
    base_model_dir: Path,
    ready_timeout: float = 60.0,
) -> ServiceHandle:
    """Start the service for the run in ``paths`` and wait until it answers."""
    cmd = [
        sys.executable,
        "-m",
        "agent2rl.grading.service",
        str(paths.root),
        "--eval-timeout",
        str(eval_timeout_s),
        "--max-bytes",
        str(max_bytes),
        "--base-model",
        str(base_model_dir),
    ]
    proc, port = start_announcing(
        cmd,
        env={**os.environ, TOKEN_ENV: token},
        ready_file=paths.service_json,
        log_file=paths.service_log,
        name="grading service",
        ready_timeout=ready_timeout,
    )
    return ServiceHandle(proc, port)


def main(argv: list[str] | None = None) -> int:
    from agent2rl.grading.app import GradingContext, create_app
    from agent2rl.grading.evaluator import EvalSpec
    from agent2rl.grading.submission import SubmissionLimits
    from agent2rl.inference.backend import BackendConfig
    from agent2rl.recording import CodeRecorder

    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--eval-timeout", type=float, required=True)
    ap.add_argument("--max-bytes", type=int, required=True)
    ap.add_argument("--base-model", type=Path, required=True)
    args = ap.parse_args(argv)
    token = os.environ.pop(TOKEN_ENV, "")
    if not token:
        raise UserError(f"{TOKEN_ENV} is not set")
    paths = RunPaths(args.run_dir.resolve())
    recorder = CodeRecorder(paths.code_git, paths.workspace)
    info = RunInfo.load(paths)
    # The run's evaluation settings come from run.json, exactly as the baseline used them.
    spec = EvalSpec(info.task, info.task_options or {}, BackendConfig.from_dict(info.backend))
    ctx = GradingContext(
        paths=paths,
        info=info,
        token=token,
        settings=load_settings(),
        limits=SubmissionLimits(max_bytes=args.max_bytes),
        eval_timeout_s=args.eval_timeout,
        base_model_dir=args.base_model,
        eval_spec=spec,
        snapshot=recorder.snapshot,
    )
    app = create_app(ctx)
    serve_on_free_port(
        app,
        lambda port: write_json_atomic(paths.service_json, {"port": port, "pid": os.getpid()}),
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
