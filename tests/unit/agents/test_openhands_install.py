"""OpenHands' install is part of its adapter: ``.ci/install-openhands`` installs the CLI from
the range its specs declare tested, into an environment of its own with a Python 3.12 that
really runs (not a pyenv shim that fails), only once; ``agents doctor`` reads the version the
real CLI prints (``OpenHands CLI 1.16.0``) against that range.

The install script runs for real here, on a PATH and HOME without any Python 3.12 (its
"nothing to install with" path) and on an environment already installed (its quick path):
neither downloads anything."""

from __future__ import annotations

import re
import shutil
import stat
import subprocess
from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet

from agent2rl.agents import get_agent
from agent2rl.agents.doctor import check_agent

REPO = Path(__file__).resolve().parents[3]
SCRIPT = REPO / ".ci" / "install-openhands"


def _script_spec() -> str:
    found = re.search(r'^OPENHANDS_SPEC="(openhands~=[\d.]+)"$', SCRIPT.read_text(), re.M)
    assert found, "OPENHANDS_SPEC not found in .ci/install-openhands"
    return found.group(1)


def _executable(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def _run(env_dir: Path, path: str, home: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SCRIPT), str(env_dir)],
        env={"PATH": path, "HOME": str(home), "PYENV_ROOT": str(home / ".pyenv")},
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize("agent", ["openhands", "openhands-paper"])
def test_ci_installs_openhands_from_its_spec_range(agent: str) -> None:
    spec = get_agent(agent)
    pinned = _script_spec()
    assert spec.install == f"uv tool install {pinned} --python 3.12"
    # The compatible-release pin lies inside the declared tested range.
    compatible = SpecifierSet(pinned.removeprefix("openhands"))
    tested = SpecifierSet(spec.tested_versions)
    base = pinned.split("~=")[1]
    major, minor, _ = base.split(".")
    for version in (base, f"{major}.{minor}.99"):
        assert version in compatible and version in tested, version
    assert f"{major}.{int(minor) + 1}.0" not in tested


def test_without_python_312_the_install_says_so_and_ci_goes_on(tmp_path: Path) -> None:
    # A pyenv shim named python3.12 that fails, as on a machine whose pyenv selects 3.11
    shims = tmp_path / "shims"
    shim = "#!/bin/sh\necho 'pyenv: python3.12: command not found' >&2\nexit 127\n"
    _executable(shims / "python3.12", shim)
    # The script's own tools only, so that no real python3.12 of this machine is found
    tools = tmp_path / "tools"
    tools.mkdir()
    for name in ("bash", "env", "cat", "dirname", "rm", "mktemp", "du", "cut", "grep", "tail"):
        found = shutil.which(name)
        assert found, name
        (tools / name).symlink_to(found)
    env_dir = tmp_path / "oh"
    r = _run(env_dir, f"{shims}:{tools}", tmp_path)
    assert r.returncode == 0, r.stderr
    assert "ci: no Python 3.12" in r.stdout and "will be skipped" in r.stdout, r.stdout
    assert not env_dir.exists()


def test_an_installed_environment_is_left_as_it_is(tmp_path: Path) -> None:
    env_dir = tmp_path / "oh"
    _executable(env_dir / "bin" / "openhands", "#!/bin/sh\necho 'OpenHands CLI 1.16.0'\n")
    (env_dir / ".installed").write_text(_script_spec() + "\n")
    before = sorted(p.name for p in env_dir.rglob("*"))
    # No Python 3.12 on this PATH nor in HOME: the stamp alone answers, silently.
    r = _run(env_dir, "/usr/bin:/bin", tmp_path)
    assert r.returncode == 0 and r.stdout == "" and r.stderr == "", r
    assert sorted(p.name for p in env_dir.rglob("*")) == before


def test_doctor_reads_the_openhands_version_against_its_range(tmp_path: Path) -> None:
    spec = get_agent("openhands")
    cli = tmp_path / "openhands"
    _executable(cli, "#!/bin/sh\necho 'OpenHands CLI 1.16.0'\n")
    row = check_agent(spec, {"PATH": str(tmp_path)})
    assert row.version == "1.16.0" and row.version_warning == ""
    _executable(cli, "#!/bin/sh\necho 'OpenHands CLI 1.17.0'\n")
    row = check_agent(spec, {"PATH": str(tmp_path)})
    assert row.version_warning.startswith("openhands 1.17.0 is outside"), row.version_warning
