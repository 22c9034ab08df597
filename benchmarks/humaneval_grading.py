"""How long the HumanEval grader takes to run the 82 private canonical solutions (all must pass).

Each program runs in its own sandbox (:mod:`agent2rl.scoring.code_exec`); this prints the
isolation mode in use, how many passed and the wall time per repeat.

    python benchmarks/humaneval_grading.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import time

from agent2rl.scoring.code_exec import ExecLimits, isolation, run_programs
from agent2rl.tasks.humaneval import build_program, load_problems, split_problems


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    _, private = split_problems(load_problems())
    programs = [build_program(p, p["canonical_solution"], chat=False) for p in private]
    for _ in range(args.repeats):
        started = time.time()
        results = run_programs(programs, ExecLimits())
        passed = sum(r.passed for r in results)
        print(
            f"{isolation()}: {passed}/{len(results)} canonical solutions passed in "
            f"{time.time() - started:.2f}s"
        )


if __name__ == "__main__":
    main()
