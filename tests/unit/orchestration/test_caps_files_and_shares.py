"""The caps the kernel does not enforce itself: the workspace's files (inodes) are counted
and capped like its bytes, and runs sharing a machine take shares that add up to no more
than one run alone. Real files, a real watchdog, a real process."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from agent2rl.orchestration.watchdog import Watchdog, workspace_usage
from agent2rl.sandbox.limits import (
    DEFAULT_MAX_PIDS,
    MIN_SHARED_PIDS,
    ResourceCaps,
    machine_caps,
)


def _workspace(tmp_path: Path, n_files: int) -> Path:
    ws = tmp_path / "workspace"
    (ws / "code" / "many").mkdir(parents=True)
    (ws / "data").mkdir()
    for i in range(50):  # the harness's read-only data: not the agent's, not counted
        (ws / "data" / f"d{i}").write_text("x")
    for i in range(n_files):
        (ws / "code" / "many" / f"f{i}").touch()  # empty: no bytes, one inode each
    return ws


def test_workspace_usage_counts_entries_and_stops_at_the_cap(tmp_path: Path) -> None:
    ws = _workspace(tmp_path, 300)
    _, entries = workspace_usage(ws, (ws / "data",))
    assert entries == 302  # code/, code/many/ and the 300 files
    _, partial = workspace_usage(ws, (ws / "data",), max_entries=10)
    assert 10 < partial < 302


def test_a_workspace_of_many_empty_files_is_stopped_by_its_file_cap(tmp_path: Path) -> None:
    ws = _workspace(tmp_path, 0)
    # A real agent process filling its workspace with empty files (no bytes to speak of).
    filler = subprocess.Popen(
        [sys.executable, "-c", "import pathlib, sys\n"
         "d = pathlib.Path(sys.argv[1])\n"
         "for i in range(400): (d / f'f{i}').touch()\n"
         "import time; time.sleep(60)\n", str(ws / "code" / "many")],
    )  # fmt: skip
    caps = ResourceCaps(disk_bytes=1 << 30, max_files=200)
    seen: list[tuple[str, str]] = []
    dog = Watchdog(
        ws, (ws / "data",), caps, None, filler.pid, lambda k, d: seen.append((k, d)), 0.05
    )
    try:
        dog.start()
        deadline = time.time() + 30
        while dog.breach is None and time.time() < deadline:
            time.sleep(0.05)
    finally:
        dog.stop()
        filler.kill()
        filler.wait()
    assert dog.breach == "disk_quota" and seen and seen[0][0] == "disk_quota"
    assert "more than 200 files" in dog.detail
    assert dog.peak_files > 200


def test_under_the_caps_nothing_is_found(tmp_path: Path) -> None:
    ws = _workspace(tmp_path, 20)
    dog = Watchdog(ws, (ws / "data",), ResourceCaps(disk_bytes=1 << 30, max_files=100), None,
                   os.getpid(), lambda k, d: None)  # fmt: skip
    assert dog.check() is None and dog.peak_files == 22


@pytest.mark.parametrize("k", [1, 2, 3, 8])
def test_shares_of_the_machine_add_up_to_one_run(tmp_path: Path, k: int) -> None:
    one = machine_caps(tmp_path)
    share = machine_caps(tmp_path, 1 / k)
    assert one.memory_bytes == int(psutil.virtual_memory().total * 0.75)
    assert share.memory_bytes is not None and k * share.memory_bytes <= one.memory_bytes
    # The free space moves a little between the two calls (other tests write): 1% slack.
    assert share.disk_bytes is not None and k * share.disk_bytes <= one.disk_bytes * 1.01
    if one.max_files is not None:
        assert share.max_files is not None and k * share.max_files <= one.max_files * 1.01
    assert one.max_pids == DEFAULT_MAX_PIDS
    assert share.max_pids == max(MIN_SHARED_PIDS, DEFAULT_MAX_PIDS // k) if k > 1 else True
    with pytest.raises(ValueError):
        machine_caps(tmp_path, 0)
