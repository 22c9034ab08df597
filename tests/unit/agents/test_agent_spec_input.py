"""Malformed agent spec files: one clear error each, and through the CLI nothing written
(a name must never put a run directory outside ``--runs-dir``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.cli import run_cli

from agent2rl.agents.spec import load_spec
from agent2rl.errors import UserError

GOOD = 'description = "d"\ncommand = ["{python}", "x.py"]\n'


def _spec(tmp_path: Path, text: str | bytes) -> Path:
    path = tmp_path / "agent.toml"
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return path


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (b'name = "caf\xe9"\n' + GOOD.encode(), "not UTF-8"),
        ("name = [1]\n" + GOOD, "name must be a string"),
        ('name = "../../escape"\n' + GOOD, "letters, digits"),
        ('name = "a/b"\n' + GOOD, "letters, digits"),
        ('name = ".."\n' + GOOD, "letters, digits"),
        ('name = "a..b"\n' + GOOD, "without '..'"),
        ('name = ""\n' + GOOD, "letters, digits"),
        ('name = "sp ace"\n' + GOOD, "letters, digits"),
        ('name = "x"\ndescription = 3\ncommand = ["a"]\n', "description must be a string"),
        ('name = "x"\n' + GOOD + "files = [1]\n", "files must be a list of strings"),
        ('name = "x"\n' + GOOD + 'files = "a.py"\n', "files must be a list of strings"),
        ('name = "x"\n' + GOOD + "install = true\n", "install must be a string"),
        ('name = "x"\n' + GOOD + "[env]\nA = [1]\n", r"\[env\] must be a table of strings"),
    ],
)
def test_a_malformed_spec_is_one_user_error(tmp_path: Path, text: bytes, message: str) -> None:
    with pytest.raises(UserError, match=message):
        load_spec(_spec(tmp_path, text))


def test_plain_names_still_load(tmp_path: Path) -> None:
    for name in ("a", "my-agent_2.1", "A9"):
        assert load_spec(_spec(tmp_path, f'name = "{name}"\n' + GOOD)).name == name


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (b'name = "caf\xe9"\n' + GOOD.encode(), "not UTF-8"),
        ('name = "../../escape"\n' + GOOD, "letters, digits"),
    ],
)
def test_the_cli_refuses_a_bad_spec_and_writes_nothing(
    tmp_path: Path, text: bytes, message: str
) -> None:
    runs = tmp_path / "deep" / "runs"
    r = run_cli(
        ["run", "--task", "arith-lite", "--agent", str(_spec(tmp_path, text))]
        + ["--model", "tiny", "--budget", "30s", "--runs-dir", str(runs)],
        timeout=120,
    )
    out = r.stdout + r.stderr
    assert r.returncode != 0 and message in out and "Traceback" not in out, out
    assert not runs.exists() and not (tmp_path / "escape").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["agent.toml"]
