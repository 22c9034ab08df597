"""Faults around a submission, over real HTTP against the real grading service: an evaluation
worker killed mid-evaluation, the service stopped (SIGTERM) or killed (SIGKILL) while
evaluating and with a submission queued, a full disk before and during the copy, a failing code
snapshot, a flood of refused requests. Every accepted submission ends graded or failed with a
reason, every refusal is a clear JSON error, and the ledger stays intact."""

from __future__ import annotations

import fcntl
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
import torch
from safetensors.torch import load_file, save_file
from support.rundirs import make_run

from agent2rl.child_process import ServiceHandle, start_announcing
from agent2rl.grading.ledger import Ledger
from agent2rl.grading.service import (
    TOKEN_ENV,
    close_unfinished,
    start_service,
    wait_for_in_flight,
)
from agent2rl.grading.submission import RUN_ENDED
from agent2rl.recording.snapshot import LOCK_NAME


@pytest.fixture(scope="module")
def run(tmp_path_factory, arith, tiny):
    task, prepared = arith
    return make_run(tmp_path_factory.mktemp("faults") / "run", task, prepared, tiny)


def _serve(
    paths, tiny, eval_timeout_s: float = 300, **options
) -> tuple[ServiceHandle, httpx.Client]:
    token = secrets.token_urlsafe(16)
    handle = start_service(
        paths,
        token,
        eval_timeout_s=eval_timeout_s,
        max_bytes=64 * 2**20,
        base_model_dir=tiny.path,
        **({"options": options} if options else {}),
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


def _worker_started(paths, timeout: float = 120) -> tuple[int, int]:
    """(submission id, pid) of the running evaluation worker of ``paths``' run (found by its
    command line in /proc: one runs at a time per run), waiting up to ``timeout``."""
    subs = str(paths.grading / "submissions")
    end = time.time() + timeout
    while time.time() < end:
        for proc in Path("/proc").glob("[0-9]*"):
            try:
                argv = (proc / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"agent2rl.grading.worker" not in argv:
                continue
            if b"--serve" in argv:  # a warm worker: the submission it has started on
                for started in Path(subs).glob("*/started.json"):
                    done = (started.parent / "result.json").exists()
                    if not done and json.loads(started.read_text())["pid"] == int(proc.name):
                        return int(started.parent.name), int(proc.name)
                continue
            if b"--out" not in argv:
                continue
            out = argv[argv.index(b"--out") + 1].decode()
            if out.startswith(subs) and not _gone(int(proc.name), 0):
                return int(Path(out).name), int(proc.name)
        time.sleep(0.05)
    raise AssertionError("no evaluation worker started")


def _gone(pid: int, timeout: float) -> bool:
    """True once ``pid`` has exited (a zombie counts as exited)."""
    end = time.time() + timeout
    while True:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return True
        if state in ("Z", "X"):
            return True
        if time.time() >= end:
            return False
        time.sleep(0.05)


def _rows(paths) -> dict:
    with Ledger(paths.ledger) as ledger:
        return {s.id: s for s in ledger.submissions()}


def test_a_killed_worker_is_a_retryable_harness_failure(run, tiny) -> None:
    paths = run
    rel = _perturbed(paths, tiny, "killed", seed=21)
    handle, client = _serve(paths, tiny)
    try:
        with ThreadPoolExecutor(1) as pool:
            answer = pool.submit(client.post, "/submit", json={"model_path": rel})
            _, pid = _worker_started(paths)
            os.kill(pid, signal.SIGKILL)
            first = answer.result()
        assert first.status_code == 200
        first = first.json()
        assert first["status"] == "failed" and first["failure_kind"] == "harness", first
        assert "signal 9" in first["error"]
        again = client.post("/submit", json={"model_path": rel}).json()
        assert again["status"] == "graded" and again["retry_of"] == first["submission_id"]
        assert again["duplicate_of"] is None
    finally:
        client.close()
        handle.stop()


def test_stopping_the_service_kills_its_worker_and_settles_queued_rows(run, tiny) -> None:
    """SIGTERM while one submission is evaluated and another waits behind it: the worker is
    killed at once (before: it ran on, in its own session, holding the device), and both rows
    end failed as the harness's, saying why (before: left 'evaluating' for good)."""
    paths = run
    running = _perturbed(paths, tiny, "stop-running", seed=22)
    queued = _perturbed(paths, tiny, "stop-queued", seed=23)
    handle, client = _serve(paths, tiny)
    try:
        with ThreadPoolExecutor(2) as pool:
            a = pool.submit(client.post, "/submit", json={"model_path": running})
            sub_a, pid = _worker_started(paths)
            b = pool.submit(client.post, "/submit", json={"model_path": queued})
            end = time.time() + 60
            while not any(s.path == queued for s in _rows(paths).values()):
                assert time.time() < end
                time.sleep(0.05)
            time.sleep(1.0)  # past its staging, waiting for the evaluation lock
            began = time.time()
            handle.stop()
            stop_s = time.time() - began
            assert _gone(pid, 5), "the evaluation worker outlived the grading service"
            for answer in (a, b):
                try:
                    r = answer.result(timeout=30)
                except httpx.HTTPError:
                    continue  # the connection closed with the service: the row says it all
                assert r.status_code == 200, r.text
    finally:
        client.close()
        handle.stop()
    assert stop_s < 8, "the service waited for its evaluation instead of stopping it"
    rows = _rows(paths)
    (sub_b,) = [s.id for s in rows.values() if s.path == queued]
    for sid in (sub_a, sub_b):
        assert rows[sid].status == "failed" and rows[sid].failure_kind == "harness", rows[sid]
        assert "stopped" in rows[sid].error or rows[sid].error == RUN_ENDED


def test_a_killed_service_takes_its_worker_along_and_the_row_is_closed(run, tiny) -> None:
    paths = run
    rel = _perturbed(paths, tiny, "service-killed", seed=24)
    handle, client = _serve(paths, tiny)
    try:
        with ThreadPoolExecutor(1) as pool:
            answer = pool.submit(client.post, "/submit", json={"model_path": rel})
            sub_id, pid = _worker_started(paths)
            handle.proc.kill()
            handle.proc.wait()
            assert _gone(pid, 5), "the evaluation worker outlived the SIGKILLed service"
            with pytest.raises(httpx.HTTPError):
                answer.result(timeout=30)
    finally:
        client.close()
        handle.stop()
    assert _rows(paths)[sub_id].status == "evaluating"
    with Ledger(paths.ledger) as ledger:
        assert sub_id in close_unfinished(ledger)
    row = _rows(paths)[sub_id]
    assert row.status == "failed" and row.failure_kind == "harness" and row.error == RUN_ENDED


def test_a_submission_is_recorded_before_it_is_copied(run, tiny) -> None:
    """While the snapshot (and then the copy) of a submission is held up, its row exists
    already: the run's end waits for it instead of stopping the service under it."""
    paths = run
    rel = _perturbed(paths, tiny, "recorded-first", seed=25)
    handle, client = _serve(paths, tiny)
    lock = paths.code_git / LOCK_NAME
    lock.parent.mkdir(parents=True, exist_ok=True)
    try:
        with open(lock, "a") as held, ThreadPoolExecutor(1) as pool:
            fcntl.flock(held, fcntl.LOCK_EX)  # the periodic snapshotter, taking its time
            answer = pool.submit(client.post, "/submit", json={"model_path": rel})
            end = time.time() + 30
            while not any(s.path == rel for s in _rows(paths).values()):
                assert time.time() < end, "no row while the submission waits for its snapshot"
                time.sleep(0.05)
            with Ledger(paths.ledger) as ledger:
                assert [s.path for s in ledger.in_flight()] == [rel]
            fcntl.flock(held, fcntl.LOCK_UN)
            body = answer.result(timeout=300).json()
        assert body["status"] == "graded" and body["path"] == rel
    finally:
        client.close()
        handle.stop()


def test_a_failing_snapshot_is_recorded_and_the_submission_graded(run, tiny) -> None:
    paths = run
    rel = f"output/{'snapshot-broken'}"
    shutil.copytree(tiny.path, paths.workspace / rel)
    saved = paths.code_git.with_name("code.git.saved")
    paths.code_git.rename(saved)
    paths.code_git.write_text("not a git directory")  # every snapshot now fails
    handle, client = _serve(paths, tiny)
    try:
        r = client.post("/submit", json={"model_path": rel})
        assert r.status_code == 200, r.text  # before: a 500 and no record
        body = r.json()
        assert body["status"] == "graded" and body["is_copy"]
    finally:
        client.close()
        handle.stop()
        paths.code_git.unlink()
        saved.rename(paths.code_git)
    with Ledger(paths.ledger) as ledger:
        errors = ledger.get_meta("snapshot_errors")
        assert ledger.submission(body["submission_id"]).snapshot is None
    assert "Error" in errors[str(body["submission_id"])]


def test_refusals_are_rate_limited_and_bounded(run, tiny) -> None:
    """A flood of refused requests (wrong token, huge paths, huge bodies): at most the
    per-minute number is stored, the rest answered 429 and counted; what is stored is cut, so
    the ledger grows by kilobytes (before: 5 requests grew it by 30 MB)."""
    paths = run
    handle, client = _serve(paths, tiny, rejections_per_minute=5)
    with Ledger(paths.ledger) as ledger:
        before = len(ledger.rejections())
    size_before = sum(f.stat().st_size for f in paths.root.glob("ledger.db*"))
    wrong = {"Authorization": "Bearer wrong"}
    answers = []
    try:
        for _ in range(6):
            answers.append(client.post("/submit", json={"model_path": "x" * 4000}, headers=wrong))
            answers.append(client.post("/submit", json={"model_path": "y" * 60_000}))
            answers.append(
                client.post(
                    "/submit",
                    content=b'{"model_path": "' + b"z" * 3_000_000 + b'"}',
                    headers={"Content-Type": "application/json"},
                )
            )
        assert client.get("/health").status_code == 200
    finally:
        client.close()
        handle.stop()
    codes = [a.status_code for a in answers]
    assert all(a.json()["error"] for a in answers)
    assert codes[:3] == [401, 400, 413]
    assert codes.count(429) == len(answers) - 5, codes
    assert all(
        "too many refused requests" in a.json()["error"] for a in answers if a.status_code == 429
    )
    with Ledger(paths.ledger) as ledger:
        stored = ledger.rejections()[before:]
        assert len(stored) == 5
        assert ledger.get_meta("rejections_unrecorded") == len(answers) - 5
    assert all(len(r.path or "") <= 1100 and len(r.reason) <= 1100 for r in stored)
    grown = sum(f.stat().st_size for f in paths.root.glob("ledger.db*")) - size_before
    assert grown < 512 * 1024, grown


def test_the_end_of_a_run_waits_while_queued_rows_keep_settling(tmp_path) -> None:
    """Three rows queued one behind another, each settling within the per-row timeout: all
    are waited for, though together they take longer than it (before: one fixed timeout for
    all of them cut the queue)."""
    with Ledger(tmp_path / "ledger.db") as ledger:
        ids = [ledger.add_submission(f"output/v{i}", None, None) for i in range(3)]

        def settle() -> None:
            for sid in ids:
                time.sleep(0.9)
                ledger.update_submission(sid, status="graded", score=1.0)

        t = threading.Thread(target=settle)
        t.start()
        began = time.time()
        left = wait_for_in_flight(ledger, per_row_timeout_s=2.0)
        t.join()
        assert left == [] and time.time() - began > 2.0
        stuck = ledger.add_submission("output/stuck", None, None)
        assert wait_for_in_flight(ledger, per_row_timeout_s=1.0) == [stuck]
        assert close_unfinished(ledger) == [stuck]
        assert ledger.submission(stuck).error == RUN_ENDED


# -- a full disk -------------------------------------------------------------------------------


def _can_mount() -> bool:
    prefix = _ns_prefix()
    try:
        probe = subprocess.run(
            [*prefix, "sh", "-c", "mount -t tmpfs -o size=1m tmpfs /mnt"],
            capture_output=True,
            timeout=30,
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return probe.returncode == 0


def _ns_prefix() -> list[str]:
    # A private mount namespace: the tmpfs is seen only by the service it is made for.
    return ["unshare", "-m"] if os.geteuid() == 0 else ["unshare", "-r", "-m"]


def _serve_on_small_disk(paths, tiny, disk: Path, size: str, inodes: int, **options):
    """The real service with grading/staging and grading/submissions on a small tmpfs of its
    own (``size`` bytes, ``inodes`` files and directories), everything else as usual."""
    token = secrets.token_urlsafe(16)
    g = paths.grading
    disk.mkdir()
    script = (
        "set -e; "
        f"mount -t tmpfs -o size={size},nr_inodes={inodes} tmpfs {disk}; "
        f"mkdir -p {disk}/staging {disk}/submissions {g}/staging {g}/submissions; "
        f"mount --bind {disk}/staging {g}/staging; "
        f"mount --bind {disk}/submissions {g}/submissions; "
        'exec "$@"'
    )
    cmd = [*_ns_prefix(), "sh", "-c", script, "sh", sys.executable, "-m"]
    cmd += ["agent2rl.grading.service", str(paths.root), "--eval-timeout", "300"]
    cmd += ["--max-bytes", str(64 * 2**20), "--base-model", str(tiny.path)]
    for name, value in options.items():
        cmd += ["--" + name.replace("_", "-"), str(value)]
    proc, port = start_announcing(
        cmd,
        env={**os.environ, TOKEN_ENV: token},
        ready_file=paths.service_json,
        log_file=paths.service_log,
        name="grading service",
    )
    handle = ServiceHandle(proc, port)
    return handle, httpx.Client(
        base_url=handle.url, timeout=300, headers={"Authorization": f"Bearer {token}"}
    )


@pytest.mark.skipif(not _can_mount(), reason="needs unshare and tmpfs mounts in a mount namespace")
@pytest.mark.parametrize(
    ("size", "inodes", "options", "match"),
    [
        # Less room than the model: refused before anything is copied.
        ("2m", 64, {}, "too full to copy"),
        # Room by the byte count, but the disk fills up (no inodes left) mid-copy.
        ("64m", 6, {"disk_margin_bytes": 0}, "filled up while copying"),
    ],
)
def test_a_full_disk_is_a_clear_refusal_and_the_ledger_stays_intact(
    tmp_path, arith, tiny, size, inodes, options, match
) -> None:
    task, prepared = arith
    paths = make_run(tmp_path / "run", task, prepared, tiny)
    shutil.copytree(tiny.path, paths.output / "v1")
    handle, client = _serve_on_small_disk(paths, tiny, tmp_path / "disk", size, inodes, **options)
    try:
        r = client.post("/submit", json={"model_path": "output/v1"})
        assert r.status_code == 507, r.text  # before: a 500
        assert match in r.json()["error"]
        listing = client.get("/submissions")
        assert listing.status_code == 200 and listing.json()["submissions"] == []
        again = client.post("/submit", json={"model_path": "output/v1"})
        assert again.status_code == 507, again.text  # the partial copy was removed: same
    finally:
        client.close()
        handle.stop()
    with Ledger(paths.ledger) as ledger:
        assert ledger.submissions() == []
        assert [r.http_status for r in ledger.rejections()] == [507, 507]
        assert ledger.get_meta("baseline")["score"] is not None
