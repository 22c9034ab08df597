"""Whole runs of a real LLM agent CLI driven by the scripted fake provider, and the checks
every such run must pass.

The chain is the production one: ``agent2rl run`` (a subprocess) starts the metering proxy
with the host's real key and the fake provider as its upstream (the host's ``*_BASE_URL``),
launches the agent in the sandbox pointed at the proxy, and the scripted conversation makes
the agent write ``code/train.py`` (:data:`TRAIN_PY`: real optimizer steps on the tiny model,
a save and an HTTP submission), run it, dump its environment into ``code/env.txt`` and
finish.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from agent2rl.grading.ledger import Ledger
from agent2rl.rundir import RunInfo, RunPaths
from agent2rl.sandbox import bwrap_available
from support import FIXTURES
from support.cli import only_run, run_cli
from support.fake_provider import FakeProvider, Turn, start_fake_provider

#: the script the agent is made to write and run
TRAIN_PY = (FIXTURES / "llm_scripts" / "train.py").read_text()
# The harness's interpreter first (the agent's `python` must have torch), then the host PATH,
# where the agent CLIs live.
_PATH = os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin")
HOST_PATH = f"{Path(sys.executable).parent}:{_PATH}"
#: a host variable that must not reach the agent
HOST_SECRET = "s3cret"
# Every key-like variable a developer's shell may hold (OpenHands' LLM_* included): the runs
# get only the ones a test sets, so a real key on the host is never used (nor sent to the
# fake provider).
KEY_VARS = (
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_BASE_URL",
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "GEMINI_API_KEY",
    "GOOGLE_API_KEY",
    "GOOGLE_GEMINI_BASE_URL",
    "AGENT2RL_DRIVER_API_KEY",
    "LLM_MODEL",
    "LLM_BASE_URL",
    "LLM_API_KEY",
)


def host_env(**extra: str) -> dict[str, str]:
    """The test process's environment without :data:`KEY_VARS`, with :data:`HOST_PATH` and
    ``extra``."""
    env = {k: v for k, v in os.environ.items() if k not in KEY_VARS}
    return {**env, "PATH": HOST_PATH, **extra}


@dataclass(frozen=True)
class LLMRun:
    """A finished run: its directory, the (stopped) fake provider, the host's real key and
    the CLI's result."""

    paths: RunPaths
    fake: FakeProvider
    real_key: str
    result: subprocess.CompletedProcess[str]


def llm_run(
    tmp_path: Path,
    agent: str,
    driver: str,
    turns: list[Turn],
    api: Literal["anthropic", "openai", "gemini"],
    mode: str = "free",
    budget: str = "150s",
    responder: Callable[[dict[str, Any]], Any] | None = None,
    expect_rc: int | None = 0,
    refuse_key: bool = False,
) -> LLMRun:
    """``agent2rl run`` of arith-lite on the tiny model with ``agent`` driven by ``driver`` in
    ``mode`` for ``budget``, the host's ``api`` key and base URL pointing at a fake provider
    that replays ``turns`` (``responder``: the fake's per-request answers, see
    :meth:`FakeProvider.respond_with`, e.g. for a CLI's side requests such as a title).
    ``refuse_key``: the provider accepts another key than the host's, so it answers every
    request 401 (a revoked key). Asserts the CLI exited ``expect_rc`` (None: any status)."""
    real_key = f"sk-real-{secrets.token_hex(8)}"
    accepted = f"sk-other-{secrets.token_hex(8)}" if refuse_key else real_key
    script = {"turns": turns, "final_text": "All done."}
    fake = start_fake_provider(script, api_key=accepted)
    if responder is not None:
        fake.respond_with(responder)
    if api == "anthropic":
        upstream = {"ANTHROPIC_API_KEY": real_key, "ANTHROPIC_BASE_URL": fake.anthropic_base_url}
    elif api == "gemini":
        upstream = {"GEMINI_API_KEY": real_key, "GOOGLE_GEMINI_BASE_URL": fake.gemini_base_url}
    else:
        upstream = {"OPENAI_API_KEY": real_key, "OPENAI_BASE_URL": fake.openai_base_url}
    runs = tmp_path / "runs"
    try:
        r = run_cli(
            ["run", "--task", "arith-lite", "--agent", agent, "--driver", driver]
            + ["--mode", mode, "--model", "tiny", "--budget", budget]
            + ["--sandbox", "auto", "--runs-dir", str(runs)],
            env=host_env(HOST_SECRET=HOST_SECRET, **upstream),
        )
    finally:
        fake.stop()
    assert expect_rc is None or r.returncode == expect_rc, r.stdout + r.stderr
    return LLMRun(only_run(runs), fake, real_key, r)


@dataclass(frozen=True)
class RunRecord:
    """What a checked run recorded: ``report/metrics.json``, the agent's ``code/env.txt``
    and ``record/agent.json``."""

    metrics: dict[str, Any]
    env_dump: str
    agent_view: dict[str, Any]


def check_trained_and_submitted(run: LLMRun, url_var: str | None) -> RunRecord:
    """The checks every agent's run passes: completed in the expected sandbox; the script
    trained inside the agent's tool; a graded submission whose code snapshot holds it; every
    request through the proxy (the provider saw only the real key, answered 200) with the
    report's token totals exactly what was served; and an agent environment whose
    ``url_var`` is the proxy's URL (None: the CLI takes its URL from a config file, which
    the caller checks), without the real key or the host secret."""
    paths, fake = run.paths, run.fake
    full_log = paths.agent_log.read_text(errors="replace")
    log = full_log[-4000:]
    metrics = json.loads((paths.report / "metrics.json").read_text())
    info = RunInfo.load(paths)
    assert info.status == "completed", (info.status, info.error, log)
    assert info.sandbox == ("bwrap" if bwrap_available() else "none")
    # The script really trained inside the agent's tool (its output is in the agent's log).
    assert "step 1 loss" in full_log, log

    # At least one graded submission, linked to a code snapshot that holds the script.
    assert metrics["valid_submissions"] >= 1, log
    with Ledger(paths.ledger) as ledger:
        subs = ledger.submissions()
    graded = [s for s in subs if s.snapshot]
    assert graded, subs
    tree = subprocess.run(
        ["git", "--git-dir", str(paths.code_git), "ls-tree", "-r", "--name-only"]
        + [graded[0].snapshot],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert "code/train.py" in tree, tree

    # Every request went through the proxy (the provider saw only the real key, which the
    # agent never had), and the report's token totals are exactly what was served.
    served = fake.served
    assert served and all(s.status == 200 for s in served)
    assert all(s.api_key == run.real_key for s in served)
    usage = metrics["llm_usage"]
    assert usage["requests"] == len(served)
    assert usage["input_tokens"] == sum(s.input_tokens for s in served)
    assert usage["output_tokens"] == sum(s.output_tokens for s in served)

    # The agent's environment: the proxy's URL, no real key, no host secret.
    dump = (paths.code / "env.txt").read_text()
    assert run.real_key not in dump and HOST_SECRET not in dump
    if url_var is not None:
        url = re.search(rf"^{url_var}=(http://127\.0\.0\.1:(\d+)/\S*)$", dump, re.M)
        assert url, dump
        assert int(url.group(2)) != fake.port  # the proxy, not the provider

    agent_view = json.loads((paths.record / "agent.json").read_text())
    return RunRecord(metrics, dump, agent_view)
