"""Provider-side tools in whole runs: ``agent2rl run`` starts the metering proxy, a test agent
asks its provider (the scripted fake provider on loopback) for a web search, and the run
refuses it unless it allows provider tools — by ``--allow-provider-tools`` or by an agent spec
labelled ``provider_tools = true``, as ``codex-paper`` is — and then records each use, in its
identity (run.json, metrics.json, the results ledger) and in its contamination report."""

from __future__ import annotations

import json
import secrets
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from support import AGENTS
from support.cli import only_run, run_cli
from support.fake_provider import Turn, start_fake_provider
from support.llmruns import host_env

from agent2rl.rundir import RunInfo, RunPaths

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

QUERY = "arith-lite private split answers"


def _run(tmp_path: Path, agent: str, *flags: str) -> tuple[RunPaths, list[str]]:
    """One run of ``agent`` (a spec under tests/support/agents/llm) on arith-lite; the run's
    paths and what reached the fake provider."""
    key = f"sk-real-{secrets.token_hex(8)}"
    fake = start_fake_provider([Turn(text="found it", web_searches=[QUERY])], api_key=key)
    runs = tmp_path / "runs"
    try:
        r = run_cli(
            ["run", "--task", "arith-lite", "--agent", str(AGENTS / "llm" / f"{agent}.toml")]
            + ["--model", "tiny", "--budget", "120s", "--sandbox", "auto"]
            + ["--runs-dir", str(runs), *flags],
            env=host_env(ANTHROPIC_API_KEY=key, ANTHROPIC_BASE_URL=fake.anthropic_base_url),
        )
    finally:
        fake.stop()
    assert "Traceback" not in r.stderr, r.stdout + r.stderr
    return only_run(runs), fake.received


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def _results_row(paths: RunPaths) -> dict[str, Any]:
    with sqlite3.connect(paths.root.parent / "results.db") as db:
        db.row_factory = sqlite3.Row
        return dict(db.execute("SELECT * FROM runs").fetchone())


def test_a_run_refuses_provider_tools_by_default(tmp_path: Path) -> None:
    paths, received = _run(tmp_path, "web-search-call")
    assert "POST /v1/messages" not in received
    info = RunInfo.load(paths)
    assert info.provider_tools is False and info.status == "agent_error"
    assert "--allow-provider-tools" in paths.agent_log.read_text()
    (use,) = _lines(paths.record / "provider_tools.jsonl")
    assert (use["tool"], use["allowed"], use["status"]) == ("web_search", False, 403)
    metrics = json.loads((paths.report / "metrics.json").read_text())
    assert metrics["provider_tools"] is False and metrics["llm_usage"]["refused"] == 1
    assert "Provider-side tools" not in (paths.report / "report.md").read_text()
    assert _results_row(paths)["provider_tools"] == 0


@pytest.mark.parametrize(
    ("agent", "flags"),
    [("web-search-call", ("--allow-provider-tools",)), ("web-search-labelled", ())],
    ids=["flag", "spec-label"],
)
def test_an_allowed_run_records_each_use_in_its_identity(
    tmp_path: Path, agent: str, flags: tuple[str, ...]
) -> None:
    paths, received = _run(tmp_path, agent, *flags)
    assert "POST /v1/messages" in received
    info = RunInfo.load(paths)
    assert info.provider_tools is True and info.status == "completed", info
    uses = _lines(paths.record / "provider_tools.jsonl")
    assert [(u["source"], u["tool"], u["query"], u["allowed"]) for u in uses] == [
        ("request", "web_search", None, True),
        ("response", "web_search", QUERY, True),
    ]
    metrics = json.loads((paths.report / "metrics.json").read_text())
    assert metrics["provider_tools"] is True
    assert "Provider-side tools (web search" in (paths.report / "report.md").read_text()
    assert _results_row(paths)["provider_tools"] == 1
    contamination = json.loads((paths.record / "contamination.json").read_text())
    assert f"llm:web_search:{QUERY}" in contamination["egress"]["provider_tools"]
