"""One run record: RunStatus (string-valued, so files and rows read as before), RunIdentity
(the fields run.json, metrics.json and results.db share, declared once), schema_version in
run.json and metrics.json (a file without it reads as version 1), and the public API
re-exported from ``agent2rl`` without importing the packages behind it."""

from __future__ import annotations

import json
import subprocess
import sys
import typing
from pathlib import Path

from agent2rl.analysis.dashboard.results import (
    COLUMNS,
    ResultsRow,
    list_runs,
    record_run,
    results_row,
)
from agent2rl.analysis.report.run_metrics import RunMetrics
from agent2rl.rundir import (
    FINISHED_RUN_STATUSES,
    LIVE_RUN_STATUSES,
    RUN_SCHEMA_VERSION,
    RunIdentity,
    RunInfo,
    RunPaths,
    RunStatus,
)


def _info(**kw: object) -> RunInfo:
    base: dict = dict(
        run_id="r1",
        task="arith-lite",
        task_version="3",
        level=1,
        agent="claude-code",
        model="tiny",
        budget_s=60.0,
        seed=0,
        sandbox="none",
        created_at=1.0,
        driver="claude-sonnet-4-5",
        mode="free",
    )
    base.update(kw)
    return RunInfo(**base)


def test_run_status_values_are_the_strings_files_always_held() -> None:
    assert [s.value for s in RunStatus] == [
        "preparing",
        "running",
        "completed",
        "deadline",
        "agent_error",
        "oom",
        "disk_quota",
        "interrupted",
        "harness_error",
    ]
    assert RunStatus.OOM == "oom" and json.dumps({"s": RunStatus.OOM}) == '{"s": "oom"}'
    assert LIVE_RUN_STATUSES == {"preparing", "running"} and RunStatus.RUNNING.live
    assert "interrupted" not in FINISHED_RUN_STATUSES and "oom" in FINISHED_RUN_STATUSES


def test_run_json_has_a_schema_version_and_an_old_one_reads_as_version_1(
    tmp_path: Path,
) -> None:
    paths = RunPaths(tmp_path)
    info = _info(status=RunStatus.DEADLINE)
    info.save(paths)
    saved = json.loads(paths.run_json.read_text())
    assert saved["schema_version"] == RUN_SCHEMA_VERSION == 2
    assert saved["status"] == "deadline"
    loaded = RunInfo.load(paths)
    assert loaded.schema_version == 2 and loaded.status == RunStatus.DEADLINE

    del saved["schema_version"]  # a run.json written before the key existed
    paths.run_json.write_text(json.dumps(saved))
    old = RunInfo.load(paths)
    assert old.schema_version == 1 and old.identity() == info.identity()
    old.save(paths)  # rewritten (e.g. by recover): in the current format
    assert json.loads(paths.run_json.read_text())["schema_version"] == 2


def test_one_identity_record_feeds_metrics_and_the_results_row(tmp_path: Path) -> None:
    info = _info(network="host")
    ident = info.identity()
    assert ident == RunIdentity(
        run_id="r1",
        task="arith-lite",
        task_version="3",
        agent="claude-code",
        driver="claude-sonnet-4-5",
        mode="free",
        model="tiny",
        sandbox="none",  # what the agent actually ran in: part of what was run
        network="host",
    )
    # RunMetrics is a RunIdentity: the fields are declared once and stay flat in its JSON
    metrics = RunMetrics(**ident.model_dump(), status=RunStatus.COMPLETED)
    assert isinstance(metrics, RunIdentity) and metrics.identity() == ident
    dumped = metrics.to_json()
    assert "identity" not in dumped and {k: dumped[k] for k in RunIdentity.model_fields} == (
        ident.model_dump()
    )
    assert dumped["status"] == "completed" and dumped["schema_version"] == RUN_SCHEMA_VERSION
    # every identity field is a results.db column, filled from the identity
    hints = typing.get_type_hints(ResultsRow)
    assert set(RunIdentity.model_fields) <= set(hints) and set(hints) == set(COLUMNS)
    row = results_row(tmp_path, metrics)
    assert {k: row[k] for k in RunIdentity.model_fields} == ident.model_dump()  # type: ignore[literal-required]
    record_run(tmp_path, tmp_path, metrics)
    (stored,) = list_runs(tmp_path)
    assert stored["status"] == "completed" and stored["mode"] == "free"
    assert (stored["sandbox"], stored["network"]) == ("none", "host")


def test_metrics_json_without_schema_version_reads_as_version_1(tmp_path: Path) -> None:
    from agent2rl.analysis.dashboard.evidence import read_metrics

    data = RunMetrics(run_id="r", task="t", agent="a", model="m", status="oom").to_json()
    del data["schema_version"]  # as written before the key existed
    path = tmp_path / "metrics.json"
    path.write_text(json.dumps(data))
    assert RunMetrics.read(path).schema_version == 1
    m = read_metrics(path)
    assert m is not None and m.schema_version == 1 and m.status == RunStatus.OOM


def test_the_public_api_is_reexported_and_import_stays_light() -> None:
    import agent2rl
    from agent2rl.dataset import Sample
    from agent2rl.orchestration.evaluate import evaluate_model
    from agent2rl.orchestration.run import execute_run
    from agent2rl.scoring.base import Scorer
    from agent2rl.solvers.base import Solver
    from agent2rl.tasks import Task, task

    assert agent2rl.run is execute_run and agent2rl.evaluate is evaluate_model
    assert (agent2rl.Task, agent2rl.task, agent2rl.Sample) == (Task, task, Sample)
    assert (agent2rl.Solver, agent2rl.Scorer) == (Solver, Scorer)
    for name in agent2rl.__all__:
        assert getattr(agent2rl, name) is not None
    # `import agent2rl` alone imports no package behind the API (no tasks, torch, pydantic)
    code = (
        "import sys, agent2rl; "
        "print(sorted(m for m in sys.modules if m.startswith('agent2rl') or m in "
        "('torch', 'pydantic', 'transformers')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "['agent2rl', 'agent2rl.errors']"
