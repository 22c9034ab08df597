"""The two grading protocols side by side (issue #24 item 3): the paper's ``--feedback private``
(every submission graded on the private split, the run's score is the best of them: selected
over the scores the agent saw) against MLE-bench's ``--feedback validation`` (the agent sees
validation scores only; one submission, the one marked final or else the best on validation,
is graded on the private split at the end).

    python benchmarks/feedback_protocols.py [--task arith-lite] [--agent reference-sft]
        [--budget 240s] [--repeats 3] [--out docs/figures/data/feedback_protocols.json]

Each repeat runs the same reference agent (scripted, no LLM) under both protocols through the
real CLI (``agent2rl run``, the tiny model, no sandbox), protocols alternating so that both see
the same machine load. Per run: the private baseline, the run's score (private: the best over
its submissions; validation: the end-of-run private grade), the final submission's private
score, the validation score the selection used, the number of submissions and the wall time.
The gap printed is mean(selected best on private, private protocol) minus mean(final under the
validation protocol). The reference agent never marks a submission final, so under
``validation`` its best on validation is graded. JSON goes to ``--out`` with the command,
commit, date and machine. Uses a private AGENT2RL_HOME (a temp dir) unless one is set.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import provenance  # the one writer of a figure's data file

ROOT = Path(__file__).resolve().parent.parent
PROTOCOLS = ("private", "validation")


def one_run(runs: Path, task: str, agent: str, budget: str, feedback: str, seed: int) -> dict:
    """One ``agent2rl run`` under ``feedback``; the figures of its metrics.json."""
    before = {d.name for d in runs.iterdir()} if runs.exists() else set()
    started = time.time()
    done = subprocess.run(
        [sys.executable, "-m", "agent2rl.cli", "run", "--task", task, "--agent", agent]
        + ["--model", "tiny", "--budget", budget, "--seed", str(seed), "--sandbox", "none"]
        + ["--runs-dir", str(runs), "--feedback", feedback],
        capture_output=True,
        text=True,
    )
    wall = time.time() - started
    if done.returncode != 0:
        raise SystemExit(f"agent2rl run failed ({feedback}, seed {seed}):\n{done.stderr[-3000:]}")
    (run_dir,) = [d for d in runs.iterdir() if d.is_dir() and d.name not in before]
    m = json.loads((run_dir / "report" / "metrics.json").read_text())
    return {
        "feedback": feedback,
        "seed": seed,
        "run_id": m["run_id"],
        "status": m["status"],
        "baseline": m["baseline"],
        "score": m["best_score"],
        "score_submission_id": m["best_submission_id"],
        "final_score": m["final_score"],
        "final_submission_id": m["final_submission_id"],
        "validation_baseline": m.get("validation_baseline"),
        "selected_validation_score": m.get("selected_validation_score"),
        "selected_by": m.get("selected_by"),
        "submissions": m["submissions"],
        "valid_submissions": m["valid_submissions"],
        "trajectory_scores": [p["score"] for p in m["trajectory"]],
        "wall_s": wall,
    }


def _mean(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.fmean(known) if known else None


def summarize(rows: list[dict]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The gap (mean selected best on private under ``private`` minus mean final private
    grade under ``validation``; per seed too) and one record per protocol (means)."""
    private = [r for r in rows if r["feedback"] == "private"]
    validation = [r for r in rows if r["feedback"] == "validation"]
    selected = _mean([r["score"] for r in private])
    final_validation = _mean([r["score"] for r in validation])
    gap = (
        selected - final_validation
        if selected is not None and final_validation is not None
        else None
    )
    by_seed = {(r["feedback"], r["seed"]): r["score"] for r in rows}
    summary = {
        "mean_selected_best_private_protocol": selected,
        "mean_final_submission_private_protocol": _mean([r["final_score"] for r in private]),
        "mean_final_validation_protocol": final_validation,
        "gap_selected_minus_validation_final": gap,
        "per_seed_gap": [
            by_seed[("private", seed)] - by_seed[("validation", seed)]
            for seed in sorted({r["seed"] for r in rows})
            if by_seed.get(("private", seed)) is not None
            and by_seed.get(("validation", seed)) is not None
        ],
    }
    by_protocol = [
        {
            "protocol": name,
            "runs": len(group),
            "mean_baseline": _mean([r["baseline"] for r in group]),
            "mean_score": _mean([r["score"] for r in group]),
            "score_is": (
                "best over private scores (selected)"
                if name == "private"
                else "the one private grade at the end (selected on validation)"
            ),
            "mean_final_submission_score": _mean([r["final_score"] for r in group]),
            "mean_selected_validation_score": _mean(
                [r["selected_validation_score"] for r in group]
            ),
            "mean_submissions": _mean([r["submissions"] for r in group]),
        }
        for name, group in (("private", private), ("validation", validation))
    ]
    return summary, by_protocol


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--task", default="arith-lite")
    ap.add_argument("--agent", default="reference-sft")
    ap.add_argument("--budget", default="240s")
    ap.add_argument("--repeats", type=int, default=3)
    provenance.add_arguments(ap, "feedback_protocols")
    args = ap.parse_args()
    rec = provenance.Recorder(args)
    if "AGENT2RL_HOME" not in os.environ:
        os.environ["AGENT2RL_HOME"] = tempfile.mkdtemp(prefix="agent2rl-bench-home-")
    print(provenance.machine())
    with tempfile.TemporaryDirectory(prefix="agent2rl-feedback-") as tmp:
        runs = Path(tmp) / "runs"
        rows = []
        for seed in range(args.repeats):
            # Alternate which protocol goes first: both see the same drift in machine load.
            order = PROTOCOLS if seed % 2 == 0 else PROTOCOLS[::-1]
            for feedback in order:
                row = one_run(runs, args.task, args.agent, args.budget, feedback, seed)
                rows.append(row)
                print(
                    f"seed {seed} {feedback:10s} baseline {row['baseline']} score {row['score']}"
                    f" final {row['final_score']} validation {row['selected_validation_score']}"
                    f" submissions {row['submissions']} ({row['wall_s']:.0f} s)",
                    flush=True,
                )
    summary, by_protocol = summarize(rows)
    selected = summary["mean_selected_best_private_protocol"]
    final_validation = summary["mean_final_validation_protocol"]
    gap = summary["gap_selected_minus_validation_final"]
    print(
        f"selected best (private protocol) {selected}, final under the validation protocol "
        f"{final_validation}: gap {gap}"
    )
    rec.write(
        {
            "task": args.task,
            "agent": args.agent,
            "budget": args.budget,
            "summary": summary,
            "by_protocol": by_protocol,
            "runs": rows,
        },
        repeats=args.repeats,
        split="graded",
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
