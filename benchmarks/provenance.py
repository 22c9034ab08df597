"""The one writer of a figure's data file, and the summaries every figure uses.

A benchmark that makes a figure adds the common options, starts a :class:`Recorder` (which
refuses a dirty checkout), measures, and writes through it::

    ap = argparse.ArgumentParser()
    provenance.add_arguments(ap, "tiny_tokenizer")
    args = ap.parse_args()
    rec = provenance.Recorder(args)
    ...
    rec.write({"tokens_per_char": ...}, repeats=3, split="validation")

The file starts with the header :data:`HEADER` names: the command line, the full commit, the
state of the checkout, the date, the machine (cores, processor, GPUs, torch and its threads,
the load average before and after), the repeats and the split. ``docs/hooks/site.py`` renders
it; ``benchmarks/figures.py`` runs every command; ``tests/unit/core/test_figures.py`` checks
every data file against this header.

Edge cases: the checkout counts as clean when only ``docs/figures/data/`` and the README's
generated demo block differ from HEAD (what the pipeline itself writes while it runs);
``--allow-dirty`` records the changed paths in ``worktree`` instead of refusing; ``--quick``
(tiny sizes, to check that the command runs) implies ``--allow-dirty`` and marks the file
``quick: true``, which no page may cite.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Literal

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "docs" / "figures" / "data"
#: what the pipeline writes while it runs: not a change to the code being measured
OUTPUTS = ("docs/figures/data/", "README.md")
#: the header every data file starts with, in this order
HEADER = (
    "benchmark",
    "command",
    "commit",
    "worktree",
    "quick",
    "date",
    "machine",
    "repeats",
    "split",
    "seconds",
)
#: graded: the task's private split (what a run's score is); validation: the harness's own
#: split (where defaults are chosen); none: the figure grades no model (a service's latency)
Split = Literal["graded", "validation", "none"]


def add_arguments(ap: argparse.ArgumentParser, name: str) -> None:
    """The options every figure command takes: ``--out`` (default
    ``docs/figures/data/NAME.json``), ``--allow-dirty`` and ``--quick``."""
    ap.add_argument("--out", type=Path, default=DATA / f"{name}.json", help="the data file")
    ap.add_argument(
        "--allow-dirty",
        action="store_true",
        help="measure an uncommitted checkout (the file lists the changed paths)",
    )
    ap.add_argument("--quick", action="store_true", help="tiny sizes: check that the command runs")


def git(*args: str) -> str:
    out = subprocess.run(["git", *args], capture_output=True, text=True, cwd=REPO, check=True)
    return out.stdout.strip()


def changed_paths() -> list[str]:
    """Tracked or untracked-but-not-ignored paths that differ from HEAD, the pipeline's own
    outputs (:data:`OUTPUTS`) left out."""
    out = subprocess.run(
        ["git", "status", "--porcelain", "-z", "--untracked-files=all"],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=True,
    ).stdout
    # "XY path" entries; a rename's entry is followed by its old path as an entry of its own
    paths = [entry[3:] for entry in out.split("\0") if len(entry) > 3 and entry[2] == " "]
    return [p for p in paths if not p.startswith(OUTPUTS)]


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def gpus() -> list[str]:
    """The GPUs nvidia-smi lists (the harness's one reader), ``name, memory`` each."""
    from agent2rl.devices import list_gpus

    return [f"{g.name}, {g.total_bytes // 2**20} MiB" for g in list_gpus()]


def machine() -> dict[str, Any]:
    """The machine a figure was measured on (the load average is added by the recorder)."""
    try:
        import torch

        torch_info = {"torch": torch.__version__, "torch_threads": torch.get_num_threads()}
    except ImportError:
        torch_info = {"torch": None, "torch_threads": None}
    return {
        "host": platform.node(),
        "cores": os.cpu_count(),
        "usable_cores": len(os.sched_getaffinity(0)),
        "cpu": platform.processor() or platform.machine(),
        "python": platform.python_version(),
        "gpus": gpus(),
        **torch_info,
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
    }


def summarize(samples: list[float], digits: int = 3) -> dict[str, Any]:
    """``n`` and the samples; with 3 or more, also the median and the range (``min``,
    ``max``). With fewer there is no median: a page prints the samples themselves."""
    xs = [round(float(x), digits) for x in samples]
    out: dict[str, Any] = {"n": len(xs), "samples": xs}
    if len(xs) >= 3:
        out |= {"median": round(statistics.median(xs), digits), "min": min(xs), "max": max(xs)}
    return out


def ratio(numerators: list[float], denominators: list[float]) -> dict[str, Any]:
    """The per-repeat ratios of two quantities measured side by side (same repeat, same
    thing on both sides), summarized as :func:`summarize` does. Raises ValueError when the
    two lists differ in length (a ratio pairs repeats)."""
    if len(numerators) != len(denominators):
        raise ValueError(f"{len(numerators)} against {len(denominators)} samples: not paired")
    return summarize([a / b for a, b in zip(numerators, denominators, strict=True)])


class Recorder:
    """One figure's measurement: checks the checkout at the start, writes the file at the
    end. Raises SystemExit (a one-line reason naming ``--allow-dirty``) on a dirty checkout."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.out: Path = args.out
        self.quick: bool = bool(getattr(args, "quick", False))
        changed = changed_paths()
        if changed and not (args.allow_dirty or self.quick):
            shown = ", ".join(changed[:5]) + (" ..." if len(changed) > 5 else "")
            raise SystemExit(
                f"refusing to measure an uncommitted checkout ({shown}): commit first, or "
                "pass --allow-dirty (the file then lists the changed paths)"
            )
        self.worktree = "clean" if not changed else {"dirty": changed}
        # now: a library may rewrite sys.argv while the figure runs (TextWorld's PDDL
        # translator sets it to its own)
        self.argv = list(sys.argv)
        self.commit = git("rev-parse", "HEAD")
        self.load_before = load_average()
        self.started = time.time()

    def write(self, data: dict[str, Any], *, repeats: int, split: Split) -> Path:
        """Write the header and ``data`` to ``--out`` (its folder created); returns the path.
        A key of ``data`` that repeats a header field raises ValueError."""
        clash = set(HEADER) & set(data)
        if clash:
            raise ValueError(f"data repeats header fields: {sorted(clash)}")
        script = Path(self.argv[0]).resolve()
        rel = script.relative_to(REPO) if script.is_relative_to(REPO) else script
        head = {
            "benchmark": self.out.stem,
            "command": shlex.join(["python", str(rel), *self.argv[1:]]),
            "commit": self.commit,
            "worktree": self.worktree,
            "quick": self.quick,
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.started)),
            "machine": {
                **machine(),
                "load_before": self.load_before,
                "load_after": load_average(),
            },
            "repeats": repeats,
            "split": split,
            "seconds": round(time.time() - self.started, 1),
        }
        self.out.parent.mkdir(parents=True, exist_ok=True)
        self.out.write_text(json.dumps({**head, **data}, indent=2) + "\n")
        print(f"wrote {self.out}")
        return self.out
