"""Rollout-service figures for alfworld-lite: environment steps per second through the
service (HTTP on loopback, the agent's path) against stepping the same games in-process, side
by side in one run, and the time to evaluate the tiny model on the lite eval set.

    python benchmarks/rollout_service.py [--episodes 24] [--repeats 3] [--n-eval 48]

Episodes replay the public walkthroughs (every action admissible, each game won; a session
lasts as long as its walkthrough), so both sides do the same engine work; the overhead ratio
is in-process steps/s over service steps/s. Uses a private AGENT2RL_HOME (a temp dir) unless
one is set; generating the games the first time is reported separately.
"""

from __future__ import annotations

import argparse
import os
import secrets
import statistics
import sys
import tempfile
import time
from pathlib import Path

from spine import machine  # the machine line every benchmark prints


def in_process(games, walks: list[dict]) -> tuple[int, float]:
    """(steps, seconds) replaying ``walks`` with GameSession directly."""
    steps, start = 0, time.time()
    for w in walks:
        session = games.open(games.by_id[w["game_id"]], max_steps=len(w["steps"]))
        for st in w["steps"]:
            session.step(st["action"])
            steps += 1
        assert session.won, w["game_id"]
        session.close()
    return steps, time.time() - start


def through_service(url: str, token: str, walks: list[dict]) -> tuple[int, float]:
    """(steps, seconds) replaying ``walks`` through the service with the workspace client."""
    from agent2rl.rollout.client import EnvClient

    env = EnvClient(url, token)
    steps, start = 0, time.time()
    for w in walks:
        with env.session(game_id=w["game_id"], max_steps=len(w["steps"])) as s:
            for st in w["steps"]:
                s.step(st["action"])
                steps += 1
            assert s.won, w["game_id"]
    return steps, time.time() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--episodes", type=int, default=24)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--n-eval", type=int, default=48)
    ap.add_argument("--n-train", type=int, default=60)
    args = ap.parse_args()
    if not os.environ.get("AGENT2RL_HOME"):
        os.environ["AGENT2RL_HOME"] = tempfile.mkdtemp(prefix="agent2rl-bench-")
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    from support.rundirs import run_stub  # noqa: E402  (the tests' run-directory builder)

    from agent2rl.files import read_jsonl
    from agent2rl.inference import load_backend
    from agent2rl.models import resolve_model
    from agent2rl.orchestration.rollout_service import start_rollout_service
    from agent2rl.rollout import RolloutLimits
    from agent2rl.settings import load_settings
    from agent2rl.tasks import get_task, prepare_task

    print(f"machine: {machine()}")
    settings = load_settings()
    sizes = {"n_train": args.n_train, "n_eval": args.n_eval, "n_validation": args.n_eval}
    task = get_task("alfworld-lite", sizes)
    started = time.time()
    prepared = prepare_task(task, settings.task_store)
    print(
        f"games ready ({args.n_train} train, {args.n_eval} eval and validation): "
        f"{time.time() - started:.1f}s"
    )
    walks = read_jsonl(prepared.public / "walkthroughs.jsonl")[: args.episodes]
    model = resolve_model("tiny", settings.model_store)

    paths = run_stub(Path(tempfile.mkdtemp()) / "run", task)
    token = secrets.token_urlsafe(16)
    handle = start_rollout_service(paths, token, RolloutLimits(max_sessions=8, steps_per_s=1e6))
    games = task.environment(prepared, "public")
    ratios = []
    try:
        for r in range(args.repeats):
            n_local, t_local = in_process(games, walks)
            n_http, t_http = through_service(handle.url, token, walks)
            local, http = n_local / t_local, n_http / t_http
            ratios.append(local / http)
            print(
                f"repeat {r + 1}: {n_http} steps ({len(walks)} episodes); in-process "
                f"{local:.1f} steps/s, through the service {http:.1f} steps/s, overhead "
                f"{local / http:.2f}x"
            )
    finally:
        handle.stop()
    median = statistics.median(ratios)
    print(f"service overhead (in-process / service steps/s), median: {median:.2f}x")

    backend = load_backend(model.path, "transformers")
    try:
        for r in range(args.repeats):
            started = time.time()
            # The validation games: a timing, but no benchmark touches the graded split.
            result = task.evaluate(backend, prepared, split="validation")
            print(
                f"eval repeat {r + 1}: tiny on {result.n_items} lite validation games (max "
                f"{task.opts['max_steps']} steps) in {time.time() - started:.1f}s, score "
                f"{result.score:.2f}, mean steps {result.details['mean_steps']:.1f}"
            )
    finally:
        backend.close()


if __name__ == "__main__":
    main()
