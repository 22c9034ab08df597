"""The model-identity check on real models: a fine-tune of tiny derives from it, a differently
seeded tiny does not, and each kind of difference is named."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from support.finetune import fine_tune

from agent2rl.integrity import identity
from agent2rl.integrity.identity import MIN_COSINE, check_identity, identity_flags
from agent2rl.models.tiny import build_tiny


@pytest.fixture(scope="module")
def models(tmp_path_factory, tiny) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("identity")
    return {
        "base": tiny.path,
        "tuned": fine_tune(tiny.path, root / "tuned", steps=40),
        "seed1": build_tiny(root / "seed1", seed=1),
    }


def _copy(src: Path, dest: Path) -> Path:
    shutil.copytree(src, dest)
    return dest


def test_a_real_fine_tune_derives_from_the_base(models) -> None:
    r = check_identity(models["tuned"], models["base"])
    assert r.derived is True and r.reasons == []
    assert r.related_share == 1.0 and r.median_cosine > 0.5
    assert r.tokenizer_same is True and not r.chat_template_changed
    assert r.median_rel_l2 > 0.01, "the fine-tune moved the weights"
    assert r.tensors == 38 and r.informative_params > 1_000_000  # norms are left out


def test_a_differently_seeded_model_is_flagged(models) -> None:
    r = check_identity(models["seed1"], models["base"])
    assert r.derived is False
    assert r.related_share == 0.0 and abs(r.median_cosine) < 0.05
    assert any("weights unrelated to the base" in reason for reason in r.reasons)
    # Same architecture and tokenizer: the weights alone give it away.
    assert r.architecture_diff == {} and r.tokenizer_same is True
    assert identity_flags(r.to_dict())["derived"] is False


def test_architecture_tokenizer_and_tensor_differences_are_reasons(models, tmp_path) -> None:
    sub = _copy(models["tuned"], tmp_path / "arch")
    cfg = json.loads((sub / "config.json").read_text())
    cfg.update(num_hidden_layers=3, rms_norm_eps=1e-5)
    (sub / "config.json").write_text(json.dumps(cfg))
    tensors = load_file(sub / "model.safetensors")
    tensors = {k: v for k, v in tensors.items() if ".layers.3." not in k}
    rows, width = tensors["model.embed_tokens.weight"].shape
    tensors["model.embed_tokens.weight"] = torch.cat([tensors["model.embed_tokens.weight"]] * 2)
    save_file(tensors, sub / "model.safetensors")
    tok = json.loads((sub / "tokenizer.json").read_text())
    tok["model"]["vocab"]["zz"] = 999
    (sub / "tokenizer.json").write_text(json.dumps(tok))
    r = check_identity(sub, models["base"])
    assert r.derived is False
    assert r.architecture_diff == {"num_hidden_layers": [4, 3]}
    assert r.config_changes == ["rms_norm_eps"]  # listed, but no reason
    assert r.tokenizer_same is False
    assert len(r.missing_tensors) == 9 and r.extra_tensors == []
    embedding = f"model.embed_tokens.weight: [{rows}, {width}] -> [{2 * rows}, {width}]"
    assert r.shape_mismatches == [embedding]
    text = " | ".join(r.reasons)
    for part in ("architecture differs", "tokenizer vocabulary", "9 missing", "other shapes"):
        assert part in text, text


def test_a_reformatted_tokenizer_is_the_same_tokenizer(models, tmp_path) -> None:
    sub = _copy(models["tuned"], tmp_path / "fmt")
    tok = json.loads((sub / "tokenizer.json").read_text())
    tok["truncation"] = {"max_length": 64, "strategy": "longest_first", "stride": 0}
    (sub / "tokenizer.json").write_text(json.dumps(tok, indent=4, sort_keys=True))
    assert check_identity(sub, models["base"]).tokenizer_same is True


def test_own_chat_template_is_reported_not_a_reason(models, tmp_path) -> None:
    sub = _copy(models["tuned"], tmp_path / "chat")
    template = "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}<assistant>"
    (sub / "chat_template.jinja").write_text(template)
    r = check_identity(sub, models["base"])
    assert r.derived is True and r.chat_template_changed
    assert r.base_chat_template_hash is None and r.chat_template_hash
    assert "+{% for m in messages %}" in r.chat_template_diff
    assert identity_flags(r.to_dict())["chat_template_changed"] is True


def test_untied_head_is_compared_with_the_tied_embedding(models, tmp_path) -> None:
    sub = _copy(models["tuned"], tmp_path / "untied")
    tensors = load_file(sub / "model.safetensors")
    tensors["lm_head.weight"] = tensors["model.embed_tokens.weight"].clone()
    save_file(tensors, sub / "model.safetensors")
    r = check_identity(sub, models["base"])
    assert r.derived is True and r.extra_tensors == [] and r.tensors == 39


def test_large_tensors_are_sampled_consistently(models, monkeypatch) -> None:
    full = check_identity(models["tuned"], models["base"])
    monkeypatch.setattr(identity, "SAMPLE_ELEMENTS", 4096)
    sampled = check_identity(models["tuned"], models["base"])
    assert sampled.derived is True
    assert sampled.median_cosine == pytest.approx(full.median_cosine, abs=0.02)
    seeded = check_identity(models["seed1"], models["base"])
    assert seeded.derived is False and seeded.related_share < MIN_COSINE


def test_nan_weights_and_corrupt_files_never_raise(models, tmp_path) -> None:
    sub = _copy(models["base"], tmp_path / "nan")
    tensors = load_file(sub / "model.safetensors")
    save_file({k: v * float("nan") for k, v in tensors.items()}, sub / "model.safetensors")
    assert check_identity(sub, models["base"]).derived is False

    bad = _copy(models["base"], tmp_path / "corrupt")
    (bad / "model.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json")
    r = check_identity(bad, models["base"])
    assert r.derived is None and r.reasons[0].startswith("identity check failed")


def test_the_agents_view_is_pass_fail_without_the_weight_figures(models) -> None:
    """The grading API answers the agent with identity_flags(): pass/fail and reasons, never
    the related share or median cosine (an oracle for tuning a blend until it reads
    derived). The ledger keeps the full report, for the run's report."""
    full = check_identity(models["seed1"], models["base"]).to_dict()
    assert full["related_share"] == 0.0 and full["median_cosine"] is not None
    view = identity_flags(full)
    assert set(view) == {"derived", "reasons", "chat_template_changed"}
    assert view["derived"] is False and view["reasons"] == ["weights unrelated to the base"]
    assert "%" not in json.dumps(view) and "cosine" not in json.dumps(view)
    tuned = identity_flags(check_identity(models["tuned"], models["base"]).to_dict())
    assert tuned == {"derived": True, "reasons": [], "chat_template_changed": False}
    assert identity_flags(None) is None


