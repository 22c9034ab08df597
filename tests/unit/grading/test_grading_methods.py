"""The grading service's methods called without HTTP (agent2rl.grading.app.GradingService), and
the clock hand-off: the service is told the run's deadline once and never reads run.json for
it again (agent2rl.grading.service.tell_clock)."""

from __future__ import annotations

import shutil
import time

import httpx
import pytest
from support.rundirs import make_run, serve

from agent2rl.grading.app import GradingContext, GradingService
from agent2rl.grading.evaluator import EvalSpec
from agent2rl.grading.ledger import Ledger
from agent2rl.grading.service import tell_clock
from agent2rl.grading.submission import SubmissionError, SubmissionLimits
from agent2rl.inference.backend import BackendConfig
from agent2rl.rundir import RunInfo
from agent2rl.settings import load_settings


@pytest.fixture(scope="module")
def run(tmp_path_factory, arith, tiny):
    task, prepared = arith
    return make_run(tmp_path_factory.mktemp("methods") / "run", task, prepared, tiny)


def _service(paths, tiny) -> GradingService:
    """A service as ``python -m agent2rl.grading.service`` builds it, without its HTTP app."""
    info = RunInfo.load(paths)
    spec = EvalSpec(info.task, info.task_options or {}, BackendConfig.from_dict(info.backend))
    ctx = GradingContext(
        paths=paths,
        info=info,
        token="t",
        settings=load_settings(),
        limits=SubmissionLimits(max_bytes=64 * 2**20),
        eval_timeout_s=120,
        base_model_dir=tiny.path,
        eval_spec=spec,
        grader="cold",
    )
    return GradingService(ctx)


def _counts(paths) -> tuple[int, int]:
    with Ledger(paths.ledger) as ledger:
        return len(ledger.submissions()), len(ledger.rejections())


def test_submit_and_refusals_without_http(run, tiny) -> None:
    service = _service(run, tiny)
    try:
        shutil.copytree(tiny.path, run.output / "base_copy")
        answer = service.submit("output/base_copy")
        # The base model itself: settled at once with the baseline's score, no evaluation.
        assert answer["status"] == "graded" and answer["is_copy"] is True, answer
        assert answer["score"] == answer["baseline"] and answer["eval_seconds"] == 0.0
        assert answer["submissions"] == 1 and answer["best_submission_id"] == 1
        assert service.submissions_view()["submissions"][0]["path"] == "output/base_copy"

        # A refusal after the row was recorded (a path outside output/, pickle weights)
        # names the row; the caller (the HTTP layer) records it, which withdraws the row in
        # favour of a rejection.
        with pytest.raises(SubmissionError) as refused:
            service.submit("../ledger.db")
        assert refused.value.status == 403 and "outside output/" in refused.value.message
        assert refused.value.sub_id is not None and _counts(run) == (2, 0)
        err = refused.value
        assert service.record_refusal(err.path, err.status, err.message, err.sub_id)[0] == 403
        assert _counts(run) == (1, 1)

        bad = run.output / "pickled"
        shutil.copytree(tiny.path, bad)
        (bad / "model.safetensors").rename(bad / "pytorch_model.bin")
        with pytest.raises(SubmissionError) as late:
            service.submit("output/pickled")
        assert late.value.sub_id is not None and late.value.path == "output/pickled"
        assert _counts(run) == (2, 1)
        service.record_refusal(late.value.path, 400, late.value.message, late.value.sub_id)
        assert _counts(run) == (1, 2)
        assert not run.submission_dir(late.value.sub_id).exists()

        with pytest.raises(SubmissionError, match="private feedback protocol"):
            service.mark_final(1)
        with pytest.raises(SubmissionError, match='"final" is only for runs'):
            service.submit("output/base_copy", final=True)
    finally:
        service.close()


def test_the_told_clock_is_the_only_clock(run, tiny) -> None:
    info = RunInfo.load(run)
    info.deadline = None  # the orchestrator has not started the clock yet
    info.save(run)
    service = _service(run, tiny)
    try:
        assert service.time_view()["deadline"] is None and service.remaining() == 0
        with pytest.raises(SubmissionError, match="has not started yet"):
            service.submit("output/anything")
        info.deadline = time.time() + 600  # run.json is not the service's clock
        info.save(run)
        with pytest.raises(SubmissionError, match="has not started yet"):
            service.submit("output/anything")
        now = time.time()
        service.tell_clock(now, now - 1)  # a deadline told is honoured, past ones too
        with pytest.raises(SubmissionError, match="budget is over"):
            service.submit("output/anything")
        with pytest.raises(SubmissionError, match="private feedback protocol"):
            service.mark_final(1)
        service.tell_clock(now, now + 300)
        assert service.time_view()["deadline"] == now + 300
        assert 0 < service.remaining() <= 300
    finally:
        service.close()


def test_the_orchestrator_tells_the_service_its_deadline(run, tiny) -> None:
    if not (run.output / "base_copy").exists():
        shutil.copytree(tiny.path, run.output / "base_copy")
    info = RunInfo.load(run)
    info.deadline = None
    info.save(run)
    handle, token = serve(run, tiny.path)
    client = httpx.Client(
        base_url=handle.url, timeout=60, headers={"Authorization": f"Bearer {token}"}
    )
    try:
        assert client.get("/time").json()["deadline"] is None
        r = client.post("/submit", json={"model_path": "output/base_copy"})
        assert r.status_code == 409 and "has not started yet" in r.json()["error"]
        start = time.time()
        tell_clock(handle, token, start, start + 300)  # returns once the service has it
        assert client.get("/time").json()["deadline"] == start + 300
        # run.json changing afterwards does not move the service's deadline.
        info.start, info.deadline = start - 10_000, start - 9_000
        info.save(run)
        told = client.get("/time").json()
        assert told["deadline"] == start + 300 and told["remaining_s"] > 0
        r = client.post("/submit", json={"model_path": "output/base_copy"})
        assert r.status_code == 200 and r.json()["status"] == "graded", r.text
        # Told again (the orchestrator's pipe only), a past deadline is honoured.
        tell_clock(handle, token, start, start - 1)
        r = client.post("/submit", json={"model_path": "output/base_copy"})
        assert r.status_code == 409 and "budget is over" in r.json()["error"]
    finally:
        client.close()
        handle.stop()
