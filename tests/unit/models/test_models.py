import json
import shutil

import pytest
from safetensors.torch import load_file, save_file

from agent2rl.errors import UserError
from agent2rl.models import resolve_model, weights_hash
from agent2rl.models.tiny import build_tiny


def test_tiny_is_deterministic_and_small(tmp_path, tiny) -> None:
    other = build_tiny(tmp_path / "again")
    assert weights_hash(other) == tiny.weights_hash
    cfg = json.loads((tiny.path / "config.json").read_text())
    assert cfg["model_type"] == "llama"
    from transformers import AutoModelForCausalLM, AutoTokenizer

    n = sum(p.numel() for p in AutoModelForCausalLM.from_pretrained(tiny.path).parameters())
    assert 500_000 < n < 5_000_000
    tok = AutoTokenizer.from_pretrained(tiny.path)
    text = "Question: 12 + 30?\nAnswer: 42\n#### 42"
    ids = tok(text, add_special_tokens=False).input_ids
    # the saved BPE loads back as built: shorter than the text, lossless (tokenizer details
    # are tests/unit/models/test_tokenizer.py's)
    assert len(ids) < len(text) and tok.decode(ids) == text


def test_weights_hash_ignores_metadata_but_not_values(tmp_path, tiny) -> None:
    tensors = load_file(tiny.path / "model.safetensors")
    save_file(tensors, tmp_path / "model.safetensors", metadata={"format": "pt", "x": "y"})
    assert weights_hash(tmp_path) == tiny.weights_hash
    name = sorted(tensors)[0]
    tensors[name] = tensors[name] + 1e-3
    save_file(tensors, tmp_path / "model.safetensors")
    assert weights_hash(tmp_path) != tiny.weights_hash


def test_resolve_local_dir_and_errors(tmp_path, tiny) -> None:
    store = tmp_path / "store"
    local = tmp_path / "m"
    shutil.copytree(tiny.path, local)
    assert resolve_model(str(local), store).weights_hash == tiny.weights_hash
    with pytest.raises(UserError, match="unknown model"):
        resolve_model("no-such-model", store)
    (tmp_path / "file").write_text("x")
    with pytest.raises(UserError, match="not a directory"):
        resolve_model(str(tmp_path / "file"), store)
    (local / "model.safetensors").unlink()
    (local / "pytorch_model.bin").write_bytes(b"pickle")
    with pytest.raises(UserError, match="safetensors"):
        resolve_model(str(local), store)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(UserError, match="config.json"):
        resolve_model(str(empty), store)


def test_hub_id_without_network_is_one_clear_error(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(UserError, match="could not download acme/no-such-model"):
        resolve_model("acme/no-such-model", tmp_path)


def test_fingerprint_covers_config_and_tokenizer(tmp_path, tiny) -> None:
    from agent2rl.models.weights import model_fingerprint

    copy = tmp_path / "m"
    shutil.copytree(tiny.path, copy)
    assert model_fingerprint(copy) == tiny.fingerprint
    (copy / "agent2rl_model.json").write_text("{}")  # not a model file: ignored
    assert model_fingerprint(copy) == tiny.fingerprint
    cfg = json.loads((copy / "tokenizer_config.json").read_text())
    (copy / "tokenizer_config.json").write_text(json.dumps({**cfg, "chat_template": "{{x}}"}))
    assert model_fingerprint(copy) != tiny.fingerprint
    assert weights_hash(copy) == tiny.weights_hash
