"""Whole runs of the real OpenHands CLI (``openhands --headless --json``, openhands 1.16 on
Python 3.12) driven by the scripted fake provider, the production chain as in
``test_llm_agents.py``: ``agent2rl run`` starts the metering proxy with the host's real key and
the fake provider as its upstream, launches ``openhands`` in the sandbox (``--network
services``: the task's services and the proxy only) with ``LLM_MODEL``, ``LLM_BASE_URL`` and
``LLM_API_KEY`` pointing at the proxy, and the script makes the agent write ``code/train.py``
with its own file tool (real optimizer steps on the tiny model, a save and an HTTP
submission), run it in its terminal tool, dump its environment and finish. The
``openhands-paper`` spec (the reference's fixed-stage pipeline) is launched the same way,
for its first stages.

The CLI is found on the PATH or where ``.ci/install-openhands`` puts it
(``.venv-openhands/bin``: openhands requires Python 3.12, so it has an environment of its
own); the tests skip without it. openhands-ai 0.9.x, the last release installable on Python
3.11, cannot stand in: its only Docker-free runtimes are cloud services.

In the bwrap sandbox the CLI needs its own Python installation (a venv's base interpreter, the
prefix its shebang resolves to) bound read-only, and a /tmp the agent's uid can write: its
terminal tool runs commands in tmux, whose socket goes in /tmp/tmux-UID whatever TMPDIR says.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from support import llmruns
from support.fake_provider import ToolCall, Turn
from support.llmruns import HOST_PATH, TRAIN_PY, check_trained_and_submitted, llm_run

from agent2rl.rundir import RunInfo


def _terminal(text: str, command: str, timeout_s: float | None = None) -> Turn:
    """A call of OpenHands' ``terminal`` tool. Its schema requires ``security_risk`` (a call
    without it comes back as an AgentErrorEvent); ``timeout`` keeps a quiet command (training
    piped through tail) from being paused after 30 s without output."""
    args: dict[str, object] = {"command": command, "security_risk": "LOW"}
    if timeout_s is not None:
        args["timeout"] = timeout_s
    return Turn(text=text, tool_calls=[ToolCall("terminal", args)])


REPO = Path(__file__).resolve().parents[2]
#: where ``.ci/install-openhands`` puts the CLI (its own Python 3.12 environment)
LOCAL_BIN = REPO / ".venv-openhands" / "bin"
#: the PATH the runs get: the host's, then the project-local install (after the harness's
#: venv, so that the agent's ``python`` stays the one with torch)
OPENHANDS_PATH = f"{HOST_PATH}:{LOCAL_BIN}"


@pytest.fixture
def openhands_path(monkeypatch: pytest.MonkeyPatch) -> str:
    """The CLI's PATH for :func:`llm_run` (which takes the host's PATH from the module)."""
    monkeypatch.setattr(llmruns, "HOST_PATH", OPENHANDS_PATH)
    return OPENHANDS_PATH


@pytest.mark.slow
@pytest.mark.skipif(
    shutil.which("openhands", path=OPENHANDS_PATH) is None,
    reason="OpenHands is not installed (.ci/install-openhands, or "
    "uv tool install openhands~=1.16.0 --python 3.12)",
)
def test_openhands_trains_and_submits_through_the_proxy(
    tmp_path: Path, openhands_path: str
) -> None:
    def write_with_file_editor(body: dict[str, Any]) -> Turn | None:
        """The session's first request: create ``code/train.py`` with OpenHands' own file
        tool (``file_editor`` wants an absolute path: the workspace's, from the prompt)."""
        if any(m.get("role") == "tool" for m in body.get("messages", [])):
            return None  # later requests: the script
        workspace = re.search(r"File path: (/[^\s\"\\]+)/prompt\.md", json.dumps(body))
        assert workspace, "no prompt file path in the first request"
        args = {"command": "create", "path": f"{workspace.group(1)}/code/train.py"}
        args |= {"file_text": TRAIN_PY, "security_risk": "LOW"}
        return Turn(
            text="I will write a small SFT script.", tool_calls=[ToolCall("file_editor", args)]
        )

    turns = [
        _terminal("Now I train and submit.", "python code/train.py 2>&1 | tail -n 5", 240),
        _terminal("Recording the environment.", "env > code/env.txt && wc -l code/env.txt"),
        Turn(text="Finished.", tool_calls=[ToolCall("finish", {"message": "Trained, submitted."})]),
    ]
    run = llm_run(
        tmp_path,
        "openhands",
        "gpt-4.1-mini",
        turns,
        "openai",
        mode="sft-only",
        budget="240s",
        responder=write_with_file_editor,
    )
    record = check_trained_and_submitted(run, "LLM_BASE_URL")
    written = (run.paths.workspace / "code" / "train.py").read_text()
    assert written == TRAIN_PY  # by the file tool, byte for byte

    # One request per step (the file tool's, then the script's), all OpenAI chat
    # completions for the driver's model.
    served = run.fake.served
    assert len(served) == 1 + len(turns), [s.api for s in served]
    assert all(s.api == "openai-chat" for s in served)
    assert record.metrics["llm_usage"]["by_model"].keys() == {"gpt-4.1-mini"}

    # The agent's environment: the proxy's OpenAI route and the driver's model, litellm-style.
    dump = record.env_dump
    assert re.search(r"^LLM_BASE_URL=http://127\.0\.0\.1:\d+/openai/v1$", dump, re.M), dump
    assert re.search(r"^LLM_MODEL=openai/gpt-4\.1-mini$", dump, re.M), dump

    # The JSONL events parse: the tool calls and the finish message. (`--json` prints no
    # token stats, so the agent's own token account stays empty; the proxy's is the record.)
    agent_view = record.agent_view
    assert agent_view["log"]["tools"] == {"file_editor": 1, "terminal": 2}, agent_view
    assert agent_view["log"]["final"] == "Trained, submitted.", agent_view
    assert agent_view["log"]["tool_errors"] == 0, agent_view
    assert "sft" in agent_view["methods"], agent_view
    # The version that ran is recorded against the adapter's range (its `--version` can take
    # longer than the record waits on a loaded machine: then it is unknown, never "outside").
    cli = agent_view["log"]["cli"]
    assert cli["tested_versions"] == ">=1.16,<1.17" and cli["in_tested_range"] is not False, cli


@pytest.mark.slow
@pytest.mark.skipif(
    shutil.which("openhands", path=OPENHANDS_PATH) is None,
    reason="OpenHands is not installed (.ci/install-openhands)",
)
def test_openhands_paper_pipeline_runs_the_real_cli_in_stages(
    tmp_path: Path, openhands_path: str
) -> None:
    """The ``openhands-paper`` spec launched for real: the stage runner starts the real CLI
    in the sandbox, stage 1 writes ``summary.md`` and finishes, stage 2 starts a new session
    told its number, and the pipeline goes on until the deadline stops it (its 30 stages
    take far longer than this budget). Each stage's requests say which stage they are. (A
    CLI start takes 10-40 s on a loaded machine: stage 2 may be stopped before its first
    request, so its start is checked in the runner's log and the prompt file it wrote.)"""
    stages: list[int] = []

    def by_stage(body: dict[str, Any]) -> Turn | None:
        # The stage note is in the session's first user message, sent with every request.
        found = re.search(r"Stage (\d+) of 30", json.dumps(body))
        stage = int(found.group(1)) if found else 0
        stages.append(stage)
        if stage >= 2:  # every later stage ends at once
            return Turn(text="Done.", tool_calls=[ToolCall("finish", {"message": f"S{stage}"})])
        return None  # stage 1: the script

    turns = [
        _terminal("Summary first.", "echo 'stage 1: no model yet' > summary.md && cat summary.md"),
        Turn(text="Stage done.", tool_calls=[ToolCall("finish", {"message": "Stage 1 done."})]),
    ]
    run = llm_run(
        tmp_path,
        "openhands-paper",
        "gpt-4.1-mini",
        turns,
        "openai",
        budget="120s",
        responder=by_stage,
        expect_rc=None,
    )
    info = RunInfo.load(run.paths)
    log = run.paths.agent_log.read_text(errors="replace")
    # Killed at the deadline mid-pipeline (or, on a fast machine, between stages).
    assert info.status in ("deadline", "completed"), (info.status, info.error, log[-3000:])
    assert stages[:2] == [1, 1] and stages == sorted(stages), (stages, log[-3000:])
    assert "[stages] stage 2/30: openhands" in log, log[-3000:]
    ws = run.paths.workspace
    later = (ws / ".stage-prompt.md").read_text()  # the last stage's prompt, as the CLI read it
    assert re.search(r"Stage ([2-9]|[12]\d|30) of 30", later), later[-400:]
    assert (ws / "summary.md").read_text() == "stage 1: no model yet\n"
    assert (ws / "code" / "stages.py").is_file()

    # Every request through the proxy, metered as served; both stages' events parsed.
    served = run.fake.served
    assert served and all(s.status == 200 and s.api_key == run.real_key for s in served)
    metrics = json.loads((run.paths.report / "metrics.json").read_text())
    assert metrics["llm_usage"]["requests"] == len(served)
    assert metrics["llm_usage"]["input_tokens"] == sum(s.input_tokens for s in served)
    agent_view = json.loads((run.paths.record / "agent.json").read_text())
    assert agent_view["log"]["tools"] == {"terminal": 1}, agent_view
    assert agent_view["log"]["tool_errors"] == 0, agent_view
