"""The README's demo block: what ``make demo`` printed at the end of the median of the
pipeline's demo runs (``docs/figures/data/demo.json``, written by ``benchmarks/demo.py``),
with the date, commit and machine it came from.

``python benchmarks/figures.py`` rewrites the block after the demo figure; the test suite
checks that the README holds exactly what :func:`demo_block` makes of the data file
(:func:`demo_block_drift`), so the README's headline is never typed by hand.
"""

from __future__ import annotations

import json
from pathlib import Path

from provenance import DATA, REPO

README = REPO / "README.md"
BEGIN = "<!-- demo-block: written by benchmarks/figures.py from docs/figures/data/demo.json -->"
END = "<!-- /demo-block -->"


def demo_block(data: dict) -> str:
    """The block's Markdown (between the markers) for a demo data file."""
    run = data["median_run"]
    machine = data["machine"]
    best = data["summary"]["best"]
    others = ", ".join(f"{x:.2f}" for x in best["samples"])
    return "\n".join(
        [
            f"The run with the median best score of {data['repeats']} `make demo` runs "
            f"(best scores {others}; graded split) on {data['date'][:10]}, commit "
            f"`{data['commit'][:10]}`, a {machine['cores']}-core CPU machine without GPU "
            "(*Demo* in [Figures](docs/figures.md)); yours will differ as these do:",
            "",
            "```",
            *run["headline"],
            "```",
        ]
    )


def _split(text: str) -> tuple[str, str, str]:
    """The README around its block: (before, block, after). Raises ValueError without one."""
    if text.count(BEGIN) != 1 or text.count(END) != 1:
        raise ValueError(f"README.md needs exactly one {BEGIN!r} ... {END!r} block")
    before, rest = text.split(BEGIN)
    block, after = rest.split(END)
    return before, block.strip("\n"), after


def _data(path: Path = DATA / "demo.json") -> dict:
    return json.loads(path.read_text())


def write_demo_block() -> None:
    """Rewrite the README's block from demo.json."""
    before, _, after = _split(README.read_text())
    README.write_text(f"{before}{BEGIN}\n{demo_block(_data())}\n{END}{after}")
    print(f"rewrote the demo block of {README}")


def demo_block_drift() -> str | None:
    """None when the README's block is what demo.json says; otherwise what differs."""
    _, block, _ = _split(README.read_text())
    want = demo_block(_data())
    return None if block == want else f"README.md's demo block:\n{block}\nwanted:\n{want}"
