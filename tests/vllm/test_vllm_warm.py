"""The warm vLLM grader through the real grading service (issue #37 item 2): submissions with
different weights get the scores a cold engine gives them, the later ones by an in-place
reload; a changed structure loads a fresh engine; a reload that raises is replaced by a fresh
engine in the same evaluation and never blamed on the model."""

from __future__ import annotations

import json
import secrets
import shutil

import httpx
import pytest
import torch
from safetensors.torch import load_file, save_file
from support.rundirs import make_run, perturbed_copy

from agent2rl.grading.ledger import Ledger
from agent2rl.grading.service import start_service
from agent2rl.inference.backend import BackendConfig
from agent2rl.rundir import RunInfo

pytestmark = pytest.mark.vllm

SEEDS = (51, 52, 53)
#: weights' noise: enough that the three submissions score apart
SCALE = 0.05


def _items(paths, row) -> list[dict]:
    lines = (paths.root / row.items_path).read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def _rows(paths) -> dict:
    with Ledger(paths.ledger) as ledger:
        return {s.id: s for s in ledger.submissions()}


def _vllm_run(root, arith, tiny):
    task, prepared = arith
    paths = make_run(root, task, prepared, tiny)
    info = RunInfo.load(paths)
    info.backend = BackendConfig(kind="vllm", dtype="float32").to_dict()
    info.save(paths)
    return paths


def _serve(paths, tiny, grader: str):
    token = secrets.token_urlsafe(16)
    handle = start_service(
        paths,
        token,
        eval_timeout_s=600,
        max_bytes=64 * 2**20,
        base_model_dir=tiny.path,
        options={"grader": grader},
    )
    client = httpx.Client(
        base_url=handle.url, timeout=600, headers={"Authorization": f"Bearer {token}"}
    )
    return handle, client


@pytest.fixture(scope="module")
def graded(tmp_path_factory, arith, tiny, trained):
    """Three submissions (the fine-tuned model with noise) graded by a cold and by a warm
    vLLM service; the warm one stays up for the other tests."""
    out: dict[str, tuple] = {}
    for grader in ("cold", "warm"):
        paths = _vllm_run(tmp_path_factory.mktemp(grader) / "run", arith, tiny)
        rels = []
        for seed in SEEDS:
            perturbed_copy(trained, paths.output / f"s{seed}", seed, SCALE)
            rels.append(f"output/s{seed}")
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


def test_warm_reloads_grade_as_a_cold_engine(graded) -> None:
    cold_paths, _, _, cold = graded["cold"]
    warm_paths, _, _, warm = graded["warm"]
    cold_rows, warm_rows = _rows(cold_paths), _rows(warm_paths)
    for c, w in zip(cold, warm, strict=True):
        assert c["status"] == w["status"] == "graded", (c, w)
        assert c["score"] == w["score"]
        crow, wrow = cold_rows[c["submission_id"]], warm_rows[w["submission_id"]]
        assert _items(cold_paths, crow) == _items(warm_paths, wrow)
    # three different models: a warm engine still holding its first weights would fail above
    assert len({w["score"] for w in warm}) > 1, warm
    loads = [warm_rows[w["submission_id"]].timings["load"] for w in warm]
    assert loads == ["fresh", "reload", "reload"], loads
    assert all(cold_rows[c["submission_id"]].timings["load"] == "fresh" for c in cold)


def test_a_changed_tokenizer_loads_a_fresh_engine(graded, trained) -> None:
    paths, _, client, warm = graded["warm"]
    rel = "output/retokenized"
    perturbed_copy(trained, paths.workspace / rel, SEEDS[0], SCALE)
    cfg = paths.workspace / rel / "tokenizer_config.json"
    # the same tokenizer in other bytes: another structure, so no in-place reload
    cfg.write_text(json.dumps(json.loads(cfg.read_text()), indent=4))
    answer = client.post("/submit", json={"model_path": rel}).json()
    assert answer["status"] == "graded", answer
    rows = _rows(paths)
    row = rows[answer["submission_id"]]
    assert row.timings["load"] == "fresh", row.timings
    assert answer["score"] == warm[0]["score"]
    assert _items(paths, row) == _items(paths, rows[warm[0]["submission_id"]])


def test_a_reload_that_raises_is_graded_by_a_fresh_engine(graded, trained) -> None:
    """The same weights saved with the tied output head written out (as some trainers save
    it): the structure is the same, so the warm engine tries an in-place reload, which
    refuses a tensor layout unlike the engine's. The evaluation goes on with a fresh engine
    and grades the model as a cold engine would; the model is not blamed."""
    paths, _, client, warm = graded["warm"]
    # first the fine-tuned model's structure again, so that the engine held is of it
    perturbed_copy(trained, paths.workspace / "output/back", 54, SCALE)
    back = client.post("/submit", json={"model_path": "output/back"}).json()
    assert back["status"] == "graded", back
    rel = "output/untied"
    dest = perturbed_copy(trained, paths.workspace / rel, SEEDS[1], SCALE)
    tensors = load_file(dest / "model.safetensors")
    assert "lm_head.weight" not in tensors  # tied in the base
    tensors["lm_head.weight"] = tensors["model.embed_tokens.weight"].clone()
    save_file(tensors, dest / "model.safetensors", metadata={"format": "pt"})
    answer = client.post("/submit", json={"model_path": rel}).json()
    assert answer["status"] == "graded", answer
    row = _rows(paths)[answer["submission_id"]]
    assert row.timings["load"] == "fresh", row.timings
    assert "in-place reload failed" in row.timings["reload_error"]
    same = _rows(paths)[warm[1]["submission_id"]]
    assert answer["score"] == warm[1]["score"]
    assert _items(paths, row) == _items(paths, same)
    # and the engine it loaded serves the next submission in place
    rel2 = "output/after"
    shutil.copytree(dest, paths.workspace / rel2)
    t = load_file(paths.workspace / rel2 / "model.safetensors")
    t = {k: v + 0.01 * torch.ones_like(v) for k, v in t.items()}
    save_file(t, paths.workspace / rel2 / "model.safetensors", metadata={"format": "pt"})
    after = client.post("/submit", json={"model_path": rel2}).json()
    assert after["status"] == "graded", after
    assert _rows(paths)[after["submission_id"]].timings["load"] == "reload"
