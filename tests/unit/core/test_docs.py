"""The README and the documentation site stay short, buildable and true.

- ``mkdocs build --strict`` builds the site (README.md is its home page), so a broken link or
  anchor in the README or any page under ``docs/`` fails the suite (and CI, which runs it).
- The README stays a short newcomer's page; the reference manual lives in ``docs/``.
- Every command in the README's shell blocks is checked: ``make`` targets exist, each
  ``agent2rl`` line is parsed by the real CLI (its subcommand and options exist and their
  values parse), the read-only ones (``tasks``, ``agents``, ``doctor``, ``compare``) are run,
  the ``pip`` extras exist in pyproject.toml and the ``npm`` install is the one the agent's
  spec declares. A new kind of command fails the test until it is checked here too.
- The figures page renders benchmark JSON files, provenance included, at build time.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
README = ROOT / "README.md"
#: the issue asks for a README of about 200 lines
MAX_README_LINES = 220
#: commands that only read: run for real (in an empty directory), with the exit status and
#: output expected there (`compare` with no runs yet says so, one line, status 2)
READ_ONLY = {
    ("tasks",): (0, "arith-lite"),
    ("agents",): (0, "reference-grpo"),
    ("doctor",): (0, "bubblewrap"),
    ("agents", "doctor"): (0, "codex"),
    ("compare",): (2, "no finished runs recorded"),
}


def _have_mkdocs() -> bool:
    return all(importlib.util.find_spec(m) is not None for m in ("mkdocs", "material"))


needs_mkdocs = pytest.mark.skipif(
    not _have_mkdocs(),
    reason="mkdocs-material is not installed: pip install -e '.[docs]' (make setup installs it)",
)


@needs_mkdocs
def test_docs_site_builds_strict(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    site = tmp_path / "site"
    # the README is the home page; the security page holds the red-team table
    assert "Quickstart on a laptop" in (site / "index.html").read_text()
    assert "Red team" in (site / "security" / "index.html").read_text()


def test_readme_is_short() -> None:
    n = len(README.read_text().splitlines())
    assert n <= MAX_README_LINES, f"README.md has {n} lines: move reference text to docs/"


def _readme_commands() -> list[str]:
    """Each command of the README's ```bash blocks, continuations joined, comments dropped."""
    cmds, block, fence = [], [], None
    for line in README.read_text().splitlines():
        if fence is None:
            if line.startswith("```bash"):
                fence, block = "bash", []
            elif line.startswith("```"):
                fence = "other"
            continue
        if line.startswith("```"):
            if fence == "bash":
                text = "\n".join(block).replace("\\\n", " ")
                for cmd in text.splitlines():
                    cmd = re.sub(r"\s+#.*$", "", cmd).strip()
                    if cmd and not cmd.startswith("#"):
                        cmds.append(cmd)
            fence = None
            continue
        block.append(line)
    return cmds


def _make_targets() -> set[str]:
    text = (ROOT / "Makefile").read_text()
    return set(re.findall(r"^([A-Za-z][\w-]*):", text, flags=re.M))


def _agent2rl_argv(cmd: str) -> list[str] | None:
    words = shlex.split(cmd)
    if words and words[0] in (".venv/bin/agent2rl", "agent2rl"):
        return words[1:]
    return None


def test_readme_has_the_two_commands() -> None:
    cmds = _readme_commands()
    assert "make demo" in cmds and "make test" in cmds


