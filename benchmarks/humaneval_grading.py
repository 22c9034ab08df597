"""What the two-process HumanEval scorer costs: canonical solutions graded per second by the
two-process runner (:mod:`agent2rl.sandbox.two_process`, what :class:`UnitTests` uses) and by
the one-process runner it replaced (:func:`agent2rl.sandbox.programs.run_program`, whose
verdict the program could forge), side by side in one run. Every solution must pass in both.

Each repeat runs both, one after the other (alternating which goes first), on the same
problems with the same limits and the same number of parallel items (the CPUs this process
may use, unless ``--workers``); the figures are medians over the repeats, so that a machine
whose load drifts during the run penalises neither. Where this process may create a cgroup
(root, with cgroup v1's cpuacct or cgroup v2), it also prints the CPU time per solution of
everything each runner started (sandboxes included): unlike the rate, that figure does not
move with what else the machine is running. The problems are all 164 of HumanEval by
default (``--problems private``: the 82 graded ones). Speed only: nothing is tuned on them.

    python benchmarks/humaneval_grading.py [--repeats 5] [--problems all|private] [--workers N]

Written through the figures' writer (``docs/figures/data/humaneval_grading.json``): per
runner the rate and the CPU per solution as summaries, and the ratios taken per repeat (both
runners run in every repeat). The split is ``graded`` when only the private problems are run,
else ``none`` (canonical solutions: no model is graded). ``--quick``: 8 problems, one repeat.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from pathlib import Path

import provenance

from agent2rl.sandbox.programs import ExecLimits, ExecResult, cpu_count, isolation, run_programs
from agent2rl.sandbox.two_process import check_functions
from agent2rl.scoring.unit_tests import build_item, build_program
from agent2rl.tasks.humaneval import load_problems, split_problems


class CpuMeter:
    """CPU time used by this process and everything it starts, from a cgroup of its own; None
    from :meth:`open` where no cgroup can be made (not root, no cpuacct or cgroup v2)."""

    def __init__(self, group: Path, usage: Callable[[], float], parent: Path) -> None:
        self.group, self.usage, self.parent = group, usage, parent

    @classmethod
    def open(cls) -> CpuMeter | None:
        name = f"agent2rl-bench-{os.getpid()}"
        v1, v2 = Path("/sys/fs/cgroup/cpuacct"), Path("/sys/fs/cgroup")
        try:
            if (v1 / "cpuacct.usage").exists():
                group = v1 / name
                group.mkdir()
                meter = cls(group, lambda: int((group / "cpuacct.usage").read_text()) / 1e9, v1)
            elif (v2 / "cgroup.controllers").exists():
                group = v2 / name
                group.mkdir()
                stat = group / "cpu.stat"
                meter = cls(group, lambda: int(stat.read_text().split()[1]) / 1e6, v2)
            else:
                return None
            (group / "cgroup.procs").write_text(str(os.getpid()))
            return meter
        except OSError:
            return None

    def close(self) -> None:
        try:
            (self.parent / "cgroup.procs").write_text(str(os.getpid()))
            self.group.rmdir()
        except OSError:
            pass


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--problems", choices=("all", "private"), default="all")
    ap.add_argument("--workers", type=int, default=None)
    provenance.add_arguments(ap, "humaneval_grading")
    args = ap.parse_args()
    rec = provenance.Recorder(args)
    problems = load_problems()
    if args.problems == "private":
        problems = split_problems(problems)[2]
    if args.quick:
        problems, args.repeats = problems[:8], 1
    limits, workers = ExecLimits(), args.workers or cpu_count()
    programs = [build_program(p, p["canonical_solution"], chat=False) for p in problems]
    items = [build_item(p, p["canonical_solution"], chat=False) for p in problems]
    runners: dict[str, Callable[[], list[ExecResult]]] = {
        "one-process": lambda: run_programs(programs, limits, workers=workers),
        "two-process": lambda: check_functions(items, limits, workers=workers),
    }
    ids = f"{problems[0]['task_id']}-{problems[-1]['task_id'].split('/')[1]}"
    print(
        f"isolation {isolation()}, {cpu_count()} CPUs, {workers} items at a time, "
        f"{len(problems)} canonical solutions ({ids})"
    )
    rates: dict[str, list[float]] = {name: [] for name in runners}
    cpu_ms: dict[str, list[float]] = {name: [] for name in runners}
    meter = CpuMeter.open()
    try:
        for repeat in range(args.repeats):
            order = list(runners) if repeat % 2 == 0 else list(reversed(runners))
            line = []
            for name in order:
                cpu = meter.usage() if meter else 0.0
                started = time.perf_counter()
                results = runners[name]()
                rate = len(results) / (time.perf_counter() - started)
                rates[name].append(rate)
                if meter:
                    cpu_ms[name].append((meter.usage() - cpu) * 1000 / len(results))
                failed = [
                    f"{p['task_id']}: {r.status} {r.reason}"
                    for p, r in zip(problems, results, strict=True)
                    if not r.passed
                ]
                per = f", {cpu_ms[name][-1]:.1f} ms CPU each" if meter else ""
                line.append(
                    f"{name} {len(results) - len(failed)}/{len(results)} passed, {rate:.1f}/s{per}"
                )
                for f in failed:
                    print(f"  {name} FAILED {f}")
            print(f"repeat {repeat + 1}: " + " | ".join(line))
    finally:
        if meter:
            meter.close()
    one, two = rates["one-process"], rates["two-process"]
    data = {
        "problems": len(problems),
        "workers": workers,
        "isolation": isolation(),
        "solutions_per_s": {name: provenance.summarize(r, 1) for name, r in rates.items()},
        # time per solution: the rates' inverse ratio
        "time_ratio_two_over_one_process": provenance.ratio(one, two),
    }
    if meter:
        data["cpu_ms_per_solution"] = {n: provenance.summarize(c, 1) for n, c in cpu_ms.items()}
        data["cpu_ratio_two_over_one_process"] = provenance.ratio(
            cpu_ms["two-process"], cpu_ms["one-process"]
        )
    else:
        print("(no cgroup could be made here: CPU time per solution not measured)")
    split = "graded" if args.problems == "private" else "none"
    rec.write(data, repeats=args.repeats, split=split)


if __name__ == "__main__":
    main()
