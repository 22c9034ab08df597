"""``agent2rl demo`` first prints its steps, each with how long it takes (the real CLI; a bad
``--sandbox`` stops it right after the plan, so no run is made)."""

from __future__ import annotations

import os
import re
from pathlib import Path

from support.cli import run_cli


def _plan(home: Path, tmp_path: Path) -> str:
    proc = run_cli(
        ["demo", "--sandbox", "bogus", "--runs-dir", str(tmp_path / "runs")],
        env={**os.environ, "AGENT2RL_HOME": str(home), "COLUMNS": "200"},
        timeout=120,
    )
    assert proc.returncode == 2 and "bad --sandbox" in proc.stderr, proc.stdout + proc.stderr
    assert not (tmp_path / "runs").exists()
    return proc.stdout


def test_demo_prints_each_step_with_its_time_first_run(tmp_path: Path) -> None:
    out = _plan(tmp_path / "fresh-home", tmp_path)
    steps = re.findall(r"^\s+(\d)\. (.+): (.+)$", out, re.MULTILINE)
    assert [s[0] for s in steps] == ["1", "2", "3", "4"], out
    assert all(re.search(r"\d+s|\d+m|seconds", s[2]) for s in steps), steps
    assert "first run only" in steps[0][2] and "4m00s (the budget)" in steps[2][2]
    assert re.search(r"expected in all: about \d+m\d+s", out)


def test_demo_plan_after_the_first_run_skips_the_build(tmp_path: Path, tiny, a2home) -> None:
    out = _plan(a2home, tmp_path)  # the session's home has the tiny model built
    assert "load the tiny model" in out and "first run only" not in out
