"""Over real HTTP: whose fault a failed evaluation was decides whether it is cached (the model's)
or evaluated again (the harness's, with the retry recorded); and every submission's model
identity reaches the ledger, the answer and the run report, without changing its score."""

from __future__ import annotations

import json
import secrets
import shutil
import sqlite3

import httpx
import pytest
import torch
from safetensors.torch import load_file, save_file
from support.finetune import fine_tune
from support.rundirs import make_run

from agent2rl.analysis import compute_metrics, render_html, render_markdown
from agent2rl.analysis.dashboard.results import results_row
from agent2rl.errors import ModelFault
from agent2rl.grading.evaluator import EvalSpec, run_evaluation
from agent2rl.grading.ledger import Ledger
from agent2rl.grading.service import start_service
from agent2rl.grading.worker import failure_kind
from agent2rl.models.tiny import build_tiny
from agent2rl.settings import load_settings


@pytest.fixture(scope="module")
def run(tmp_path_factory, arith, tiny):
    task, prepared = arith
    return make_run(tmp_path_factory.mktemp("failures") / "run", task, prepared, tiny)


def _serve(paths, tiny, eval_timeout_s: float):
    token = secrets.token_urlsafe(16)
    handle = start_service(
        paths, token, eval_timeout_s=eval_timeout_s, max_bytes=64 * 2**20, base_model_dir=tiny.path
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


def test_harness_failures_are_retried_and_model_failures_cached(run, tiny) -> None:
    paths = run
    rel = _perturbed(paths, tiny, "v1", seed=11)
    shutil.copytree(paths.workspace / rel, paths.output / "v1-again")
    shutil.copytree(paths.workspace / rel, paths.output / "v1-third")

    # A loaded machine: no evaluation can finish in 0.2 s. The harness's fault.
    handle, client = _serve(paths, tiny, eval_timeout_s=0.2)
    try:
        first = client.post("/submit", json={"model_path": rel}).json()
        assert first["status"] == "failed" and first["failure_kind"] == "harness", first
        assert "timed out" in first["error"] and first["score"] is None
        # The same files again on the same loaded machine: evaluated again, not answered
        # with the cached failure.
        second = client.post("/submit", json={"model_path": "output/v1-again"}).json()
        assert second["duplicate_of"] is None and second["eval_seconds"] > 0
        assert second["retry_of"] == first["submission_id"]
        assert second["failure_kind"] == "harness"
    finally:
        client.close()
        handle.stop()

    # The machine recovers: the same weights get graded, and the row says what it retried.
    handle, client = _serve(paths, tiny, eval_timeout_s=300)
    try:
        third = client.post("/submit", json={"model_path": "output/v1-third"}).json()
        assert third["status"] == "graded" and third["score"] is not None, third
        assert third["retry_of"] == second["submission_id"] and third["duplicate_of"] is None
        assert third["failure_kind"] is None and third["eval_seconds"] > 0
        # Once graded, the same files are a plain duplicate of the graded row.
        again = client.post("/submit", json={"model_path": rel}).json()
        assert again["duplicate_of"] == third["submission_id"] and again["eval_seconds"] == 0
        assert again["score"] == third["score"]

        # A model the evaluation refuses: the model's fault, cached. Its duplicate is not
        # evaluated.
        broken = paths.output / "broken"
        shutil.copytree(tiny.path, broken)
        # Passes the checks while staging (a config transformers cannot build, weights that
        # do not fit it, a tokenizer that does not load: all refused there); the evaluation
        # refuses it as the model's fault: a decoder other than the base's.
        tok = json.loads((broken / "tokenizer.json").read_text())
        tok["decoder"] = {"type": "Replace", "pattern": {"String": "7"}, "content": "8"}
        (broken / "tokenizer.json").write_text(json.dumps(tok))
        bad = client.post("/submit", json={"model_path": "output/broken"}).json()
        assert bad["status"] == "failed" and bad["failure_kind"] == "model", bad
        assert "evaluation failed" in bad["error"] and bad["eval_seconds"] > 0
        shutil.copytree(broken, paths.output / "broken-again")
        cached = client.post("/submit", json={"model_path": "output/broken-again"}).json()
        assert cached["duplicate_of"] == bad["submission_id"] and cached["eval_seconds"] == 0
        assert cached["status"] == "failed" and cached["failure_kind"] == "model"
        assert cached["retry_of"] is None and cached["error"] == bad["error"]

        listing = {s["submission_id"]: s for s in client.get("/submissions").json()["submissions"]}
        assert listing[first["submission_id"]]["failure_kind"] == "harness"
        assert listing[third["submission_id"]]["retry_of"] == second["submission_id"]
        assert listing[cached["submission_id"]]["failure_kind"] == "model"
    finally:
        client.close()
        handle.stop()

    with Ledger(paths.ledger) as ledger:
        rows = {s.id: s for s in ledger.submissions()}
    assert rows[third["submission_id"]].retry_of == second["submission_id"]
    m = compute_metrics(paths)
    trajectory = {tr.id: tr for tr in m.trajectory}
    assert trajectory[first["submission_id"]].failure_kind == "harness"
    assert trajectory[third["submission_id"]].retry_of == second["submission_id"]
    md = render_markdown(m)
    assert f"retry of \\#{second['submission_id']}" in md
    assert "the model's fault" in md and "retryable" in md


def test_identity_reaches_ledger_answer_and_report_without_changing_scores(run, tiny) -> None:
    paths = run
    seeded = build_tiny(paths.output / "other-pretrained", seed=1)
    tuned = fine_tune(tiny.path, paths.output / "tuned", steps=30)
    (tuned / "chat_template.jinja").write_text("{{ messages[0].content }}\nAnswer:")
    handle, client = _serve(paths, tiny, eval_timeout_s=300)
    try:
        other = client.post("/submit", json={"model_path": "output/other-pretrained"}).json()
        mine = client.post("/submit", json={"model_path": "output/tuned"}).json()
        listing = {s["submission_id"]: s for s in client.get("/submissions").json()["submissions"]}
    finally:
        client.close()
        handle.stop()
    assert seeded.is_dir()
    # Flagged in the answer, graded all the same.
    assert other["status"] == "graded" and other["score"] is not None
    assert other["identity"]["derived"] is False
    assert any("weights unrelated" in r for r in other["identity"]["reasons"])
    assert mine["status"] == "graded" and mine["identity"]["derived"] is True
    assert mine["identity"]["reasons"] == [] and mine["identity"]["chat_template_changed"]
    assert listing[other["submission_id"]]["identity"] == other["identity"]

    with Ledger(paths.ledger) as ledger:
        row = ledger.submission(other["submission_id"])
    assert row.identity["derived"] is False and row.identity["related_share"] == 0.0
    assert row.score == other["score"]

    m = compute_metrics(paths)
    assert other["submission_id"] in m.not_derived_submissions
    assert mine["submission_id"] not in m.not_derived_submissions
    assert m.chat_template_submissions == [mine["submission_id"]]
    assert "model_not_derived" in m.integrity_flags
    scores = {tr.id: tr.score for tr in m.trajectory}
    assert scores[other["submission_id"]] == other["score"]  # never changed
    md = render_markdown(m)
    assert "## Integrity" in md and "model not derived from the base" in md
    assert f"Submission \\#{other['submission_id']} does not derive" in md
    assert "NOT DERIVED" in md
    html = render_html(m)
    assert 'class="flag"' in html and "does not derive from the base model" in html
    row = results_row(paths.root, m)
    assert row["integrity_flags"] == "model_not_derived"  # a template is recorded, not flagged
    assert row["not_derived"] == len(m.not_derived_submissions)
    assert row["contaminated"] is None  # the contamination check did not run here


def test_a_broken_own_chat_template_is_the_models_fault(tmp_path, arith, tiny) -> None:
    """A real worker process: the model's own chat template does not render."""
    task, _ = arith
    model = shutil.copytree(tiny.path, tmp_path / "model")
    cfg = json.loads((model / "tokenizer_config.json").read_text())
    cfg["chat_template"] = "{% for m in messages %}{{ m.content }"  # unclosed tag
    (model / "tokenizer_config.json").write_text(json.dumps(cfg))
    outcome = run_evaluation(
        EvalSpec(task.name, task.opts), model, tmp_path / "out", load_settings(), timeout_s=300
    )
    assert outcome.error is not None and outcome.failure == "model", outcome
    assert "Template" in outcome.error


@pytest.mark.parametrize(
    ("stage", "error", "kind"),
    [
        ("setup", ValueError("bad task data"), "harness"),
        ("load", RuntimeError("size mismatch for model.embed_tokens.weight"), "model"),
        ("load", OSError("does not appear to have a file named config.json"), "model"),
        ("load", MemoryError(), "harness"),
        ("load", RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"), "harness"),
        ("evaluate", RuntimeError("judge returned HTTP 503"), "harness"),
        ("evaluate", ConnectionError("connection refused"), "harness"),
    ],
)
def test_failure_kind_by_stage(stage, error, kind) -> None:
    assert failure_kind(stage, error) == kind


def test_model_fault_is_the_models() -> None:
    assert failure_kind("evaluate", ModelFault("the judge refused the output")) == "model"


def test_an_older_ledger_gains_the_columns_and_its_failures_are_retryable(tmp_path) -> None:
    path = tmp_path / "ledger.db"
    with sqlite3.connect(path) as conn:
        conn.executescript(
            """CREATE TABLE submissions (id INTEGER PRIMARY KEY, submitted_at REAL NOT NULL,
            finished_at REAL, path TEXT NOT NULL, weights_hash TEXT, fingerprint TEXT,
            status TEXT NOT NULL, score REAL, n_items INTEGER, items_path TEXT,
            eval_seconds REAL, error TEXT, snapshot TEXT, is_copy INTEGER NOT NULL DEFAULT 0,
            duplicate_of INTEGER, eval_hash TEXT);
            INSERT INTO submissions (submitted_at, path, fingerprint, status, error)
            VALUES (1.0, 'output/v1', 'F', 'failed', 'evaluation timed out after 60s');"""
        )
    with Ledger(path) as ledger:
        (old,) = ledger.submissions()
        assert old.failure_kind is None and old.identity is None and old.retry_of is None
        assert ledger.graded_with_fingerprint("F") is None
        assert ledger.retryable_failure("F").id == old.id
        sid = ledger.add_submission("output/v2", None, None)
        ledger.update_submission(
            sid, fingerprint="F", status="failed", failure_kind="model", identity={"derived": 1}
        )
        assert ledger.graded_with_fingerprint("F").id == sid
        assert ledger.submission(sid).identity == {"derived": 1}
