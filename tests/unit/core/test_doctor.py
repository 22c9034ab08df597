"""``agent2rl doctor``: each check found or missing, with what a missing piece costs; key
values never shown (the real CLI in a subprocess, the real probes)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from support.cli import run_cli

from agent2rl.doctor import FULL_TASK_DISK, LITE_TASK_DISK, check_disk, check_keys

CHECKS = ("bubblewrap", "network namespace", "cgroups", "GPU", "vLLM", "openai key",
          "anthropic key", "gemini key", "disk (AGENT2RL_HOME)", "disk (runs)")  # fmt: skip


def _doctor(tmp_path: Path, **env: str):
    proc = run_cli(
        ["doctor", "--runs-dir", str(tmp_path / "runs")],
        env={**os.environ, "COLUMNS": "300", **env},
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def test_doctor_lists_every_check_and_never_a_key_value(tmp_path: Path) -> None:
    secret = "sk-doctor-test-not-a-real-key-0123456789"
    out = _doctor(tmp_path, OPENAI_API_KEY=secret, ANTHROPIC_API_KEY="")
    for name in CHECKS:
        assert name in out, (name, out)
    assert secret not in out
    assert "OPENAI_API_KEY is set" in out
    assert "export ANTHROPIC_API_KEY=..." in out  # an empty value counts as missing
    assert "agent2rl[gpu]" in out or "CUDA available" in out  # rich did not eat the extra


def test_doctor_without_bubblewrap_says_what_it_costs(tmp_path: Path) -> None:
    out = _doctor(tmp_path, PATH=str(tmp_path / "empty-bin"))  # no bwrap, no nvidia-smi
    line = next(line for line in out.splitlines() if "bubblewrap" in line)
    assert "missing" in line and "unsandboxed" in line
    assert "apt-get install bubblewrap" in out


def test_doctor_reports_bubblewrap_version_when_present(tmp_path: Path) -> None:
    if shutil.which("bwrap") is None:
        return  # covered by the test above on this machine
    out = _doctor(tmp_path)
    assert "bubblewrap 0." in out or "bubblewrap 1." in out


def test_key_checks_name_the_variables_only() -> None:
    checks = {c.name: c for c in check_keys({"GOOGLE_API_KEY": "value-xyz"})}
    assert checks["gemini key"].status == "ok" and checks["gemini key"].detail == (
        "GOOGLE_API_KEY is set"
    )
    assert checks["openai key"].status == "missing"
    assert all("value-xyz" not in c.detail + c.cost for c in checks.values())


def test_disk_check_measures_the_filesystem_of_a_path_not_made_yet(tmp_path: Path) -> None:
    c = check_disk("runs", tmp_path / "not" / "yet")
    free = shutil.disk_usage(tmp_path).free
    expected = "missing" if free < LITE_TASK_DISK else "warn" if free < FULL_TASK_DISK else "ok"
    assert c.status == expected and str(tmp_path / "not" / "yet") in c.detail
