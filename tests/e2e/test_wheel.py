"""``pip install agent2rl`` from a built wheel: every file the package reads is inside it,
and the installed package (not this checkout) lists its tasks and agents and grades a model.

The wheel is built offline from a copy of the sources (no build isolation: setuptools comes
from the test's own environment) and installed with ``--no-deps`` into a fresh venv that
sees this environment's dependencies through a plain path entry: the checkout's editable
install is not on that path (its ``.pth`` files are not processed), so ``import agent2rl``
can only find the wheel's copy.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import time
import zipfile
from pathlib import Path

import pytest

import agent2rl

SRC = Path(agent2rl.__file__).resolve().parent
ROOT = SRC.parent.parent


def _package_files() -> list[str]:
    """Every non-Python file of the package (what package-data must carry), relative to
    src/: git's list when this is a checkout, else the tree minus caches."""
    git = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "src/agent2rl"], capture_output=True, text=True
    )
    names = git.stdout.split() if git.returncode == 0 else []
    if not names:
        names = [str(p.relative_to(ROOT)) for p in SRC.rglob("*") if p.is_file()]
    return sorted(
        n.removeprefix("src/")
        for n in names
        if "__pycache__" not in n and not n.endswith((".py", ".pyc"))
    )


@pytest.mark.slow
def test_wheel_carries_the_data_and_installs_into_a_fresh_venv(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, tree / name)
    shutil.copytree(
        ROOT / "src", tree / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info")
    )
    started = time.monotonic()
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(tmp_path / "dist"), str(tree)],
        check=True, timeout=300,
    )  # fmt: skip
    (wheel,) = (tmp_path / "dist").glob("agent2rl-*.whl")
    print(f"wheel {wheel.name}: {wheel.stat().st_size / 2**10:.0f} KiB, built in "
          f"{time.monotonic() - started:.1f}s")  # fmt: skip
    inside = set(zipfile.ZipFile(wheel).namelist())
    data = _package_files()
    assert data, "the package has data files (agent specs at least)"
    assert [n for n in data if n not in inside] == []
    for needed in ("agent2rl/agents/specs/reference-grpo.toml",
                   "agent2rl/agents/reference/grpo_train.py",
                   "agent2rl/tasks/alfworld/react_prompts.json"):  # fmt: skip
        assert needed in inside

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next((venv / "lib").glob("python3*/site-packages"))
    # This environment's dependencies as a plain path (no .pth processing: no editable agent2rl)
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    started = time.monotonic()
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install",
         "-q", "--no-deps", "--no-index", str(wheel)],
        check=True, timeout=300,
    )  # fmt: skip
    print(f"installed in {time.monotonic() - started:.1f}s")
    env = {**os.environ, "PATH": f"{venv / 'bin'}:{os.environ.get('PATH', '')}"}
    env.pop("PYTHONPATH", None)
    where = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import agent2rl; print(agent2rl.__file__)"],
        capture_output=True, text=True, check=True, cwd=tmp_path, env=env,
    ).stdout.strip()  # fmt: skip
    assert Path(where).is_relative_to(site), where

    def cli(*args: str) -> str:
        proc = subprocess.run(
            [str(venv / "bin" / "agent2rl"), *args],
            capture_output=True, text=True, cwd=tmp_path, env={**env, "COLUMNS": "200"},
            timeout=300,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return proc.stdout

    assert "arith-lite" in cli("tasks") and "alfworld-lite" in cli("tasks")
    assert "reference-grpo" in cli("agents")
    # the grader's worker runs from the wheel too (sys.executable is the venv's python)
    out = cli("eval", "--task", "arith-lite", "--model", "tiny", "--limit", "5",
              "--out", str(tmp_path / "ev"))  # fmt: skip
    assert "score" in out and (tmp_path / "ev" / "items.jsonl").is_file()