def test_every_readme_command_is_checked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import typer
    from typer.testing import CliRunner

    from agent2rl.cli import app

    group = typer.main.get_command(app)
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    extras = set(pyproject["project"]["optional-dependencies"])
    spec_installs = {
        tomllib.loads(p.read_text()).get("install")
        for p in (ROOT / "src" / "agent2rl" / "agents" / "specs").glob("*.toml")
    }
    monkeypatch.chdir(tmp_path)  # `compare` reads ./runs: an empty directory here
    monkeypatch.setenv("AGENT2RL_HOME", str(tmp_path / "home"))
    unchecked: list[str] = []
    parsed: list[tuple[str, ...]] = []
    ran: list[tuple[str, ...]] = []
    for cmd in _readme_commands():
        argv = _agent2rl_argv(cmd)
        if cmd.startswith("make "):
            for target in cmd.split()[1:]:
                assert target in _make_targets(), f"README: no make target {target!r}"
        elif argv is not None:
            # resolve the subcommand chain, then let click parse the options as a run would
            # (typer vendors click: a group is what has subcommands, not a click.Group)
            cmd_obj, path, rest = group, [], list(argv)
            while hasattr(cmd_obj, "list_commands") and rest and not rest[0].startswith("-"):
                sub = cmd_obj.get_command(cmd_obj.context_class(cmd_obj), rest[0])
                assert sub is not None, f"README: `{cmd}`: no subcommand {rest[0]!r}"
                cmd_obj, path, rest = sub, [*path, rest.pop(0)], rest
            assert path, f"README: `{cmd}`: no command"
            ctx = cmd_obj.make_context(" ".join(path), list(rest))  # raises on a bad option
            ctx.close()
            parsed.append(tuple(path))
            if tuple(path) in READ_ONLY and not rest:
                res = CliRunner().invoke(app, argv)
                status, expected = READ_ONLY[tuple(path)]
                assert res.exit_code == status and expected in res.output, (
                    f"README: `{cmd}` exited {res.exit_code}:\n{res.output[-2000:]}"
                )
                ran.append(tuple(path))
        elif m := re.match(r"^\.venv/bin/pip install -e '\.\[(\w+)\]'$", cmd):
            assert m.group(1) in extras, f"README: no extra {m.group(1)!r} in pyproject.toml"
        elif cmd.startswith("npm install -g "):
            assert cmd in spec_installs, f"README: `{cmd}` is no agent spec's install command"
        elif cmd.startswith("export ") or cmd == ".venv/bin/mkdocs serve":
            pass  # a key the reader supplies; the site itself is built by the test above
        else:
            unchecked.append(cmd)
    assert not unchecked, f"README commands no test checks (add them here): {unchecked}"
    assert ("run",) in parsed and ("demo",) not in ran  # the README's real-agent command
    assert set(ran) >= {("tasks",), ("agents",), ("doctor",), ("agents", "doctor")}, ran


def _hooks():
    spec = importlib.util.spec_from_file_location("docs_site_hooks", ROOT / "docs/hooks/site.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@needs_mkdocs
def test_figures_render_from_json_with_provenance(tmp_path: Path) -> None:
    hooks = _hooks()
    assert "No benchmark" in hooks.render_figures(tmp_path)
    (tmp_path / "b.json").write_text(
        json.dumps(
            {
                "benchmark": "grading_latency",
                "command": "python benchmarks/grading_latency.py",
                "commit": "abc123",
                "worktree": {"dirty": ["src/x.py"]},
                "date": "2026-11-25T14:00:00Z",
                "machine": {"host": "vm", "cores": 2, "cpu": "x86_64", "gpus": ["H200, 1 MiB"]},
                "polls": {"10": {"p50_ms": 55.5, "note": "a|b"}},
                "sizes": [1, 2],
            }
        )
    )
    md = hooks.render_figures(tmp_path)
    assert "### `grading_latency`" in md
    assert "- command: `python benchmarks/grading_latency.py`" in md
    assert "- commit: `abc123`" in md and "- date: `2026-11-25T14:00:00Z`" in md
    assert "- worktree: `dirty: src/x.py`" in md  # an --allow-dirty run says so
    assert "- machine: `vm (2 cores, x86_64, GPU H200, 1 MiB)" in md
    assert "- split: not recorded" in md and "- repeats: not recorded" in md
    assert "| `polls.10.p50_ms` | 55.5 |" in md
    assert "| `polls.10.note` | a\\|b |" in md and "| `sizes` | [1, 2] |" in md
    (tmp_path / "c.json").write_text("{not json")
    with pytest.raises(ValueError, match=r"c\.json: not valid JSON"):
        hooks.render_figures(tmp_path)


def test_readme_quotes_the_demo_plan_as_printed(monkeypatch: pytest.MonkeyPatch) -> None:
    """The plan `make demo` prints first (`agent2rl demo` up to the run itself, on a machine
    where the tiny model is already built) is in the README line for line."""
    from typer.testing import CliRunner

    from agent2rl import cli

    monkeypatch.setattr(cli, "_demo_first_time", lambda: False)
    monkeypatch.setattr(cli, "_execute", lambda req: None)  # stop before the run itself
    res = CliRunner().invoke(cli.app, ["demo"])
    assert res.exit_code == 0, res.output
    plan = [line.rstrip() for line in res.output.splitlines() if line.strip()]
    assert len(plan) >= 5, plan
    readme = README.read_text().splitlines()
    missing = [line for line in plan if line not in readme]
    assert not missing, f"README's quoted demo plan differs from what the demo prints: {missing}"
