"""A study whose LLM agent's provider refuses the key (a revoked one): every attempt exits at
once with ``agent_error``; the study counts none of them as a result, retries the slot after
its backoff (real Ray, real runs, the real metering proxy), and leaves it failed, saying why."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from support import AGENTS
from support.fake_provider import start_fake_provider
from support.llmruns import host_env

from agent2rl.metering.usage import read_usage
from agent2rl.study import read_state

pytestmark = pytest.mark.slow

_DRIVE = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from rich.console import Console
    from agent2rl.study import StudyOptions, run_study
    from agent2rl.study.progress import make_reporter
    opts = StudyOptions(out=Path(sys.argv[2]), retries=1, infra_backoff_s=1.0)
    result = run_study(Path(sys.argv[1]), opts, lambda t: make_reporter(t, Console()))
    print("FAILED", result.failed_keys)
    """
)


def test_a_revoked_key_is_retried_and_never_counted(tmp_path: Path) -> None:
    spec = tmp_path / "study.toml"
    spec.write_text(
        f'name = "infra"\ntasks = ["arith-lite"]\nagents = ["{AGENTS / "llm" / "one-call.toml"}"]\n'
        'budget = "60s"\nsandbox = "none"\n'
    )
    out = tmp_path / "study"
    fake = start_fake_provider({"turns": ["hello"]}, api_key="sk-real")
    env = host_env(ANTHROPIC_API_KEY="sk-revoked", ANTHROPIC_BASE_URL=fake.anthropic_base_url)
    try:
        r = subprocess.run(
            [sys.executable, "-c", _DRIVE, str(spec), str(out)],
            capture_output=True, text=True, timeout=540, env=env,
        )  # fmt: skip
    finally:
        fake.stop()
    assert r.returncode == 0, r.stdout + r.stderr
    _, slots, attempts = read_state(out)
    (slot,) = slots
    assert slot.status == "failed" and slot.run_status == "agent_error"
    assert "infrastructure failure" in (slot.error or "") and "HTTP 401" in (slot.error or "")
    assert [a.status for a in attempts] == ["failed", "failed"]  # tried, then retried once
    assert len({a.run_id for a in attempts}) == 2
    for a in attempts:  # each run's one request reached the provider and was refused
        usage = read_usage(Path(a.run_dir or "") / "record" / "llm_usage.jsonl")
        assert [u["status"] for u in usage] == [401]
    assert "FAILED" in r.stdout and slot.key in r.stdout
