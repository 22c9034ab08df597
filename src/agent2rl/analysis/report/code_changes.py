"""The code an agent changed between submissions, read from the run's snapshot repository
(``record/code.git``, one commit per submission and periodically).

Only git's own output is used (``diff --numstat`` and ``diff``), with renames detected and
external diff drivers and text conversions off, so a file in the agent's code cannot make git
run anything. A snapshot id must look like a commit id before it reaches git.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Sequence
from pathlib import Path

from agent2rl.analysis.report.run_metrics import CodeChange
from agent2rl.grading.ledger import Submission
from agent2rl.recording.snapshot import EMPTY_TREE

# A snapshot id must look like a commit id; anything else is never handed to git, so a bad
# ledger value can neither be read as an option nor name an arbitrary ref.
_COMMIT_RE = re.compile(r"^[0-9a-fA-F]{4,64}$")


def _git(git_dir: Path, *args: str) -> str | None:
    """stdout of ``git --git-dir=<git_dir> <args>``, or None if git or the repo is unusable."""
    if not Path(git_dir).is_dir():
        return None
    try:
        proc = subprocess.run(
            ["git", f"--git-dir={git_dir}", *args],
            capture_output=True,
            check=False,
            timeout=120,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if proc.returncode != 0:
        return None
    return proc.stdout.decode("utf-8", errors="replace")


def _is_commit_id(value: str | None) -> bool:
    return value is not None and bool(_COMMIT_RE.match(value))


def diff_numstat(git_dir: Path, old: str, new: str) -> tuple[int, int] | None:
    """(lines added, lines removed) between two commits (or trees) of ``git_dir``.

    Binary files (``-`` in numstat) are ignored. Renames are detected (``-M``) so a moved file
    counts only its edits. Returns None when the repo or either id is missing or invalid.
    """
    if not (_is_commit_id(old) and _is_commit_id(new)):
        return None
    out = _git(git_dir, "diff", "--numstat", "-M", "--no-ext-diff", "--no-textconv", old, new)
    if out is None:
        return None
    added = removed = 0
    for line in out.splitlines():
        parts = line.split("\t", 2)
        if len(parts) < 3 or not (parts[0].isdigit() and parts[1].isdigit()):
            continue
        added += int(parts[0])
        removed += int(parts[1])
    return added, removed


def snapshot_diff(git_dir: Path, old: str, new: str) -> str | None:
    """The unified diff between two commits of ``git_dir`` as text (binary files summarised).

    Returns None when the repo or either id is missing or invalid; an empty string when the two
    snapshots hold the same code.
    """
    if not (_is_commit_id(old) and _is_commit_id(new)):
        return None
    return _git(git_dir, "diff", "-M", "--no-color", "--no-ext-diff", "--no-textconv", old, new)


def code_changes(git_dir: Path, submissions: Sequence[Submission]) -> list[CodeChange]:
    """Lines added/removed by each submission relative to the previous snapshotted submission.

    The first snapshot is compared with the empty tree. A submission without a snapshot (or
    whose snapshot git cannot read) gets ``added``/``removed`` None and does not become the next
    comparison base. Each entry: ``id``, ``snapshot``, ``base`` (the id compared against, or
    None), ``added``, ``removed``.
    """
    out: list[CodeChange] = []
    base = EMPTY_TREE
    for sub in submissions:
        stat = diff_numstat(git_dir, base, sub.snapshot) if sub.snapshot else None
        added, removed = stat if stat is not None else (None, None)
        out.append(
            CodeChange(
                id=sub.id,
                snapshot=sub.snapshot,
                base=base if stat is not None else None,
                added=added,
                removed=removed,
            )
        )
        if stat is not None:
            base = sub.snapshot  # type: ignore[assignment]  # stat is None without a snapshot
    return out
