"""The agent's resource caps (issue 13, "Bound the agent"): a hostile agent that goes over
its memory cap, its workspace quota or its process cap is stopped (memory, disk: the run ends
with status ``oom`` / ``disk_quota``) or refused (processes), what was graded before stays
graded, and the harness survives. Each agent is bounded so the test machine survives too."""

from __future__ import annotations

import json
import os

import pytest
from support import AGENTS
from support.cli import only_run, run_cli

from agent2rl.grading.ledger import Ledger
from agent2rl.rundir import RunInfo
from agent2rl.sandbox.limits import probe

pytestmark = pytest.mark.slow


def _hog(tmp_path, kind: str, caps: list[str], cgroup: bool = True, **env: str):
    spec = tmp_path / "hog.toml"
    spec.write_text(
        f'name = "hog"\ndescription = "goes over a cap"\ncommand = ["{{python}}", '
        f'"code/hog.py"]\nfiles = ["{AGENTS / "hog.py"}"]\n[env]\nHOG = "{kind}"\n'
        + "".join(f'{k} = "{v}"\n' for k, v in env.items())
    )
    runs = tmp_path / "runs"
    r = run_cli(
        ["run", "--task", "arith-lite", "--agent", str(spec), "--budget", "120s"]
        + ["--runs-dir", str(runs), *caps],
        env={**os.environ, **({} if cgroup else {"AGENT2RL_NO_CGROUP": "1"})},
    )
    assert r.returncode == 0, r.stdout + r.stderr
    paths = only_run(runs)
    with Ledger(paths.ledger) as ledger:
        graded = [s for s in ledger.submissions() if s.status == "graded"]
    assert len(graded) == 1 and graded[0].is_copy  # graded before the breach, still there
    assert (paths.report / "report.html").is_file()
    return paths, RunInfo.load(paths)


@pytest.mark.parametrize("cgroup", [True, False], ids=["cgroup", "watchdog"])
def test_memory_cap_stops_the_agent_with_status_oom(tmp_path, cgroup) -> None:
    if cgroup and probe() == "none":
        pytest.skip("no cgroup (v2 delegation or v1 memory/pids) here; the watchdog case runs")
    paths, info = _hog(tmp_path, "memory", ["--memory", "300M"], cgroup, HOG_LIMIT_MB="1200")
    assert info.status == "oom", (info.status, info.error)
    assert "memory cap of 300.0 MiB" in info.error
    assert info.caps["memory_bytes"] == 300 << 20
    assert info.cap_mechanism == (probe() if cgroup else "none")
    assert "oom" in (paths.report / "report.md").read_text()


def test_disk_quota_stops_the_agent_with_status_disk_quota(tmp_path) -> None:
    paths, info = _hog(tmp_path, "disk", ["--disk-quota", "200M"], HOG_LIMIT_MB="800")
    assert info.status == "disk_quota", (info.status, info.error)
    assert "over its quota of 200.0 MiB" in info.error
    written = sum(f.stat().st_size for f in paths.code.glob("junk*.bin"))
    assert 200 << 20 < written < 800 << 20  # stopped on its way, not at its own end


@pytest.mark.parametrize("cgroup", [True, False], ids=["cgroup", "rlimit"])
def test_process_cap_refuses_forks(tmp_path, cgroup) -> None:
    if cgroup and probe() == "none":
        pytest.skip("no cgroup (v2 delegation or v1 memory/pids) here; the rlimit case runs")
    if not cgroup and os.geteuid() != 0:
        pytest.skip("the RLIMIT_NPROC fallback needs a uid of the agent's own (a root harness)")
    paths, info = _hog(tmp_path, "pids", ["--max-procs", "40"], cgroup, HOG_LIMIT="200")
    got = json.loads((paths.code / "pids.json").read_text())
    assert got["started"] < 40 and got["error"], got  # the cap refused the rest
    assert info.status == "completed"
