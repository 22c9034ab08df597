"""The baseline is measured once per (task, version, weights, settings) and cached; a failed
baseline is a clear error and is never cached."""

from __future__ import annotations

import json
import shutil

import pytest

from agent2rl.errors import UserError
from agent2rl.inference import BackendConfig
from agent2rl.models import resolve_model
from agent2rl.orchestration.baseline import baseline_key, measure_baseline
from agent2rl.rundir import RunPaths
from agent2rl.settings import load_settings


def test_baseline_is_cached_by_key(tmp_path, arith, tiny) -> None:
    task, _ = arith
    settings = load_settings()
    first = measure_baseline(task, tiny, settings, RunPaths(tmp_path / "a"))
    second = measure_baseline(task, tiny, settings, RunPaths(tmp_path / "b"))
    assert second["cached"] and second["score"] == first["score"]
    assert second["n_items"] == 300
    items = (tmp_path / "b" / second["items_path"]).read_text().splitlines()
    assert len(items) == 300 and "prediction" in json.loads(items[0])
    assert (settings.baseline_cache / baseline_key(task, tiny, BackendConfig())).is_dir()


def test_failed_baseline_is_an_error_and_not_cached(tmp_path, arith, tiny) -> None:
    task, _ = arith
    settings = load_settings()
    broken = tmp_path / "broken"
    shutil.copytree(tiny.path, broken)
    cfg = json.loads((broken / "config.json").read_text())
    cfg["hidden_size"] = 64  # no longer matches the weights
    (broken / "config.json").write_text(json.dumps(cfg))
    (broken / "model.safetensors").write_bytes((tiny.path / "model.safetensors").read_bytes())
    model = resolve_model(str(broken), settings.model_store)
    # Same weights as tiny, but its cached baseline must not be reused: the config differs.
    assert baseline_key(task, model, BackendConfig()) != baseline_key(task, tiny, BackendConfig())
    with pytest.raises(UserError, match="could not be evaluated"):
        measure_baseline(task, model, settings, RunPaths(tmp_path / "run"))
    assert not (settings.baseline_cache / baseline_key(task, model, BackendConfig())).exists()
