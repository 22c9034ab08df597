"""CodeRecorder / PeriodicSnapshotter against a real git binary and real files."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from agent2rl.analysis.report.code_changes import diff_numstat, snapshot_diff
from agent2rl.recording import CodeRecorder, PeriodicSnapshotter
from agent2rl.recording.snapshot import EMPTY_TREE


def _git(git_dir: Path, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    out = subprocess.run(
        ["git", "--git-dir", str(git_dir), *args],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    return out.stdout


def _files(git_dir: Path, commit: str) -> set[str]:
    return set(_git(git_dir, "ls-tree", "-r", "--name-only", commit).splitlines())


def _n_commits(git_dir: Path) -> int:
    return int(_git(git_dir, "rev-list", "--count", "HEAD").strip())


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    ws = tmp_path / "workspace"
    (ws / "code" / "pkg").mkdir(parents=True)
    (ws / "code" / "train.py").write_text("print('train')\n")
    (ws / "code" / "pkg" / "util.py").write_text("a = 1\nb = 2\n")
    (ws / "notes.md").write_text("# notes\n")
    return ws


@pytest.fixture
def rec(tmp_path: Path, ws: Path) -> CodeRecorder:
    return CodeRecorder(tmp_path / "record" / "code.git", ws)


def test_contents_include_code_and_exclude_the_rest(rec: CodeRecorder, ws: Path) -> None:
    for d in ("output/ckpt", "data", "models/base", "code/__pycache__", ".venv/lib", ".cache"):
        (ws / d).mkdir(parents=True, exist_ok=True)
    (ws / "output" / "ckpt" / "config.json").write_text("{}")
    (ws / "data" / "train.jsonl").write_text("{}\n")
    (ws / "models" / "base" / "config.json").write_text("{}")
    (ws / "code" / "__pycache__" / "train.cpython-311.pyc").write_text("x")
    (ws / ".venv" / "lib" / "site.py").write_text("x")
    (ws / ".cache" / "c.txt").write_text("x")
    (ws / "code" / "big.txt").write_text("x" * (512 * 1024 + 1))
    (ws / "code" / "blob.bin").write_bytes(b"abc\0def")
    (ws / "code" / "run.sh").write_text("#!/bin/sh\n")
    (ws / "code" / "run.sh").chmod(0o755)
    (ws / "code" / "link.py").symlink_to("train.py")
    # The agent's own repo: must be ignored and left untouched.
    subprocess.run(["git", "init", "-q", str(ws / "code")], check=True)
    agent_git_before = sorted(p.name for p in (ws / "code" / ".git").iterdir())
    # Nested "data" is only excluded at the top level.
    (ws / "code" / "data").mkdir()
    (ws / "code" / "data" / "gen.py").write_text("pass\n")

    commit = rec.snapshot("first")

    assert _files(rec.git_dir, commit) == {
        "notes.md",
        "code/train.py",
        "code/pkg/util.py",
        "code/run.sh",
        "code/link.py",
        "code/data/gen.py",
    }
    tree = _git(rec.git_dir, "ls-tree", "-r", commit)
    assert "100755 blob" in next(line for line in tree.splitlines() if "run.sh" in line)
    assert "120000 blob" in next(line for line in tree.splitlines() if "link.py" in line)
    assert sorted(p.name for p in (ws / "code" / ".git").iterdir()) == agent_git_before
    assert rec.head() == commit


def test_first_snapshot_commits_even_an_empty_tree(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    rec = CodeRecorder(tmp_path / "code.git", tmp_path / "empty")
    assert rec.head() is None
    commit = rec.snapshot("first")
    assert rec.head() == commit
    assert _files(rec.git_dir, commit) == set()
    assert rec.snapshot("again") == commit


def test_no_commit_when_unchanged_new_commit_after_edit(rec: CodeRecorder, ws: Path) -> None:
    first = rec.snapshot("s1")
    assert rec.snapshot("s2") == first
    assert _n_commits(rec.git_dir) == 1

    # Touching output/ (excluded) changes nothing either.
    (ws / "output").mkdir()
    (ws / "output" / "model.safetensors").write_text("weights")
    assert rec.snapshot("s3") == first

    (ws / "code" / "train.py").write_text("print('train v2')\n")
    second = rec.snapshot("s4")
    assert second != first
    assert _n_commits(rec.git_dir) == 2
    assert _git(rec.git_dir, "log", "-1", "--format=%s%n%an", second).split() == [
        "s4",
        "agent2rl",
        "recorder",
    ]
    assert "+print('train v2')" in snapshot_diff(rec.git_dir, first, second)


def test_deleted_file_disappears(rec: CodeRecorder, ws: Path) -> None:
    rec.snapshot("s1")
    (ws / "code" / "pkg" / "util.py").unlink()
    (ws / "code" / "pkg").rmdir()
    commit = rec.snapshot("s2")
    assert "code/pkg/util.py" not in _files(rec.git_dir, commit)
    assert "code/train.py" in _files(rec.git_dir, commit)


def test_snapshots_diff_as_the_report_reads_them(rec: CodeRecorder, ws: Path) -> None:
    first = rec.snapshot("s1")
    # util.py: 2 lines -> change one, add two; notes.md deleted (1 line); new.py 3 lines.
    (ws / "code" / "pkg" / "util.py").write_text("a = 1\nb = 3\nc = 4\nd = 5\n")
    (ws / "notes.md").unlink()
    (ws / "code" / "new.py").write_text("1\n2\n3\n")
    second = rec.snapshot("s2")
    assert diff_numstat(rec.git_dir, first, second) == (1 + 2 + 3, 1 + 1)
    # From the empty tree: every line of the first snapshot is an addition.
    assert diff_numstat(rec.git_dir, EMPTY_TREE, first) == (1 + 2 + 1, 0)
    assert "new file mode" in snapshot_diff(rec.git_dir, EMPTY_TREE, first)
    assert diff_numstat(rec.git_dir, second, second) == (0, 0)


def test_odd_files_are_skipped_not_fatal(rec: CodeRecorder, ws: Path) -> None:
    os.mkfifo(ws / "code" / "pipe")  # opening it for reading would block forever
    (ws / "code" / "dangling").symlink_to("/nonexistent/target")
    bad_name = os.fsencode(ws / "code") + b"/caf\xe9.py"
    with open(bad_name, "wb") as fh:
        fh.write(b"pass\n")
    # git itself refuses a symlinked .gitmodules: exercises the one-by-one fallback.
    (ws / ".gitmodules").symlink_to("code/train.py")
    (ws / "code" / ".GIT").mkdir()
    (ws / "code" / ".GIT" / "config").write_text("x")
    commit = rec.snapshot("odd")
    files = _files(rec.git_dir, commit)
    assert "code/train.py" in files
    assert "code/dangling" in files  # stored as a symlink, never followed
    assert "code/pipe" not in files
    assert ".gitmodules" not in files
    assert not any(f.startswith("code/.GIT") for f in files)
    assert len([f for f in files if "caf" in f]) == 0


def test_missing_workspace_gives_empty_snapshot(tmp_path: Path) -> None:
    rec = CodeRecorder(tmp_path / "code.git", tmp_path / "not-there")
    assert _files(rec.git_dir, rec.snapshot("first")) == set()


_WORKER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from agent2rl.recording import CodeRecorder

    git_dir, ws, tag = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
    rec = CodeRecorder(git_dir, ws)
    for i in range(8):
        (ws / "code" / f"{tag}.py").write_text(f"i = {i}\\n")
        rec.snapshot(f"{tag} {i}")
    print(rec.snapshot(f"{tag} final"))
    """
)


