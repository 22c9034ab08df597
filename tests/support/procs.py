"""Find processes by what they run, from /proc (no mocks: the real process table)."""

from __future__ import annotations

import os
from pathlib import Path


def processes_mentioning(needle: str) -> list[tuple[int, str]]:
    """Live (non-zombie) processes whose command line or working directory contains
    ``needle``, except this test process."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            if stat.rsplit(")", 1)[1].split()[0] == "Z":
                continue
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            try:
                cwd = os.readlink(f"/proc/{pid}/cwd")
            except OSError:
                cwd = ""
        except (OSError, IndexError):
            continue
        if needle in cmd or needle in cwd:
            found.append((int(pid), cmd))
    return found
