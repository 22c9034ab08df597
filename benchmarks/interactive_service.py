"""The lite interactive tasks' figures: environment steps per second through the rollout
service (HTTP on loopback, the agent's path) against the same steps in-process, side by side
in one run, with 1 and with 16 parallel sessions, and the time to grade the tiny model on the
lite validation split (no benchmark touches the graded split).

    python benchmarks/interactive_service.py [--tasks alfworld-lite webshop-lite deepsearch-lite]
        [--episodes N] [--repeats 3] [--parallel 16]

Episodes replay the public expert walkthroughs (alfworld-lite: every action admissible, each
game won; webshop-lite: a search, clicks, a purchase, every action offered; deepsearch-lite:
two BM25 searches, then the answer; every episode rewarded 1), each session as long as its
walkthrough, so both sides do the same work; the overhead is in-process steps/s over one
service session's. Uses a private AGENT2RL_HOME (a temp dir) unless one is set; preparing the
task's data the first time is reported separately (alfworld-lite is sized down: 60 public,
48 graded and 48 validation games). One file for all tasks (``runs``): steps per second as
summaries over ``--repeats``, the overhead as per-repeat ratios, the grading time (one
grading unless ``--grading-repeats``: alfworld-lite's takes minutes here).
``--quick``: deepsearch-lite, 4 episodes, 4 validation items, one repeat.
"""

from __future__ import annotations

import argparse
import os
import secrets
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import provenance


@dataclass(frozen=True)
class Figures:
    """How a task's figures read: what its validation items are called, and the extra
    detail of its evaluation worth printing (a key of ``details`` and its label), if any."""

    items: str
    extra: tuple[str, str] | None = None
    #: episodes replayed by default (ALFWorld's engine is the slow one)
    episodes: int = 64
    #: task options (smaller data for a task whose generation takes minutes)
    options: dict | None = None


#: the tasks this benchmark measures (the lite interactive tasks: a walkthrough per public
#: item)
TASKS = {
    "alfworld-lite": Figures(
        "games", episodes=24, options={"n_train": 60, "n_eval": 48, "n_validation": 48}
    ),
    "webshop-lite": Figures("goals"),
    "deepsearch-lite": Figures("questions", ("answered_rate", "answered")),
}


def in_process(games, walks: list[dict]) -> tuple[int, float]:
    """(steps, seconds) replaying ``walks`` with the task's episodes directly."""
    steps, start = 0, time.time()
    for w in walks:
        ep = games.open(games.by_id[w["game_id"]], max_steps=len(w["steps"]))
        for st in w["steps"]:
            ep.step(st["action"])
            steps += 1
        assert ep.last.won, w["game_id"]
        ep.close()
    return steps, time.time() - start


def through_service(url: str, token: str, walks: list[dict], parallel: int) -> tuple[int, float]:
    """(steps, seconds) replaying ``walks`` through the service with the workspace client,
    ``parallel`` sessions at a time."""
    from agent2rl.rollout.client import EnvClient

    env = EnvClient(url, token)

    def play(w: dict) -> int:
        with env.session(game_id=w["game_id"], max_steps=len(w["steps"])) as s:
            for st in w["steps"]:
                s.step(st["action"])
            assert s.won, w["game_id"]
        return len(w["steps"])

    start = time.time()
    with ThreadPoolExecutor(parallel) as pool:
        steps = sum(pool.map(play, walks))
    return steps, time.time() - start


