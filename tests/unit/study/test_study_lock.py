"""Two ``study run`` drivers on one study directory: the second is refused before it writes
anything, naming the first (its pid); the lock goes with its holder."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from support.cli import run_cli

from agent2rl.study.executor import LOCK_FILE, study_lock

_HOLD = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from agent2rl.study.executor import study_lock
    with study_lock(Path(sys.argv[1])):
        print("held", flush=True)
        sys.stdin.readline()
    """
)


def test_a_second_study_run_on_one_directory_is_refused(tmp_path: Path) -> None:
    spec = tmp_path / "study.toml"
    spec.write_text(
        'name = "x"\ntasks = ["arith-lite"]\nagents = ["reference-sft"]\nbudget = "1m"\n'
    )
    out = tmp_path / "study"
    out.mkdir()
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD, str(out)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        r = run_cli(["study", "run", str(spec), "--out", str(out)], timeout=120)
        assert r.returncode != 0
        text = r.stdout + r.stderr
        assert "another `agent2rl study run` is using" in text and f"pid {holder.pid}" in text
        assert "Traceback" not in text
        # Nothing written: no state database, no copy of the study file, no attempts.
        assert sorted(p.name for p in out.iterdir()) == [LOCK_FILE]
    finally:
        holder.communicate("\n", timeout=30)
    # The holder is gone: its lock went with it.
    with study_lock(out):
        pass
