"""The announce file a running ``agent2rl view`` writes, and the URL of a run's page on it.

``agent2rl view`` writes ``$AGENT2RL_HOME/viewer.json`` (url, root, pid, token; mode 0600)
while it serves (:mod:`agent2rl.viewer.serve`); ``agent2rl run`` reads it here to print the
URL of its run's page. A base module, so that the run (orchestration) needs nothing of the
viewer's package above it. The file names a live process only while that process is alive;
a stale one (a killed viewer) is ignored.
"""

from __future__ import annotations

from pathlib import Path

import psutil

from agent2rl.files import read_json
from agent2rl.settings import load_settings

ANNOUNCE = "viewer.json"


def announce_path() -> Path:
    return load_settings().home / ANNOUNCE


def run_page_url(run_dir: Path) -> str | None:
    """The URL of ``run_dir``'s page on a running ``agent2rl view`` whose directory holds
    it, with the viewer's token, or None (no viewer, a stale announce file, or a viewer of
    another directory)."""
    try:
        data = read_json(announce_path())
    except (OSError, ValueError):
        return None
    pid = data.get("pid") if isinstance(data, dict) else None
    if not isinstance(pid, int) or pid <= 0 or not psutil.pid_exists(pid):
        return None
    root = Path(str(data.get("root", "")))
    run_dir = Path(run_dir).resolve()
    if root != run_dir and root not in run_dir.parents:
        return None
    token = data.get("token")
    return f"{data.get('url')}/run/{run_dir.name}" + (f"?token={token}" if token else "")
