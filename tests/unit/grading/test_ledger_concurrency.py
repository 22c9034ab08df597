"""The grading service under concurrent requests, over real HTTP: FastAPI answers from a
threadpool, and every request that touches the ledger must land whole.

Before :mod:`agent2rl.sqlite_store`, 50 concurrent identical submissions to a live run got
an HTTP 500 (``cannot start a transaction within a transaction``) and a submission was lost.
"""

from __future__ import annotations

import shutil
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from support.rundirs import make_run, serve

from agent2rl.grading.ledger import Ledger

N = 50


@pytest.fixture(scope="module")
def service(tmp_path_factory, arith, tiny):
    task, prepared = arith
    paths = make_run(tmp_path_factory.mktemp("conc") / "run", task, prepared, tiny)
    handle, token = serve(paths, tiny.path)
    yield paths, handle.url, token
    handle.stop()


def test_concurrent_submissions_and_bad_tokens_lose_nothing(service, tiny) -> None:
    """50 identical submissions (a copy of the base model) and 50 requests with a wrong
    token, all at once: no 5xx; every accepted submission is in the ledger, graded, with the
    id its answer gave; every refusal is a 4xx with a JSON error."""
    paths, url, token = service
    shutil.copytree(tiny.path, paths.output / "same")

    def post(auth: str) -> httpx.Response:
        return httpx.post(
            f"{url}/submit",
            json={"model_path": "output/same"},
            headers={"Authorization": f"Bearer {auth}"},
            timeout=300,
        )

    with Ledger(paths.ledger) as ledger:
        before = len(ledger.submissions())
    with ThreadPoolExecutor(2 * N) as pool:
        good = [pool.submit(post, token) for _ in range(N)]
        bad = [pool.submit(post, "wrong-" + token) for _ in range(N)]
        good_r = [f.result() for f in good]
        bad_r = [f.result() for f in bad]

    assert [r.status_code for r in good_r] == [200] * N, [r.text for r in good_r][:3]
    for r in bad_r:
        assert 400 <= r.status_code < 500 and r.json()["error"]
    with Ledger(paths.ledger) as ledger:
        subs = {s.id: s for s in ledger.submissions()}
        answered = {r.json()["submission_id"]: r.json()["score"] for r in good_r}
        assert len(subs) == before + N and len(answered) == N
        for sid, score in answered.items():
            assert subs[sid].status == "graded" and subs[sid].score == score
        assert ledger.rejection_count() >= sum(r.status_code == 401 for r in bad_r)
