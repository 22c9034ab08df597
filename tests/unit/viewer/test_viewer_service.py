"""The viewer's answers without HTTP: :class:`ViewerService` over the run directory the
viewer app tests write with the real parts (grader's Ledger, code recorder, transcript
writer). What it cannot find or will not page is a :class:`Refused` with the status the
HTTP layer answers; reading changes no file of the run."""

from __future__ import annotations

import pytest
from test_viewer_app import RUN_ID, _tree, make_run

from agent2rl.http_api import Refused
from agent2rl.study.spec import StudySpec, expand
from agent2rl.study.state import StudyState
from agent2rl.viewer.app import ViewerService


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> ViewerService:
    root = tmp_path_factory.mktemp("viewer-service") / "runs"
    make_run(root)
    return ViewerService(root)


def _refused(status: int, call, *args, **kw) -> str:
    with pytest.raises(Refused) as err:
        call(*args, **kw)
    assert err.value.status == status, err.value.message
    return err.value.message


def test_a_run_read_through_the_service(service: ViewerService) -> None:
    before = _tree(service.index.root)
    service.warm()
    page = service.runs()
    assert [r["run_id"] for r in page["runs"]] == [RUN_ID] and page["total"] == 1
    assert page["studies"] == [] and page["offset"] == 0
    s = service.summary(RUN_ID)
    assert (s["submissions"], s["best"], s["baseline"], s["llm_calls"]) == (1, 0.5, 0.25, 2)
    tl = service.timeline(RUN_ID)
    assert tl["dropped"] == 0 and tl["summary"]["run_id"] == RUN_ID
    sub = next(e for e in tl["events"] if e["kind"] == "submission")
    snap = next(e for e in tl["events"] if e["id"] == sub["snapshot_id"])
    assert "+LR = 0.01" in service.diff(RUN_ID, snap["sha"])
    assert service.search(RUN_ID, "ZEBRA-striped")["ids"] == ["llm-1"]
    assert service.exchange(RUN_ID, 0)["request"]["system"] == "You are a coding agent."
    charts = service.charts(RUN_ID)
    assert [row[1] for row in charts["scores"]] == [0.5] and charts["baseline"] == 0.25
    assert charts["tokens"][-1][1] == 49  # 10 + 5 + 30 + 4: cumulative, the last kept
    assert _tree(service.index.root) == before


def test_what_is_not_there_or_out_of_range_is_refused(service: ViewerService) -> None:
    assert "no run 'nope'" in _refused(404, service.summary, "nope")
    _refused(404, service.timeline, "nope")
    assert "no code snapshot" in _refused(404, service.diff, RUN_ID, "0123456789abcdef")
    _refused(404, service.diff, RUN_ID, "../../etc")
    assert "#99" in _refused(404, service.exchange, RUN_ID, 99)
    assert "500 characters" in _refused(400, service.search, RUN_ID, "x" * 501)
    assert "no study 'nope'" in _refused(404, service.study, "nope")
    for offset, limit in ((-1, 10), (0, 0), (0, 1001)):
        assert "offset" in _refused(400, service.runs, offset, limit)
        _refused(400, service.study, "nope", offset, limit)
    assert service.runs(offset=1)["runs"] == []


def test_a_study_page_names_each_slots_run(tmp_path) -> None:
    study_dir = tmp_path / "top" / "sweep"
    run = make_run(study_dir / "runs")
    base = {"name": "sweep", "tasks": ["arith-lite"], "agents": ["reference-sft"], "budget": "1m"}
    spec = StudySpec.model_validate(base | {"repeats": 2})
    with StudyState(study_dir, create=True) as state:
        state.bind(spec, "text")
        state.sync_slots(expand(spec))
        first = state.slots()[0]
        n = state.queue_attempt(first.id)
        state.end_attempt(
            first.id, n, run_id=RUN_ID, run_dir=str(run.root), run_status="deadline", error=None
        )
    service = ViewerService(tmp_path / "top")
    assert [s["id"] for s in service.runs()["studies"]] == ["sweep"]
    page = service.study("sweep")
    assert (page["name"], page["total"], page["counts"]) == (
        "sweep",
        2,
        {"finished": 1, "pending": 1},
    )
    done, pending = page["slots"]
    assert (done["run_id"], done["best"], done["submissions"]) == (RUN_ID, 0.5, 1)
    assert 0 < done["progress"] < 1  # the run is live, a tenth through its budget
    assert (pending["run_id"], pending["best"], pending["progress"]) == (None, None, None)
    assert [s["id"] for s in service.study("sweep", offset=1)["slots"]] == [pending["id"]]