def test_a_graded_submission_whose_identity_check_failed_leaves_the_run_unchecked(
    models, tmp_path
) -> None:
    """Issue 38, item 7: an identity check that could not run (``derived`` None: here a
    corrupt weights file) on a graded submission gives the run the ``unchecked`` flag, and
    the aggregates count the run as its base model, as any flagged run."""
    from agent2rl.analysis.dashboard.compare import counted_scores
    from agent2rl.analysis.dashboard.counting import counted
    from agent2rl.analysis.dashboard.results import results_row
    from agent2rl.analysis.report.compute_metrics import compute_metrics
    from agent2rl.grading.ledger import Ledger
    from agent2rl.rundir import RunInfo, RunPaths

    bad = _copy(models["base"], tmp_path / "corrupt")
    (bad / "model.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json")
    report = check_identity(bad, models["base"]).to_dict()
    assert report["derived"] is None
    paths = RunPaths(tmp_path / "run")
    paths.root.mkdir()
    t0 = 1_700_000_000.0
    RunInfo(
        run_id="run", task="arith-lite", task_version="1", level=1, agent="scripted",
        model="tiny", budget_s=600, seed=0, sandbox="none", created_at=t0 - 5,
        driver="reference", start=t0, deadline=t0 + 600, ended_at=t0 + 300, status="completed",
    ).save(paths)  # fmt: skip
    with Ledger(paths.ledger) as ledger:
        ledger.set_meta("baseline", {"score": 40.0, "n_items": 10, "eval_hash": "E"})
        sid = ledger.add_submission("output/m", "h", "e", at=t0 + 60)
        ledger.update_submission(sid, status="graded", score=90.0, eval_hash="E", identity=report)
    metrics = compute_metrics(paths)
    assert metrics.integrity_flags == ["unchecked"]
    c = counted(metrics)
    assert c is not None and c.flagged and (c.best, c.improvement) == (40.0, 0.0)
    assert counted_scores(results_row(paths.root, metrics)) == (40.0, 0.0)
