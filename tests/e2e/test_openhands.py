"""A whole run of the real OpenHands CLI (``openhands --headless --json``, openhands 1.x on
Python 3.12) driven by the scripted fake provider, the production chain as in
``test_llm_agents.py``: ``agent2rl run`` starts the metering proxy with the host's real key and
the fake provider as its upstream, launches ``openhands`` in the sandbox with ``LLM_MODEL``,
``LLM_BASE_URL`` and ``LLM_API_KEY`` pointing at the proxy, and the script makes the agent write
``code/train.py`` (real optimizer steps on the tiny model, a save and an HTTP submission), run
it, dump its environment and finish.

Skipped unless ``openhands`` is on the PATH (``uv tool install openhands --python 3.12``, or
``pip install openhands`` into any Python 3.12 environment and its ``bin/openhands`` on the
PATH). openhands-ai 0.9.x, the last release installable on Python 3.11, cannot stand in: its
only Docker-free runtimes are cloud services.

In the bwrap sandbox the CLI needs its own Python installation (a venv's base interpreter, the
prefix its shebang resolves to) bound read-only, and a /tmp the agent's uid can write: its
terminal tool runs commands in tmux, whose socket goes in /tmp/tmux-UID whatever TMPDIR says.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support import FIXTURES
from support.cli import only_run, run_cli
from support.fake_provider import ToolCall, Turn, start_fake_provider

from agent2rl.grading.ledger import Ledger
from agent2rl.rundir import RunInfo
from agent2rl.sandbox import bwrap_available

TRAIN_PY = (FIXTURES / "llm_scripts" / "train.py").read_text()
# The harness's interpreter first (the agent's `python` must have torch), then the host PATH,
# where `openhands` lives.
HOST_PATH = f"{Path(sys.executable).parent}:{os.environ.get('PATH', '/usr/bin:/bin')}"
HOST_SECRET = "s3cret"
_KEY_VARS = (
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_BASE_URL",
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "GEMINI_API_KEY",
    "GOOGLE_API_KEY",
    "AGENT2RL_DRIVER_API_KEY",
    "LLM_MODEL",
    "LLM_BASE_URL",
    "LLM_API_KEY",
)


def _terminal(text: str, command: str, timeout_s: float | None = None) -> Turn:
    """A call of OpenHands' ``terminal`` tool. Its schema requires ``security_risk`` (a call
    without it comes back as an AgentErrorEvent); ``timeout`` keeps a quiet command (training
    piped through tail) from being paused after 30 s without output."""
    args: dict[str, object] = {"command": command, "security_risk": "LOW"}
    if timeout_s is not None:
        args["timeout"] = timeout_s
    return Turn(text=text, tool_calls=[ToolCall("terminal", args)])


@pytest.mark.slow
@pytest.mark.skipif(
    shutil.which("openhands", path=HOST_PATH) is None,
    reason="OpenHands is not installed (uv tool install openhands --python 3.12)",
)
def test_openhands_trains_and_submits_through_the_proxy(tmp_path: Path) -> None:
    turns = [
        _terminal(
            "I will write a small SFT script.",
            f"mkdir -p code && cat > code/train.py <<'PYEOF'\n{TRAIN_PY}PYEOF\necho written",
        ),
        _terminal("Now I train and submit.", "python code/train.py 2>&1 | tail -n 5", 240),
        _terminal("Recording the environment.", "env > code/env.txt && wc -l code/env.txt"),
        Turn(text="Finished.", tool_calls=[ToolCall("finish", {"message": "Trained, submitted."})]),
    ]
    real_key = f"sk-real-{secrets.token_hex(8)}"
    fake = start_fake_provider({"turns": turns, "final_text": "All done."}, api_key=real_key)
    env = {k: v for k, v in os.environ.items() if k not in _KEY_VARS}
    env.update(
        PATH=HOST_PATH,
        HOST_SECRET=HOST_SECRET,
        OPENAI_API_KEY=real_key,
        OPENAI_BASE_URL=fake.openai_base_url,
    )
    runs = tmp_path / "runs"
    try:
        r = run_cli(
            ["run", "--task", "arith-lite", "--agent", "openhands", "--driver", "gpt-4.1-mini"]
            + ["--mode", "sft-only", "--model", "tiny", "--budget", "240s"]
            + ["--sandbox", "auto", "--runs-dir", str(runs)],
            env=env,
        )
    finally:
        fake.stop()
    assert r.returncode == 0, r.stdout + r.stderr
    paths = only_run(runs)
    log = paths.agent_log.read_text(errors="replace")
    info = RunInfo.load(paths)
    assert info.status == "completed", (info.status, info.error, log[-4000:])
    assert info.sandbox == ("bwrap" if bwrap_available() else "none")
    assert "step 1 loss" in log, log[-4000:]  # the script trained inside the agent's tool

    # A graded submission linked to a code snapshot that holds the script.
    metrics = json.loads((paths.report / "metrics.json").read_text())
    assert metrics["valid_submissions"] >= 1, log[-4000:]
    with Ledger(paths.ledger) as ledger:
        graded = [s for s in ledger.submissions() if s.snapshot]
    assert graded
    tree = subprocess.run(
        ["git", "--git-dir", str(paths.code_git), "ls-tree", "-r", "--name-only"]
        + [graded[0].snapshot],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert "code/train.py" in tree, tree

    # Every request went through the proxy (the provider saw only the real key), one per step,
    # and the report's token totals are exactly what was served.
    served = fake.served
    assert len(served) == len(turns), [s.api for s in served]
    assert all(s.status == 200 and s.api_key == real_key for s in served)
    assert all(s.api == "openai-chat" for s in served)
    usage = metrics["llm_usage"]
    assert usage["requests"] == len(served)
    assert usage["input_tokens"] == sum(s.input_tokens for s in served)
    assert usage["output_tokens"] == sum(s.output_tokens for s in served)
    assert usage["by_model"].keys() == {"gpt-4.1-mini"}

    # The agent's environment: the proxy's URL and per-run key, no real key, no host secret.
    dump = (paths.code / "env.txt").read_text()
    assert real_key not in dump and HOST_SECRET not in dump
    url = re.search(r"^LLM_BASE_URL=(http://127\.0\.0\.1:(\d+)/openai/v1)$", dump, re.M)
    assert url, dump
    assert int(url.group(2)) != fake.port  # the proxy, not the provider
    assert re.search(r"^LLM_MODEL=openai/gpt-4\.1-mini$", dump, re.M), dump

    # The JSONL events parse: the tool calls and the finish message. (`--json` prints no
    # token stats, so the agent's own token account stays empty; the proxy's is the record.)
    agent_view = json.loads((paths.record / "agent.json").read_text())
    assert agent_view["log"]["tools"] == {"terminal": 3}, agent_view
    assert agent_view["log"]["final"] == "Trained, submitted.", agent_view
    assert agent_view["log"]["tool_errors"] == 0, agent_view
    assert "sft" in agent_view["methods"], agent_view
