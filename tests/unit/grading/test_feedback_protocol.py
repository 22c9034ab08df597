"""The ``validation`` feedback protocol (agent2rl.grading.final) through a real grading service
on loopback, the tiny model and arith-lite: the agent is answered validation-split scores only,
marks a submission final, and the run's end grades exactly that one on the private split, also
after the harness died."""

from __future__ import annotations

import os
import shutil
import socket

import httpx
import pytest
import torch
from safetensors.torch import load_file, save_file
from support.rundirs import make_run, serve

from agent2rl.dataset import PreparedTask
from agent2rl.errors import UserError
from agent2rl.files import read_jsonl
from agent2rl.grading.final import (
    check_feedback,
    finish_feedback,
    grade_final,
    read_final_grade,
    select_final,
    weights_kept,
)
from agent2rl.grading.ledger import Ledger, Submission
from agent2rl.orchestration.baseline import measure_baseline
from agent2rl.orchestration.recover import close_dead_run, complete_final_grade
from agent2rl.rundir import RunInfo, RunStatus
from agent2rl.settings import load_settings


def _ids(prepared, split: str, task) -> set[str]:
    return {s.id for s in task.samples(prepared, split)}


def _item_ids(paths, items_path: str) -> set[str]:
    return {row["id"] for row in read_jsonl(paths.root / items_path)}


@pytest.fixture(scope="module")
def validation_run(tmp_path_factory, arith, tiny):
    """A run under the validation protocol (run.json and the ledger as the orchestrator
    writes them) with its grading service up."""
    task, prepared = arith
    paths = make_run(tmp_path_factory.mktemp("feedback") / "run", task, prepared, tiny)
    info = RunInfo.load(paths)
    info.feedback = "validation"
    info.save(paths)
    with Ledger(paths.ledger) as ledger:
        ledger.set_meta(
            "validation_baseline",
            measure_baseline(task, tiny, load_settings(), paths, split="validation"),
        )
    handle, token = serve(paths, tiny.path)
    client = httpx.Client(
        base_url=handle.url, timeout=120, headers={"Authorization": f"Bearer {token}"}
    )
    yield paths, client, handle
    client.close()
    handle.stop()


def _perturbed(paths, tiny, name: str, seed: int) -> str:
    dest = paths.output / name
    shutil.copytree(tiny.path, dest)
    tensors = load_file(tiny.path / "model.safetensors")
    g = torch.Generator().manual_seed(seed)
    tensors = {k: v + 0.02 * torch.randn(v.shape, generator=g) for k, v in tensors.items()}
    save_file(tensors, dest / "model.safetensors", metadata={"format": "pt"})
    return f"output/{name}"


@pytest.mark.slow  # a real service, two baselines and four evaluations
def test_validation_answers_carry_no_private_score(validation_run, arith, tiny) -> None:
    paths, client, _ = validation_run
    task, prepared = arith
    with Ledger(paths.ledger) as ledger:
        private_base = ledger.get_meta("baseline")
        validation_base = ledger.get_meta("validation_baseline")
    answers = []
    for seed, final in ((1, False), (2, True), (3, False)):
        r = client.post(
            "/submit",
            json={"model_path": _perturbed(paths, tiny, f"v{seed}", seed), "final": final},
        )
        assert r.status_code == 200, r.text
        answers.append(r.json())
    for a in answers:
        assert a["status"] == "graded" and a["split"] == "validation"
        assert a["feedback"] == "validation"
        assert a["baseline"] == validation_base["score"]
    assert answers[1]["marked_final"] == answers[1]["submission_id"]
    assert answers[2]["final_submission_id"] == answers[1]["submission_id"]
    listing = client.get("/submissions").json()
    assert listing["baseline"] == validation_base["score"] and listing["split"] == "validation"
    assert {s["split"] for s in listing["submissions"]} == {"validation"}

    # What was graded is the validation split's items, never a private one.
    validation_ids, private_ids = (
        _ids(prepared, "validation", task),
        _ids(prepared, "private", task),
    )
    assert validation_ids and not validation_ids & private_ids
    with Ledger(paths.ledger) as ledger:
        subs = ledger.submissions()
    assert [s.split for s in subs] == ["validation"] * 3
    for s in subs:
        assert _item_ids(paths, s.items_path) == validation_ids
    assert _item_ids(paths, validation_base["items_path"]) == validation_ids
    assert _item_ids(paths, private_base["items_path"]) == private_ids
    # The copies that can still be selected keep their weights, the others are dropped.
    assert weights_kept(paths, subs[1].id)