def measure(task_name: str, args: argparse.Namespace, settings) -> dict:
    """One task's record: steps per second (summaries), the service's overhead (per-repeat
    ratios) and the validation grading of the tiny model."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    from support.rundirs import run_stub  # noqa: E402  (the tests' run-directory builder)

    from agent2rl.files import read_jsonl
    from agent2rl.inference import load_backend
    from agent2rl.models import resolve_model
    from agent2rl.orchestration.rollout_service import start_rollout_service
    from agent2rl.rollout import RolloutLimits
    from agent2rl.tasks import get_task, prepare_task

    figures = TASKS[task_name]
    task = get_task(task_name, figures.options)
    started = time.time()
    prepared = prepare_task(task, settings.task_store)
    print(f"{task_name} data ready ({figures.options or 'defaults'}): {time.time() - started:.1f}s")
    walks = read_jsonl(prepared.public / "walkthroughs.jsonl")[: args.episodes or figures.episodes]
    games = task.environment(prepared, "public")
    paths = run_stub(Path(tempfile.mkdtemp()) / "run", task)
    token = secrets.token_urlsafe(16)
    # the run's default limits (32 sessions, 500 steps/s)
    handle = start_rollout_service(paths, token, RolloutLimits())
    local, one, par = [], [], []
    try:
        for r in range(args.repeats):
            n_local, t_local = in_process(games, walks)
            n_one, t_one = through_service(handle.url, token, walks, 1)
            n_par, t_par = through_service(handle.url, token, walks, args.parallel)
            local.append(n_local / t_local)
            one.append(n_one / t_one)
            par.append(n_par / t_par)
            print(
                f"repeat {r + 1}: {n_one} steps ({len(walks)} episodes); in-process "
                f"{local[-1]:.1f} steps/s, service 1 session {one[-1]:.1f} steps/s, service "
                f"{args.parallel} sessions {par[-1]:.1f} steps/s",
                flush=True,
            )
    finally:
        handle.stop()
    model = resolve_model("tiny", settings.model_store)
    backend = load_backend(model.path, "transformers")
    times, result = [], None
    try:
        for r in range(args.grading_repeats):
            started = time.time()
            result = task.evaluate(backend, prepared, split="validation", limit=args.limit)
            times.append(time.time() - started)
            print(f"eval repeat {r + 1}: {result.n_items} {figures.items} in {times[-1]:.1f}s")
    finally:
        backend.close()
    assert result is not None
    extra = {}
    if figures.extra:
        key, label = figures.extra
        extra = {f"{label}_pct": round(float(result.details[key]), 1)}
    return {
        "task": task_name,
        "episodes": len(walks),
        "steps_per_s_in_process": provenance.summarize(local, 1),
        "steps_per_s_service_1": provenance.summarize(one, 1),
        f"steps_per_s_service_{args.parallel}": provenance.summarize(par, 1),
        "overhead_in_process_over_service_1": provenance.ratio(local, one),
        "validation_items": result.n_items,
        "max_steps": task.opts["max_steps"],
        "grading_s": provenance.summarize(times, 1),
        "tiny_score": round(result.score, 2),
        "tiny_mean_steps": round(float(result.details["mean_steps"]), 1),
        **extra,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--tasks", nargs="+", choices=sorted(TASKS), default=sorted(TASKS))
    ap.add_argument("--episodes", type=int, help="default: 24 for alfworld-lite, else 64")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--parallel", type=int, default=16)
    ap.add_argument("--limit", type=int, default=None, help="validation items graded (all)")
    # one grading each by default: alfworld-lite's takes minutes on 2 cores (its time is
    # printed as one sample, not a median)
    ap.add_argument("--grading-repeats", type=int, default=1)
    provenance.add_arguments(ap, "interactive_service")
    args = ap.parse_args()
    if args.quick:
        args.tasks, args.episodes, args.repeats, args.limit = ["deepsearch-lite"], 4, 1, 4
        args.grading_repeats = 1
    rec = provenance.Recorder(args)
    if not os.environ.get("AGENT2RL_HOME"):
        os.environ["AGENT2RL_HOME"] = tempfile.mkdtemp(prefix="agent2rl-bench-")
    from agent2rl.settings import load_settings

    settings = load_settings()
    runs = [measure(t, args, settings) for t in args.tasks]
    rec.write({"parallel": args.parallel, "runs": runs}, repeats=args.repeats, split="validation")


if __name__ == "__main__":
    main()
