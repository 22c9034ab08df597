"""The paper's agent stacks as named specs (issue #26 item 6): OpenHands and OpenCode as
fixed-stage pipelines (30 and 5 sessions), Codex with web search on. Each spec loads and builds
its launch behind the metering proxy; the stage runner is run for real on a stand-in CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from test_agent_specs import PROXY_KEY, REAL_KEYS, _everything, _launch

from agent2rl.agents import AGENTS, get_agent, install_files

STAGES = Path(__file__).parents[3] / "src" / "agent2rl" / "agents" / "pipelines" / "stages.py"
PAPER = {"openhands-paper": ("openhands", 30), "opencode-paper": ("opencode", 5)}


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "workspace"
    (ws / "code").mkdir(parents=True)
    (ws / "description.md").write_text("# Arith\nAnswer arithmetic questions.\n")
    (ws / "instructions.md").write_text("Submit with POST /submit.\n")
    return ws


@pytest.mark.parametrize("name", sorted(PAPER))
def test_pipeline_spec_launches_the_stock_cli_in_stages(workspace: Path, name: str) -> None:
    spec = get_agent(name)
    stock = get_agent(PAPER[name][0])
    launch = _launch(spec, workspace)
    argv = launch.argv
    assert argv[0] == sys.executable and argv[1] == "code/stages.py"
    assert argv[argv.index("--stages") + 1] == str(PAPER[name][1])
    inner = argv[argv.index("--") + 1 :]
    assert inner[0] == stock.binary == spec.binary
    # Same flags, env and config files as the stock spec: only the prompt goes per stage.
    stock_launch = _launch(stock, workspace)
    assert launch.env == stock_launch.env and launch.files == stock_launch.files
    assert len(inner) == len(stock_launch.argv)
    assert {"@STAGE_PROMPT_FILE@", "@STAGE_PROMPT@"} & set(inner)
    assert PROXY_KEY in _everything(launch)
    assert all(k not in _everything(launch) for k in REAL_KEYS.values())
    # The runner is copied into the workspace's code/, where the command looks for it.
    copied = install_files(spec, workspace / "code")
    assert [p.name for p in copied] == ["stages.py"]


def test_codex_paper_turns_web_search_on_and_is_otherwise_stock(workspace: Path) -> None:
    paper = _launch(get_agent("codex-paper"), workspace).argv
    stock = _launch(get_agent("codex"), workspace).argv
    # the stock spec turns Codex's default search off (the proxy would refuse it); the paper's
    # turns it on, in the same place, and changes nothing else
    i = paper.index('web_search="live"')
    assert paper[i - 1] == "-c" and stock[i] == 'web_search="disabled"'
    assert paper[:i] + paper[i + 1 :] == stock[:i] + stock[i + 1 :]


def test_every_paper_spec_is_listed() -> None:
    assert {"openhands-paper", "opencode-paper", "codex-paper"} <= set(AGENTS)


def _fake_cli(tmp_path: Path) -> Path:
    """A stand-in CLI that records each call's argv and the stage file's text."""
    fake = tmp_path / "fake_cli.py"
    log = tmp_path / "calls.jsonl"
    fake.write_text(
        "import json, sys\n"
        "args = sys.argv[1:]\n"
        "text = open(args[1]).read() if args[0] == '--file' else args[1]\n"
        f"open({str(log)!r}, 'a').write(json.dumps({{'argv': args, 'text': text}}) + '\\n')\n"
        "print(json.dumps({'event': 'done'}))\n"
        "sys.exit(3)\n"  # a failing stage does not stop the pipeline
    )
    return log


def test_stage_runner_runs_every_stage_in_turn(tmp_path: Path) -> None:
    log = _fake_cli(tmp_path)
    prompt = tmp_path / "prompt.md"
    prompt.write_text("Train the model.\n")
    cmd = [sys.executable, str(STAGES), "--stages", "3", "--prompt-file", str(prompt), "--"]
    out = subprocess.run(
        [*cmd, sys.executable, str(tmp_path / "fake_cli.py"), "--file", "@STAGE_PROMPT_FILE@"],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(calls) == 3
    for i, call in enumerate(calls, 1):
        assert call["text"].startswith("Train the model.")
        assert f"Stage {i} of 3" in call["text"] and "summary.md" in call["text"]
    # stdout is the CLI's alone (the log parser reads it); the runner talks on stderr.
    assert out.stdout.splitlines() == ['{"event": "done"}'] * 3
    assert "stage 3 exited 3" in out.stderr
    # The inline form gets the text itself.
    log.unlink()
    subprocess.run(
        [*cmd, sys.executable, str(tmp_path / "fake_cli.py"), "--inline", "@STAGE_PROMPT@"],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    assert "Stage 2 of 3" in json.loads(log.read_text().splitlines()[1])["text"]


def test_stage_runner_stops_when_the_cli_is_not_installed(tmp_path: Path) -> None:
    prompt = tmp_path / "prompt.md"
    prompt.write_text("p")
    out = subprocess.run(
        [sys.executable, str(STAGES), "--stages", "30", "--prompt-file", str(prompt), "--",
         str(tmp_path / "no-such-cli")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 127 and out.stderr.count("stage 1/30") == 1
    assert "stage 2/30" not in out.stderr