@pytest.mark.slow  # a real service, two baselines and four evaluations
def test_marking_final_is_checked(validation_run) -> None:
    paths, client, _ = validation_run
    r = client.post("/final", json={"submission_id": 999})
    assert r.status_code == 404 and "no submission 999" in r.json()["error"]
    r = client.post("/final", json={"submission_id": "x"})
    assert r.status_code == 400 and "error" in r.json()
    with Ledger(paths.ledger) as ledger:
        subs = ledger.submissions()
    marked = subs[1].id
    r = client.post("/final", json={"submission_id": marked})
    assert r.status_code == 200, r.text
    assert r.json()["marked_final"] == marked and r.json()["final_submission_id"] == marked
    dropped = [s.id for s in subs if not weights_kept(paths, s.id)]
    for sub_id in dropped:  # its weights are gone: it cannot be graded at the end
        r = client.post("/final", json={"submission_id": sub_id})
        assert r.status_code == 409 and "submit the same directory again" in r.json()["error"]


@pytest.mark.slow  # a real service, two baselines and four evaluations
def test_final_marked_is_graded_on_private_after_the_harness_died(validation_run, arith) -> None:
    """The run's end never came (its harness was SIGKILLed after the last submission):
    `agent2rl report`'s recovery does the end-of-run grade (recorded ``pending`` by an interrupted
    run's end), on the private split, of the
    submission marked final, with the same evaluation settings as the baseline."""
    paths, client, handle = validation_run
    task, prepared = arith
    handle.stop()
    # Interrupted (Ctrl-C) before its end: the grade is recorded as not done, and how to do it.
    said: list[str] = []
    finish_feedback(paths, RunStatus.INTERRUPTED, said.append)
    with Ledger(paths.ledger) as ledger:
        pending = read_final_grade(ledger)
    assert pending is not None and pending.status == "pending"
    assert "agent2rl report" in pending.note and "not graded yet" in said[0]
    info = RunInfo.load(paths)
    info.harness = {"pid": _dead_pid(), "start_ticks": None, "host": socket.gethostname()}
    info.status = "running"
    info.save(paths)
    assert close_dead_run(paths) is not None
    assert "not graded yet" not in (complete_final_grade(paths) or "")
    with Ledger(paths.ledger) as ledger:
        grade = read_final_grade(ledger)
        subs = ledger.submissions()
        baseline = ledger.get_meta("baseline")
    assert grade is not None and grade.status == "graded", grade
    assert grade.submission_id == subs[1].id and grade.selected_by == "marked"
    assert grade.split == "private" and grade.validation_score == subs[1].score
    assert grade.eval_hash == baseline["eval_hash"]
    assert _item_ids(paths, grade.items_path) == _ids(prepared, "private", task)
    assert not any(weights_kept(paths, s.id) for s in subs), "graded: the copies are dropped"
    assert grade_final(paths) == grade, "done once: a second call returns the same grade"


def _dead_pid() -> int:
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    return pid


def _sub(i: int, score: float | None, status: str = "graded") -> Submission:
    return Submission(id=i, submitted_at=float(i), path=f"output/v{i}", status=status, score=score)


def test_selection_rule() -> None:
    subs = [_sub(1, 40.0), _sub(2, 55.0), _sub(3, 55.0), _sub(4, None, "failed"), _sub(5, 10.0)]
    assert select_final(subs, None)[0].id == 3, "best on validation, the latest on a tie"
    assert select_final(subs, None)[1] == "best_validation"
    assert select_final(subs, 5) == (subs[4], "marked")
    assert select_final(subs, 4)[0].id == 3, "a failed submission cannot be final"
    assert select_final([_sub(1, None, "failed")], None) == (None, None)


def test_task_without_validation_split_errors_clearly(tmp_path) -> None:
    no_validation = PreparedTask(tmp_path / "public", tmp_path / "private", None)
    with pytest.raises(UserError, match="has no validation split.*use --feedback private"):
        check_feedback("validation", "mytask", no_validation)
    check_feedback("private", "mytask", no_validation)
    with pytest.raises(UserError, match="use private or validation"):
        check_feedback("test", "mytask", no_validation)
