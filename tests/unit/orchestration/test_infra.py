"""An agent that exits at once because of its infrastructure (the provider answers 401/403/5xx,
its command cannot run, it dies before any LLM request) is a failed, retried attempt, not a
finished ``agent_error`` with 0 improvement; an agent that worked and then failed keeps its
result."""

from __future__ import annotations

import secrets
from pathlib import Path

import pytest
from support import AGENTS
from support.cli import only_run, run_cli
from support.fake_provider import start_fake_provider
from support.llmruns import host_env

from agent2rl.files import write_json_atomic
from agent2rl.metering.usage import UsageRecord, append_record
from agent2rl.orchestration.infra import INFRASTRUCTURE, QUICK_EXIT_S, infrastructure_failure
from agent2rl.rundir import RunInfo, RunPaths
from agent2rl.study.executor import classify
from agent2rl.study.spec import StudySpec, expand
from agent2rl.study.state import StudyState, attempt_outcome


def _run_dir(
    root: Path,
    *,
    status: str = "agent_error",
    ran_s: float = 3.0,
    code: int | None = 1,
    driver: str | None = "claude-sonnet-4-5",
    usage: tuple[tuple[int, bool], ...] = (),
    log: str = "",
    submissions: int = 0,
) -> Path:
    """A run directory as a finished run leaves it: run.json, the proxy's usage lines
    ``(status, refused)``, the agent log and the report's metrics."""
    paths = RunPaths(root / secrets.token_hex(4))
    paths.record.mkdir(parents=True)
    info = RunInfo(
        run_id=paths.root.name, task="arith-lite", task_version="1", level=1, agent="a",
        model="tiny", budget_s=600.0, seed=0, sandbox="bwrap", created_at=1000.0,
        driver=driver, start=1000.0, ended_at=1000.0 + ran_s, status=status,
        agent_exit_code=code,
    )  # fmt: skip
    info.save(paths)
    for http_status, refused in usage:
        append_record(
            paths.llm_usage,
            UsageRecord(api="anthropic", endpoint="messages", status=http_status, refused=refused),
        )
    paths.agent_log.write_text(log)
    write_json_atomic(paths.report / "metrics.json", {"submissions": submissions})
    return paths.root


@pytest.mark.parametrize(
    "kw",
    [
        {"usage": ((401,),)},
        {"usage": ((403,), (403,))},
        {"usage": ((529,), (500,), (502,))},
        {"code": 127, "usage": ()},
        {"code": 126, "driver": None},  # no LLM: only an exec failure counts
        {"code": 1, "log": "bwrap: execvp claude: No such file or directory\n"},
        {"code": 1, "usage": ()},  # an LLM agent that died before any request
    ],
)
def test_infrastructure_failures(tmp_path: Path, kw: dict) -> None:
    kw["usage"] = tuple((s[0], False) for s in kw.get("usage", ()))
    run = _run_dir(tmp_path, **kw)
    assert infrastructure_failure(run)
    result = classify({"run_dir": str(run), "run_status": "agent_error", "error": None})
    assert result["failure"] == INFRASTRUCTURE and "infrastructure failure" in result["error"]
    assert attempt_outcome(result["run_status"], result["failure"]) == "failed"


@pytest.mark.parametrize(
    "kw",
    [
        {"usage": ((200, False), (500, False))},  # the LLM answered once: the agent worked
        {"usage": ((500, False),), "ran_s": QUICK_EXIT_S + 1},  # ran long
        {"usage": ((500, False),), "submissions": 1},  # it submitted
        {"usage": ((401, True),)},  # the proxy refused a wrong proxy key: the agent's doing
        {"usage": ((429, True),)},  # its token budget ran out
        {"usage": ((400, False),)},  # a bad request is the agent's
        {"driver": None, "code": 1},  # no LLM, a plain crash
        {"status": "completed", "code": 0, "usage": ((500, False),)},
        {"status": "deadline", "code": None, "usage": ()},
    ],
)
def test_the_agents_own_failures_are_results(tmp_path: Path, kw: dict) -> None:
    run = _run_dir(tmp_path, **kw)
    assert infrastructure_failure(run) is None
    result = {"run_dir": str(run), "run_status": kw.get("status", "agent_error")}
    assert "failure" not in classify(result)
    assert attempt_outcome(result["run_status"]) == "finished"


def test_missing_or_unreadable_run_is_not_classified(tmp_path: Path) -> None:
    assert infrastructure_failure(None) is None
    assert infrastructure_failure(tmp_path / "nope") is None
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "run.json").write_text("{not json")
    assert infrastructure_failure(tmp_path / "bad") is None


def test_an_infrastructure_failure_leaves_the_slot_to_run_again(tmp_path: Path) -> None:
    spec = StudySpec.model_validate(
        {"name": "s", "tasks": ["arith-lite"], "agents": ["reference-sft"], "budget": "1m"}
    )
    run = _run_dir(tmp_path / "runs", usage=((503, False),))
    with StudyState(tmp_path, create=True) as state:
        state.bind(spec, "text")
        state.sync_slots(expand(spec))
        (slot,) = state.slots()
        n = state.queue_attempt(slot.id)
        result = classify({"run_id": run.name, "run_dir": str(run), "run_status": "agent_error"})
        outcome = state.end_attempt(
            slot.id,
            n,
            run_id=result["run_id"],
            run_dir=result["run_dir"],
            run_status=result["run_status"],
            error=result["error"],
            failure=result["failure"],
        )
        assert outcome == "failed"
        row = state.slot(slot.id)
        assert row.status == "failed" and "HTTP 503" in (row.error or "")
        assert state.finished_runs() == []  # not counted as a 0-improvement result


@pytest.mark.slow
def test_a_revoked_key_makes_a_real_run_an_infrastructure_failure(tmp_path: Path) -> None:
    """The real chain: ``agent2rl run`` with an LLM agent whose provider refuses the host's
    key (a revoked one): the agent exits 1 at once, the run ends ``agent_error``, and the
    study classes it as an infrastructure failure."""
    fake = start_fake_provider({"turns": ["hello"]}, api_key="sk-real")
    runs = tmp_path / "runs"
    env = host_env(ANTHROPIC_API_KEY="sk-revoked", ANTHROPIC_BASE_URL=fake.anthropic_base_url)
    try:
        r = run_cli(
            ["run", "--task", "arith-lite", "--agent", str(AGENTS / "llm" / "one-call.toml")]
            + ["--model", "tiny", "--budget", "60s", "--runs-dir", str(runs)],
            env=env,
        )
    finally:
        fake.stop()
    assert r.returncode == 0, r.stdout + r.stderr
    paths = only_run(runs)
    assert RunInfo.load(paths).status == "agent_error"
    why = infrastructure_failure(paths.root)
    assert why and "HTTP 401" in why, why
