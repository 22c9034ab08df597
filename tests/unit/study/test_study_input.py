"""Malformed study files and ``study run`` flags: one clear error each, nothing written."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.cli import run_cli

from agent2rl.errors import UserError
from agent2rl.study.spec import load_study

GOOD = 'tasks = ["arith-lite"]\nagents = ["reference-sft"]\nbudget = "1m"\n'


def test_a_study_file_that_is_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "study.toml"
    path.write_bytes(b'name = "caf\xe9"\n' + GOOD.encode())
    with pytest.raises(UserError, match="not UTF-8"):
        load_study(path)
    with pytest.raises(UserError, match="is a directory"):
        load_study(tmp_path)


@pytest.mark.parametrize(
    ("text", "flags", "message"),
    [
        (b'name = "caf\xe9"\n' + GOOD.encode(), [], "not UTF-8"),
        (b'name = "x"\n' + GOOD.encode(), ["--retries", "-1"], "--retries -1"),
        (b'name = "x"\n' + GOOD.encode(), ["--max-concurrent", "0"], "--max-concurrent 0"),
    ],
)
def test_study_run_refuses_and_writes_nothing(
    tmp_path: Path, text: bytes, flags: list[str], message: str
) -> None:
    spec = tmp_path / "study.toml"
    spec.write_bytes(text)
    out = tmp_path / "out"
    r = run_cli(["study", "run", str(spec), "--out", str(out), *flags], timeout=120)
    text_out = r.stdout + r.stderr
    assert r.returncode != 0 and message in text_out, text_out
    assert "Traceback" not in text_out
    assert not out.exists()


def test_an_out_that_is_a_file_is_refused(tmp_path: Path) -> None:
    spec = tmp_path / "study.toml"
    spec.write_bytes(b'name = "x"\n' + GOOD.encode())
    out = tmp_path / "out"
    out.write_text("a file")
    r = run_cli(["study", "run", str(spec), "--out", str(out)], timeout=120)
    text_out = r.stdout + r.stderr
    assert r.returncode != 0 and "cannot use it as the study directory" in text_out, text_out
    assert "Traceback" not in text_out and out.read_text() == "a file"