def test_concurrent_snapshots_from_two_processes(rec: CodeRecorder, ws: Path) -> None:
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _WORKER, str(rec.git_dir), str(ws), tag],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for tag in ("a", "b")
    ]
    results = [p.communicate(timeout=60) for p in procs]
    for p, (out, err) in zip(procs, results, strict=True):
        assert p.returncode == 0, err
        assert len(out.strip()) == 40
    _git(rec.git_dir, "fsck", "--strict", "--no-dangling")
    # Linear history (every commit has at most one parent) ending in both workers' last files.
    parents = _git(rec.git_dir, "rev-list", "--parents", "HEAD").splitlines()
    assert all(len(line.split()) <= 2 for line in parents)
    head = rec.head()
    assert head is not None
    assert _git(rec.git_dir, "show", f"{head}:code/a.py") == "i = 7\n"
    assert _git(rec.git_dir, "show", f"{head}:code/b.py") == "i = 7\n"
    # The final snapshot of each process needed no new commit beyond the other's, so HEAD is one.
    assert head in {out.strip() for out, _ in results}


def test_periodic_snapshotter(rec: CodeRecorder, ws: Path) -> None:
    ticker = PeriodicSnapshotter(rec, interval_s=0.1)
    ticker.start()
    deadline = time.monotonic() + 10
    while rec.head() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert rec.head() is not None
    time.sleep(0.3)  # several ticks with no change: still one commit
    assert _n_commits(rec.git_dir) == 1
    (ws / "code" / "late.py").write_text("x = 1\n")
    final = ticker.stop()
    assert final == rec.head()
    assert "code/late.py" in _files(rec.git_dir, final)
    assert _n_commits(rec.git_dir) == 2
