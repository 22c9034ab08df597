"""``agent2rl run --instructions reference`` end to end through the real CLI (issue #39 item
5): an agent named ``claude-code`` starts as the reference's ``claude/start.sh`` starts
Claude Code: under ``timeout 36000`` (here capped by the budget), with
``BASH_MAX_TIMEOUT_MS``, ``AGENTS.md`` and ``timer.sh`` in the workspace and the reference's
prompt in ``prompt.md``. The agent is a Python script standing in for the CLI (the real one
needs a provider); it reports what it was given and exits."""

from __future__ import annotations

import pytest
from support.cli import only_run, run_cli

PROBE = (
    "import os, pathlib; "
    "parent = pathlib.Path(f'/proc/{os.getppid()}/cmdline').read_bytes().split(b'\\0'); "
    "print('PARENT', parent[0].decode(), parent[1].decode()); "
    "print('BASH_MAX', os.environ.get('BASH_MAX_TIMEOUT_MS')); "
    "print('AGENTS', pathlib.Path('AGENTS.md').is_file(), pathlib.Path('timer.sh').is_file())"
)


@pytest.mark.slow
def test_claude_code_starts_as_the_reference_starts_it(tmp_path, arith) -> None:
    spec = tmp_path / "claude-code.toml"
    spec.write_text(
        'name = "claude-code"\ndescription = "stands in for Claude Code"\n'
        f'command = ["{{python}}", "-c", {PROBE!r}]\n'
    )
    runs = tmp_path / "runs"
    args = ["run", "--task", "arith-lite", "--agent", str(spec), "--budget", "60s",
            "--runs-dir", str(runs), "--sandbox", "none"]  # fmt: skip
    r = run_cli([*args, "--instructions", "reference"])
    assert r.returncode == 0, r.stdout + r.stderr
    paths = only_run(runs)
    log = paths.agent_log.read_text()
    assert "PARENT timeout 60" in log, log[-2000:]  # the budget caps the 36,000 s
    assert "BASH_MAX 36000000" in log and "AGENTS True True" in log
    prompt = (paths.workspace / "prompt.md").read_text()
    assert prompt.startswith("You are an AI researcher doing RL post-training.")
    assert "You have 60 seconds total. Run `bash timer.sh`" in prompt
    assert "summary.md" in (paths.workspace / "AGENTS.md").read_text()
    # the neutral instructions leave the agent as it is
    r = run_cli([*args[:-4], "--runs-dir", str(tmp_path / "neutral"), "--sandbox", "none"])
    assert r.returncode == 0, r.stdout + r.stderr
    neutral = only_run(tmp_path / "neutral")
    assert "BASH_MAX None" in neutral.agent_log.read_text()
    assert not (neutral.workspace / "AGENTS.md").exists()
