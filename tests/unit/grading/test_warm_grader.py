"""The warm grader (issue #28 item 2) against the cold one, through the real service: the same
submissions get the same per-item results; a killed warm worker is a retryable harness
failure; a submission with another config or tokenizer is loaded afresh. Also the latency
breakdown (item 1) every evaluated row carries in the ledger."""

from __future__ import annotations

import fcntl
import json
import os
import secrets
import shutil
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
import torch
from safetensors.torch import load_file, save_file
from support.rundirs import make_run

from agent2rl.grading.ledger import Ledger
from agent2rl.grading.service import start_service
from agent2rl.settings import load_settings

SEEDS = (31, 32, 33)

pytestmark = pytest.mark.slow  # three services, about ten evaluations: minutes on a loaded host


def _serve(paths, tiny, grader: str):
    token = secrets.token_urlsafe(16)
    handle = start_service(
        paths,
        token,
        eval_timeout_s=300,
        max_bytes=64 * 2**20,
        base_model_dir=tiny.path,
        options={"grader": grader},
    )
    client = httpx.Client(
        base_url=handle.url, timeout=300, headers={"Authorization": f"Bearer {token}"}
    )
    return handle, client


def _perturbed(paths, tiny, name: str, seed: int) -> str:
    dest = paths.output / name
    shutil.copytree(tiny.path, dest)
    g = torch.Generator().manual_seed(seed)
    tensors = load_file(tiny.path / "model.safetensors")
    tensors = {k: v + 0.01 * torch.randn(v.shape, generator=g) for k, v in tensors.items()}
    save_file(tensors, dest / "model.safetensors", metadata={"format": "pt"})
    return f"output/{name}"


def _items(paths, row) -> list[dict]:
    lines = (paths.root / row.items_path).read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def _rows(paths) -> dict:
    with Ledger(paths.ledger) as ledger:
        return {s.id: s for s in ledger.submissions()}


@pytest.fixture(scope="module")
def graded(tmp_path_factory, arith, tiny):
    """The same three perturbed submissions graded by a cold and by a warm service (each its
    own run); then the warm service stays up for the other tests."""
    task, prepared = arith
    out: dict[str, tuple] = {}
    for grader in ("cold", "warm"):
        paths = make_run(tmp_path_factory.mktemp(grader) / "run", task, prepared, tiny)
        rels = [_perturbed(paths, tiny, f"s{seed}", seed) for seed in SEEDS]
        handle, client = _serve(paths, tiny, grader)
        answers = [client.post("/submit", json={"model_path": rel}).json() for rel in rels]
        out[grader] = (paths, handle, client, answers)
        if grader == "cold":
            client.close()
            handle.stop()
    yield out
    _, handle, client, _ = out["warm"]
    client.close()
    handle.stop()


def test_warm_and_cold_grade_identically(graded) -> None:
    cold_paths, _, _, cold = graded["cold"]
    warm_paths, _, _, warm = graded["warm"]
    cold_rows, warm_rows = _rows(cold_paths), _rows(warm_paths)
    for c, w in zip(cold, warm, strict=True):
        assert c["status"] == w["status"] == "graded", (c, w)
        assert c["score"] == w["score"]
        crow, wrow = cold_rows[c["submission_id"]], warm_rows[w["submission_id"]]
        assert crow.eval_hash == wrow.eval_hash
        assert _items(cold_paths, crow) == _items(warm_paths, wrow)
        assert crow.timings["grader"] == "cold" and wrow.timings["grader"] == "warm"
    # The scores differ between submissions: a warm worker grading its first model again
    # would not pass the comparison above by luck.
    assert len({json.dumps(_items(warm_paths, warm_rows[w["submission_id"]])) for w in warm}) > 1
    # The first warm evaluation loads the model, the later ones reload weights into it.
    loads = [warm_rows[w["submission_id"]].timings["load"] for w in warm]
    assert loads == ["fresh", "reload", "reload"], loads
    assert all(cold_rows[c["submission_id"]].timings["load"] == "fresh" for c in cold)


def test_every_evaluated_row_has_a_latency_breakdown(graded) -> None:
    for grader in ("cold", "warm"):
        paths, _, _, answers = graded[grader]
        for a in answers:
            t = _rows(paths)[a["submission_id"]].timings
            for key in (
                "queue_wait_s",
                "staging_s",
                "process_start_s",
                "setup_s",
                "lock_wait_s",
                "load_s",
                "generate_s",
                "score_s",
            ):
                assert isinstance(t[key], float) and t[key] >= 0, (grader, key, t)
            assert t["generate_s"] > 0 and t["evaluated"] is True
            parts = t["process_start_s"] + t["setup_s"] + t["load_s"] + t["generate_s"]
            assert parts <= t["eval_s"] + 0.5, t


def test_a_config_change_is_loaded_afresh_with_the_same_results(graded, tiny) -> None:
    paths, _, client, warm = graded["warm"]
    rel = _perturbed(paths, tiny, "reformatted", SEEDS[0])
    config = paths.workspace / rel / "config.json"
    # Same meaning, other bytes: another structure fingerprint, so no in-place reload.
    config.write_text(json.dumps(json.loads(config.read_text()), indent=4))
    answer = client.post("/submit", json={"model_path": rel}).json()
    assert answer["status"] == "graded" and answer["duplicate_of"] is None, answer
    rows = _rows(paths)
    row, same_weights = rows[answer["submission_id"]], rows[warm[0]["submission_id"]]
    assert row.timings["load"] == "fresh", row.timings
    assert answer["score"] == warm[0]["score"]
    assert _items(paths, row) == _items(paths, same_weights)


def _warm_pid(service_pid: int, timeout: float = 60) -> int:
    """The warm worker of the service ``service_pid`` (its child running ``--serve``)."""
    end = time.time() + timeout
    while time.time() < end:
        for proc in Path("/proc").glob("[0-9]*"):
            try:
                stat = (proc / "stat").read_text().rsplit(")", 1)[1].split()
                argv = (proc / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if int(stat[1]) == service_pid and b"--serve" in argv and stat[0] not in "ZX":
                return int(proc.name)
        time.sleep(0.05)
    raise AssertionError("no warm worker")


def test_a_warm_worker_killed_mid_evaluation_is_a_retryable_harness_failure(graded, tiny) -> None:
    """The warm worker is held mid-request (waiting for the device lock, which the test
    holds) and killed: the row fails as the harness's, and the same files submitted again
    are graded by a new worker."""
    paths, handle, client, _ = graded["warm"]
    rel = _perturbed(paths, tiny, "killed", 41)  # new files: not a duplicate
    before = _warm_pid(handle.proc.pid)
    locks = load_settings().locks
    locks.mkdir(parents=True, exist_ok=True)
    with open(locks / "eval-cpu.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        with ThreadPoolExecutor(1) as pool:
            answer = pool.submit(client.post, "/submit", json={"model_path": rel})
            end = time.time() + 60
            while not any(s.path == rel and s.fingerprint for s in _rows(paths).values()):
                assert time.time() < end, "the submission was not taken in"
                time.sleep(0.05)
            time.sleep(1.0)  # its request is with the worker, which waits for the lock
            os.killpg(before, signal.SIGKILL)
            first = answer.result(timeout=120).json()
    assert first["status"] == "failed" and first["failure_kind"] == "harness", first
    assert "signal 9" in first["error"]
    again = client.post("/submit", json={"model_path": rel}).json()
    assert again["status"] == "graded" and again["retry_of"] == first["submission_id"], again
    assert _warm_pid(handle.proc.pid) != before
    assert _rows(paths)[again["submission_id"]].timings["load"] == "fresh"
