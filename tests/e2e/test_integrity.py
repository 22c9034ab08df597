"""Whole runs through the real CLI, checked for integrity: an agent that copies private items
into its training file is flagged as contaminated, and one that submits a model unrelated to
the base is flagged as not derived, in the report and the results ledger, scores unchanged."""

from __future__ import annotations

import json

import pytest
from support.cli import only_run, run_cli

from agent2rl.analysis import list_runs
from agent2rl.grading.ledger import Ledger
from agent2rl.integrity.contamination import CONTAMINATION_FILE, check_run
from agent2rl.settings import load_settings
from agent2rl.tasks import get_task, prepare_task

#: The scripted agent. The test plants the private items it "found" into the script itself
#: (the agent never reads the private split; it only copies what it was given).
AGENT = '''"""Test agent: trains on the public split plus stolen private items; submits a nudged
copy of the base model and an unrelated model (the base's weights shuffled)."""

import json
import os
import shutil
import urllib.request
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

STOLEN = json.loads({stolen!r})
ws = Path(os.environ["WORKSPACE"])
public = (ws / "data" / "train.jsonl").read_text().splitlines()
rows = [json.dumps(r) for r in STOLEN] + public[:200]
(ws / "code" / "train_mix.jsonl").write_text("\\n".join(rows) + "\\n")


def save(name, change):
    out = ws / "output" / name
    out.mkdir(parents=True)
    for f in (ws / "models" / "base").iterdir():  # the files, not their read-only modes
        shutil.copyfile(f, out / f.name)
    weights = load_file(out / "model.safetensors")
    save_file({{k: change(v) for k, v in weights.items()}}, out / "model.safetensors",
              metadata={{"format": "pt"}})
    return "output/" + name


def submit(rel):
    req = urllib.request.Request(
        os.environ["GRADING_SERVER_URL"] + "/submit",
        data=json.dumps({{"model_path": rel}}).encode(),
        headers={{"Authorization": "Bearer " + os.environ["GRADING_TOKEN"],
                 "Content-Type": "application/json"}},
    )
    print(urllib.request.urlopen(req, timeout=600).read().decode(), flush=True)


torch.manual_seed(0)
submit(save("v1", lambda v: v + 0.002 * torch.randn_like(v)))
submit(save("other", lambda v: v.flatten()[torch.randperm(v.numel())].view_as(v)))
'''


@pytest.mark.slow
def test_contaminated_run_and_substituted_model_are_flagged(tmp_path) -> None:
    task = get_task("arith-lite")
    prepared = prepare_task(task, load_settings().task_store)
    stolen = [
        {"question": s.input["question"], "answer": s.target}
        for s in task.samples(prepared, "private")[:20]
    ]
    (tmp_path / "thief.py").write_text(AGENT.format(stolen=json.dumps(stolen)))
    (tmp_path / "thief.toml").write_text(
        'name = "thief"\ndescription = "Test agent: copies private items into its training file"\n'
        'command = ["{python}", "code/thief.py"]\nfiles = ["thief.py"]\n'
    )
    runs = tmp_path / "runs"
    r = run_cli(
        [
            "run",
            "--task",
            "arith-lite",
            "--agent",
            str(tmp_path / "thief.toml"),
            "--budget",
            "90s",
            "--runs-dir",
            str(runs),
        ]
    )
    assert r.returncode == 0, r.stdout + r.stderr
    paths = only_run(runs)
    if not (paths.record / CONTAMINATION_FILE).is_file():
        # The orchestration's finalize does not call the check yet: run it as it will, then
        # regenerate the report and the results row from the run directory.
        check_run(paths, task, prepared)
        rr = run_cli(["report", str(paths.root)])
        assert rr.returncode == 0, rr.stdout + rr.stderr

    with Ledger(paths.ledger) as ledger:
        subs = ledger.submissions()
    assert [s.status for s in subs] == ["graded", "graded"], paths.agent_log.read_text()[-2000:]
    nudged, other = subs
    assert nudged.identity["derived"] is True and other.identity["derived"] is False

    contamination = json.loads((paths.record / CONTAMINATION_FILE).read_text())
    assert contamination["flagged"] and contamination["matched_items"] == 20
    assert {m["item_id"] for m in contamination["matches"]} == {
        s.id for s in task.samples(prepared, "private")[:20]
    }
    # Found where the agent put them: its script and its training file (and, after those,
    # in the run's code snapshots, which recorded them).
    assert all(
        m["files"][:2] == ["code/thief.py", "code/train_mix.jsonl"]
        and all(f.startswith("record/code.git") for f in m["files"][2:])
        for m in contamination["matches"]
    )

    metrics = json.loads((paths.report / "metrics.json").read_text())
    assert metrics["integrity_flags"] == ["model_not_derived", "contaminated"]
    assert metrics["not_derived_submissions"] == [other.id]
    assert metrics["contamination"]["matched_items"] == 20
    # Scores are reported exactly as graded.
    assert metrics["best_score"] == max(nudged.score, other.score)
    assert [tr["score"] for tr in metrics["trajectory"]] == [nudged.score, other.score]
    report = (paths.report / "report.md").read_text()
    assert "CONTAMINATED: 20 of 300 private items" in report
    assert "code/train\\_mix.jsonl" in report
    assert "does not derive" in report
    assert "Integrity:" in (paths.report / "report.html").read_text()

    (row,) = list_runs(runs)
    assert row["contaminated"] == 1 and row["contaminated_items"] == 20
    assert row["integrity_flags"] == "model_not_derived,contaminated"
    assert row["not_derived"] == 1 and row["best"] == metrics["best_score"]
