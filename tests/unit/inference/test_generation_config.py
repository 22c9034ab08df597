"""A submission cannot change how it is graded without changing its weights: the grader
ignores its ``generation_config.json`` (issue 13, hole 3)."""

from __future__ import annotations

import json
import shutil

from agent2rl.files import read_jsonl
from agent2rl.grading.evaluator import EvalSpec, run_evaluation
from agent2rl.inference import BackendConfig
from agent2rl.inference.backend import model_stop_token_ids
from agent2rl.settings import load_settings


def test_submissions_differing_only_in_generation_config_get_the_same_grade(
    tmp_path, tiny, arith
) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny.path)
    plain, hostile = tmp_path / "plain", tmp_path / "hostile"
    shutil.copytree(tiny.path, plain)
    shutil.copytree(tiny.path, hostile)
    digit, space = tok.convert_tokens_to_ids("1"), tok.convert_tokens_to_ids(" ")
    # Everything transformers would merge from a model's own generation config.
    (hostile / "generation_config.json").write_text(
        json.dumps(
            {
                "num_beams": 3,
                "repetition_penalty": 5.0,
                "min_new_tokens": 40,
                "bad_words_ids": [[digit]],
                "eos_token_id": [space],
                "do_sample": True,
                "temperature": 2.0,
            }
        )
    )
    spec = EvalSpec("arith-lite", backend=BackendConfig(kind="transformers"), limit=24)
    settings = load_settings()
    outcomes = {
        name: run_evaluation(spec, model, tmp_path / f"out-{name}", settings, timeout_s=600)
        for name, model in (("plain", plain), ("hostile", hostile))
    }
    for outcome in outcomes.values():
        assert outcome.error is None, outcome.error
    items = {name: read_jsonl(o.items_path) for name, o in outcomes.items()}
    assert [i["prediction"] for i in items["plain"]] == [i["prediction"] for i in items["hostile"]]
    assert outcomes["plain"].score == outcomes["hostile"].score
    assert outcomes["plain"].eval_hash == outcomes["hostile"].eval_hash


def test_stop_token_ids_come_from_the_base_models_files(tmp_path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"eos_token_id": 2}))
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": [7, 2, True]}))
    assert model_stop_token_ids(tmp_path) == (2, 7)
    (tmp_path / "generation_config.json").write_text("{not json")
    assert model_stop_token_ids(tmp_path) == (2,)
    assert model_stop_token_ids(tmp_path / "missing") == ()
    config = BackendConfig(stop_token_ids=(2, 7))
    assert BackendConfig.from_dict(json.loads(json.dumps(config.to_dict()))) == config
