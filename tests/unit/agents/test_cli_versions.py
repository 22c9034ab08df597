"""CLI versions are part of the record: each npm-installed adapter declares the range it was
tested with, ``agents doctor`` shows the installed version and warns outside that range, a
run's record gets the version that ran, and ``.ci/run`` installs from the same range.

The "installed CLI" here is a real executable on a temporary PATH that prints a version as
the real CLIs do (``codex-cli 0.169.0``, ``2.1.197 (Claude Code)``)."""

from __future__ import annotations

import re
import stat
from pathlib import Path

import pytest
from support.cli import run_cli

from agent2rl.agents import get_agent, load_spec
from agent2rl.agents.doctor import (
    DOCTOR_COLUMNS,
    check_agent,
    cli_version_record,
    in_tested_range,
)
from agent2rl.errors import UserError

REPO = Path(__file__).resolve().parents[3]
# binary, how the real CLI prints its version, a version inside the declared range
NPM_CLIS = {
    "claude-code": ("claude", "{v} (Claude Code)", "2.1.197"),
    "codex": ("codex", "codex-cli {v}", "0.169.0"),
    "gemini-cli": ("gemini", "{v}", "0.61.0"),
    "opencode": ("opencode", "{v}", "1.18.33"),
}


def _cli(folder: Path, name: str, output: str) -> None:
    path = folder / name
    path.write_text(f"#!/bin/sh\necho '{output}'\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


@pytest.mark.parametrize("agent", sorted(NPM_CLIS))
def test_each_npm_cli_declares_its_tested_range(agent: str) -> None:
    spec = get_agent(agent)
    assert spec.tested_versions, agent
    assert in_tested_range(NPM_CLIS[agent][2], spec.tested_versions) is True
    # The install command pins an npm range inside the tested one.
    assert re.fullmatch(r"npm install -g \S+@~\d+\.\d+\.\d+", spec.install), spec.install


@pytest.mark.parametrize("agent", sorted(NPM_CLIS))
def test_doctor_warns_outside_the_tested_range(agent: str, tmp_path: Path) -> None:
    binary, form, inside = NPM_CLIS[agent]
    spec = get_agent(agent)
    major, minor, _ = inside.split(".")
    newer = f"{major}.{int(minor) + 1}.0"
    _cli(tmp_path, binary, form.format(v=newer))
    row = check_agent(spec, {"PATH": str(tmp_path)})
    assert row.version == newer
    assert row.version_warning.startswith(f"{agent} {newer} is outside"), row.version_warning
    cell = row.cells()[DOCTOR_COLUMNS.index("version")]
    assert cell == f"{newer} (UNTESTED: outside {spec.tested_versions})"
    assert row.cells()[DOCTOR_COLUMNS.index("tested versions")] == spec.tested_versions

    _cli(tmp_path, binary, form.format(v=inside))
    row = check_agent(spec, {"PATH": str(tmp_path)})
    assert row.version == inside and row.version_warning == ""
    assert row.cells()[DOCTOR_COLUMNS.index("version")] == inside


def test_run_record_holds_the_version_that_ran(tmp_path: Path) -> None:
    _cli(tmp_path, "codex", "codex-cli 0.170.2")
    record = cli_version_record(get_agent("codex"), {"PATH": str(tmp_path)})
    assert record["version"] == "0.170.2" and record["in_tested_range"] is False
    assert record["tested_versions"] == ">=0.169,<0.170"
    assert "outside" in str(record["warning"])
    # Not installed: an empty version, nothing compared, no warning; never raises.
    empty = cli_version_record(get_agent("codex"), {"PATH": str(tmp_path / "none")})
    assert empty["version"] == "" and empty["in_tested_range"] is None and not empty["warning"]


def test_a_python_cli_s_version_is_read_without_starting_it(tmp_path: Path) -> None:
    """A Python console script (as pip/uv install OpenHands' CLI) is asked for its version
    through its interpreter's package metadata: its ``--version`` imports the whole CLI
    (10-28 s for OpenHands here, past the timeout, so the run recorded no version)."""
    import sys
    from importlib.metadata import version

    script = tmp_path / "openhands"
    # A CLI whose start takes a minute; its package is packaging (installed here).
    script.write_text(
        f"#!{sys.executable}\n# -*- coding: utf-8 -*-\nimport sys, time\n"
        "from packaging.version import Version\ntime.sleep(60)\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    record = cli_version_record(get_agent("openhands"), {"PATH": str(tmp_path)}, timeout_s=5.0)
    assert record["version"] == version("packaging")


def test_unreadable_versions_compare_as_unknown() -> None:
    assert in_tested_range("", ">=1,<2") is None
    assert in_tested_range("1.5", "") is None
    assert in_tested_range("not-a-version", ">=1,<2") is None
    assert in_tested_range("1.19.0-beta.1", ">=1.18,<1.20") is True


def test_a_bad_range_in_a_spec_is_one_clear_error(tmp_path: Path) -> None:
    spec = tmp_path / "a.toml"
    spec.write_text(
        'name = "a"\ndescription = "d"\ncommand = ["true"]\ntested_versions = "^0.169"\n'
    )
    with pytest.raises(UserError, match=r"tested_versions '\^0.169' is not a version range"):
        load_spec(spec)
    spec.write_text('name = "a"\ndescription = "d"\ncommand = ["true"]\ntested_versions = 1\n')
    with pytest.raises(UserError, match="tested_versions must be a string"):
        load_spec(spec)


def test_ci_installs_each_cli_from_its_spec_range() -> None:
    ci = (REPO / ".ci" / "run").read_text()
    pinned = dict(re.findall(r'"(\w+):(\S+@~[\d.]+)"', ci))
    for agent, (binary, _, _) in NPM_CLIS.items():
        assert f"npm install -g {pinned[binary]}" == get_agent(agent).install, agent


def test_agents_doctor_command_shows_the_tested_range(tmp_path: Path) -> None:
    _cli(tmp_path, "codex", "codex-cli 0.170.2")
    r = run_cli(
        ["agents", "doctor"],
        env={"PATH": f"{tmp_path}:/usr/bin:/bin", "COLUMNS": "400"},
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    assert "UNTESTED" in r.stdout and "0.170.2" in r.stdout
