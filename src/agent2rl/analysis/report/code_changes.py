"""The code an agent changed between submissions, read from the run's snapshot repository
(``record/code.git``, one commit per submission and periodically) through its one reader,
:class:`~agent2rl.recording.snapshot.SnapshotReader` (git's own output only, renames
detected, no external diff drivers or text conversions, ids checked before they reach git).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from agent2rl.analysis.report.run_metrics import CodeChange
from agent2rl.grading.ledger import Submission
from agent2rl.recording.snapshot import EMPTY_TREE, SnapshotReader


def diff_numstat(git_dir: Path, old: str, new: str) -> tuple[int, int] | None:
    """(lines added, lines removed) between two commits (or trees) of ``git_dir``
    (:meth:`SnapshotReader.numstat`); None when the repo or either id is missing or invalid."""
    return SnapshotReader(git_dir).numstat(old, new)


def snapshot_diff(git_dir: Path, old: str, new: str) -> str | None:
    """The unified diff between two commits of ``git_dir`` (:meth:`SnapshotReader.diff`);
    None when the repo or either id is missing or invalid, "" for the same code."""
    return SnapshotReader(git_dir).diff(old, new)


def code_changes(git: SnapshotReader, submissions: Sequence[Submission]) -> list[CodeChange]:
    """Lines added/removed by each submission relative to the previous snapshotted submission.

    The first snapshot is compared with the empty tree. A submission without a snapshot (or
    whose snapshot git cannot read) gets ``added``/``removed`` None and does not become the next
    comparison base.
    """
    out: list[CodeChange] = []
    base = EMPTY_TREE
    for sub in submissions:
        stat = git.numstat(base, sub.snapshot) if sub.snapshot else None
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
