"""``agent2rl eval``: a model graded without an agent, through the real CLI and the grader's
own worker (a real child process, the real per-device lock, the real task store)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from agent2rl.files import read_jsonl
from agent2rl.statistics import bootstrap_ci
from tests.support.cli import run_cli

_SCORE = re.compile(
    r"on the (\w+) split: score ([\d.]+) \(95% CI ([\d.]+) \.\. ([\d.]+)\), (\d+) items"
)


def _eval(tmp_path: Path, *extra: str) -> tuple[re.Match, Path]:
    out = tmp_path / "ev"
    proc = run_cli(
        ["eval", "--task", "arith-lite", "--model", "tiny", "--limit", "20", "--out", str(out)]
        + list(extra),
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    match = _SCORE.search(proc.stdout.replace("\n", " "))
    assert match, proc.stdout
    return match, out


def test_eval_prints_the_mean_of_the_written_items(tmp_path: Path, arith) -> None:
    match, out = _eval(tmp_path)
    items = read_jsonl(out / "items.jsonl")
    assert len(items) == 20 == int(match.group(5))
    mean = 100.0 * sum(i["score"] for i in items) / len(items)
    assert float(match.group(2)) == pytest.approx(mean, abs=5e-5)
    lo, hi = bootstrap_ci([100.0 * i["score"] for i in items])
    assert (float(match.group(3)), float(match.group(4))) == (
        pytest.approx(lo, abs=0.005),
        pytest.approx(hi, abs=0.005),
    )
    report = json.loads((out / "eval.json").read_text())
    assert report["split"] == "private" and report["n_items"] == 20
    assert json.loads((out / "result.json").read_text())["score"] == pytest.approx(mean)
    # the private split's first items, as a run's grader sees them
    task, prepared = arith
    assert [i["id"] for i in items] == [s.id for s in task.samples(prepared, "private", 20)]


def test_eval_validation_split_grades_the_validation_items(tmp_path: Path, arith) -> None:
    match, out = _eval(tmp_path, "--split", "validation")
    assert match.group(1) == "validation"
    task, prepared = arith
    ids = [i["id"] for i in read_jsonl(out / "items.jsonl")]
    assert ids == [s.id for s in task.samples(prepared, "validation", 20)]
    assert set(ids).isdisjoint(s.id for s in task.samples(prepared, "private"))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--task", "arith-lite", "--model", "tiny", "--split", "train"], "unknown --split"),
        (["--task", "arith-lite", "--model", "tiny", "--limit", "0"], "--limit 0"),
        (["--task", "nope", "--model", "tiny"], "nope"),
        (["--task", "arith-lite", "--model", "/no/such/dir"], "unknown model"),
        (["--task", "arith-lite", "--model", "tiny", "--backend", "x"], "unknown backend"),
    ],
)
def test_eval_bad_flags_are_one_clear_error(args: list[str], message: str) -> None:
    proc = run_cli(["eval", *args], timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert message in proc.stderr and "Traceback" not in proc.stderr
    assert proc.stderr.strip().startswith("error:")
