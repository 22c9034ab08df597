"""A study directory on a network filesystem is recognised (SQLite's WAL is unsafe across
hosts there, and ``study run`` says so), from the mount table's deepest mount."""

from __future__ import annotations

from collections import namedtuple
from pathlib import Path

from agent2rl.study.executor import network_filesystem

Part = namedtuple("Part", "mountpoint fstype")


def test_the_deepest_mount_decides() -> None:
    parts = [Part("/", "ext4"), Part("/shared", "nfs4"), Part("/shared/local", "xfs")]
    assert network_filesystem(Path("/shared/studies/s1"), parts) == "nfs4"
    assert network_filesystem(Path("/shared"), parts) == "nfs4"
    assert network_filesystem(Path("/shared/local/s1"), parts) is None
    assert network_filesystem(Path("/home/me/s1"), parts) is None
    assert network_filesystem(Path("/sharedx/s1"), parts) is None  # a prefix is not a parent


def test_this_machines_temp_dir_reads_without_error(tmp_path: Path) -> None:
    assert network_filesystem(tmp_path) in (None, *("nfs", "nfs4", "cifs", "9p", "lustre"))
