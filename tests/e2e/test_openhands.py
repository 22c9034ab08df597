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

import re
import shutil
from pathlib import Path

import pytest
from support.fake_provider import ToolCall, Turn
from support.llmruns import HOST_PATH, TRAIN_PY, check_trained_and_submitted, llm_run


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
    run = llm_run(
        tmp_path, "openhands", "gpt-4.1-mini", turns, "openai", mode="sft-only", budget="240s"
    )
    record = check_trained_and_submitted(run, "LLM_BASE_URL")

    # One request per step, all OpenAI chat completions for the driver's model.
    served = run.fake.served
    assert len(served) == len(turns), [s.api for s in served]
    assert all(s.api == "openai-chat" for s in served)
    assert record.metrics["llm_usage"]["by_model"].keys() == {"gpt-4.1-mini"}

    # The agent's environment: the proxy's OpenAI route and the driver's model, litellm-style.
    dump = record.env_dump
    assert re.search(r"^LLM_BASE_URL=http://127\.0\.0\.1:\d+/openai/v1$", dump, re.M), dump
    assert re.search(r"^LLM_MODEL=openai/gpt-4\.1-mini$", dump, re.M), dump

    # The JSONL events parse: the tool calls and the finish message. (`--json` prints no
    # token stats, so the agent's own token account stays empty; the proxy's is the record.)
    agent_view = record.agent_view
    assert agent_view["log"]["tools"] == {"terminal": 3}, agent_view
    assert agent_view["log"]["final"] == "Trained, submitted.", agent_view
    assert agent_view["log"]["tool_errors"] == 0, agent_view
    assert "sft" in agent_view["methods"], agent_view
