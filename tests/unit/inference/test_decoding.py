"""Decoding (issue #26 item 4): the reference's per-model table as literal data, its lookup,
the protocols, the reasoning post-processor, and both backends' parameter mapping."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent2rl.errors import UserError
from agent2rl.inference.backend import BackendConfig, GenerationSettings, finish
from agent2rl.inference.decoding import (
    DEFAULT_SEED,
    GREEDY,
    REFERENCE_MODELS_YAML,
    Decoding,
    decoding_for,
    item_seed,
    reference_row,
    resolve_protocol,
    strip_reasoning,
    table_name,
)
from agent2rl.inference.vllm_backend import sampling_kwargs
from agent2rl.scoring.opencompass import extract_non_reasoning_content, gsm8k_postprocess

#: RD-Agent ``rdagent/components/benchmark/configs/models.yaml`` (commit 471eb30d), copied
#: field by field: a change to the table in decoding.py must be a deliberate one.
MODELS_YAML = {
    "default": {
        "temperature": 0.0, "top_p": 1.0, "top_k": 1, "max_seq_len": 32768,
        "max_out_len": 8192, "batch_size": 16, "tensor_parallel_size": "auto",
        "gpu_memory_utilization": 0.9, "repetition_penalty": 1.0, "dtype": "bfloat16",
        "enable_thinking": False, "use_cot_postprocessor": True,
    },
    "models": {
        "Qwen/Qwen3-8B": {"temperature": 0.6, "top_p": 0.95, "top_k": 20, "max_seq_len": 40960,
                          "max_out_len": 38912, "enable_thinking": True},
        "Qwen/Qwen3-32B": {"temperature": 0.6, "top_p": 0.95, "top_k": 20, "max_seq_len": 40960,
                           "max_out_len": 38912, "enable_thinking": True},
        "Qwen/Qwen3-1.7B": {"temperature": 0.6, "top_p": 0.95, "top_k": 20,
                            "max_seq_len": 40960, "max_out_len": 38912, "enable_thinking": True,
                            "gpu_memory_utilization": 0.7},
        "Qwen/Qwen2.5-0.5B-Instruct": {"temperature": 0.0, "top_p": 1.0, "top_k": 1,
                                       "max_seq_len": 32768, "max_out_len": 8192,
                                       "gpu_memory_utilization": 0.5},
        "Qwen/Qwen2.5-0.5B": {"temperature": 0.0, "top_p": 1.0, "top_k": 1, "max_seq_len": 32768,
                              "max_out_len": 8192, "gpu_memory_utilization": 0.5},
        "Qwen/Qwen2.5-7B-Instruct": {"temperature": 0.0, "top_p": 1.0, "top_k": 1,
                                     "max_seq_len": 32768, "max_out_len": 8192,
                                     "use_cot_postprocessor": True},
        "Qwen/Qwen2.5-32B-Instruct": {"temperature": 0.0, "top_p": 1.0, "top_k": 1,
                                      "max_seq_len": 32768, "max_out_len": 8192},
        "meta-llama/Llama-3.1-8B-Instruct": {"temperature": 0.7, "top_p": 0.95, "top_k": 40,
                                             "max_seq_len": 32768, "max_out_len": 4096},
        "mistralai/Mistral-7B-Instruct-v0.3": {"temperature": 0.7, "top_p": 0.95, "top_k": 50,
                                               "max_seq_len": 32768, "max_out_len": 8192},
        "deepseek-ai/deepseek-coder-33b-instruct": {"temperature": 0.0, "top_p": 1.0, "top_k": 1,
                                                    "max_seq_len": 16384, "max_out_len": 4096},
    },
}  # fmt: skip


def test_the_table_is_the_references_models_yaml() -> None:
    assert REFERENCE_MODELS_YAML == MODELS_YAML
    assert list(REFERENCE_MODELS_YAML["models"]) == list(MODELS_YAML["models"])


@pytest.mark.parametrize(
    "name,key",
    [
        ("Qwen/Qwen3-8B", "Qwen/Qwen3-8B"),  # exact
        ("Qwen/Qwen3-8B-Base", "Qwen/Qwen3-8B"),  # a family member by prefix
        ("Qwen/Qwen2.5-0.5B-Instruct", "Qwen/Qwen2.5-0.5B-Instruct"),  # exact beats a prefix
        ("Qwen/Qwen2.5-0.5B-Instruct-AWQ", "Qwen/Qwen2.5-0.5B-Instruct"),  # the longest prefix
        ("Qwen/Qwen2.5-0.5B-Chat", "Qwen/Qwen2.5-0.5B"),
        ("qwen/qwen3-8b", None),  # case-sensitive, as the reference
        ("Qwen/Qwen3-4B", None),  # another size: not listed
        ("tiny", None),
    ],
)
def test_lookup_matches_the_references_rule(name: str, key: str | None) -> None:
    got, row = reference_row(name)
    assert got == key
    expected = {**MODELS_YAML["default"], **(MODELS_YAML["models"][key] if key else {})}
    assert row == expected


def test_table_name_is_the_base_models_hub_id(tmp_path: Path) -> None:
    assert table_name("Qwen/Qwen3-8B") == "Qwen/Qwen3-8B"
    saved = tmp_path / "my-ckpt"
    saved.mkdir()
    (saved / "config.json").write_text(json.dumps({"_name_or_path": "Qwen/Qwen3-32B"}))
    assert table_name(str(saved), saved) == "Qwen/Qwen3-32B"
    bare = tmp_path / "Qwen3-8B-Base"
    bare.mkdir()
    (bare / "config.json").write_text(json.dumps({"_name_or_path": str(bare)}))
    assert table_name(str(bare), bare) == "Qwen/Qwen3-8B"  # by the directory's name
    other = tmp_path / "llama-local"
    other.mkdir()
    (other / "config.json").write_text("{not json")
    assert table_name(str(other), other) == "llama-local"
    assert reference_row(table_name(str(other), other))[0] is None


def test_protocols_by_task() -> None:
    assert resolve_protocol("auto", "gsm8k") == "reference"
    assert resolve_protocol("auto", "arith-lite") == "agent2rl"
    assert resolve_protocol("reference", "arith-lite") == "reference"
    assert decoding_for("arith-lite", "Qwen/Qwen3-8B") == GREEDY  # lite default: greedy
    assert decoding_for("gsm8k", "Qwen/Qwen3-8B", "agent2rl") == GREEDY
    with pytest.raises(UserError, match="use one of auto, agent2rl, reference"):
        resolve_protocol("nucleus", "gsm8k")


def test_reference_decoding_on_the_table_tasks() -> None:
    g = decoding_for("gsm8k", "Qwen/Qwen3-8B")
    assert (g.temperature, g.top_p, g.top_k, g.enable_thinking) == (0.6, 0.95, 20, True)
    assert g.seed == DEFAULT_SEED and g.samples == 1 and g.strip_reasoning
    assert g.max_new_tokens is None  # gsm8k_gen_1d7fe4's own max_out_len=512 wins
    assert g.max_model_len == 40960 and not g.greedy
    h = decoding_for("humaneval", "Qwen/Qwen3-8B")
    assert h.max_new_tokens == 38912  # humaneval_gen sets none: the model row's
    d = decoding_for("humaneval", "HuggingFaceTB/SmolLM2-135M")  # unlisted: the default row
    assert d.greedy and d.seed is None and d.max_new_tokens == 8192 and not d.enable_thinking
    assert "default" in d.source and not d.is_default


@pytest.mark.parametrize("task", ["alpacaeval", "alfworld", "webshop", "deepsearchqa"])
def test_reference_tasks_outside_opencompass_stay_greedy(task: str) -> None:
    d = decoding_for(task, "Qwen/Qwen3-8B")
    assert d.greedy and d.protocol == "reference" and d.max_new_tokens is None
    assert "temperature 0" in d.source
    # the reference's vLLM context: alpacaeval/eval.py 142 and deepsearchqa/eval.py 91
    assert d.max_model_len == {"alpacaeval": 4096, "deepsearchqa": 4096}.get(task)
    assert decoding_for(task, "Qwen/Qwen3-8B", "agent2rl").max_model_len is None


@pytest.mark.parametrize(
    "text,out",
    [
        ("<think>a\nb</think>\n\nThe answer is 4", "The answer is 4"),
        ("half a thought</think> 12", "12"),  # only the end tag: what follows it
        ("x <think>a</think> y <think>b</think> z", "x  y  z"),
        # an unclosed <think> is kept, its text too (OpenCompass 0.5.1's regex matches only
        # complete pairs): cut-off reasoning stays in the prediction
        ("answer <think>never closed", "answer <think>never closed"),
        ("<think>so 3+4 = 7, then", "<think>so 3+4 = 7, then"),
        ("<think>a</think> b <think>cut 9", "b <think>cut 9"),
        ("  plain  ", "plain"),
        # the examples of OpenCompass 0.5.1's own docstring (text_postprocessors.py)
        ("This is a test.</think> How are you?", "How are you?"),
        ("Start<think>reasoning here</think> End", "Start End"),
    ],
)
def test_strip_reasoning_as_opencompass(text: str, out: str) -> None:
    assert strip_reasoning(text) == out
    # the scorer's own copy of the rule agrees (the backend's strip and the scorer's)
    assert extract_non_reasoning_content(text) == out


def test_cut_off_reasoning_still_gives_gsm8k_its_last_number() -> None:
    """Issue #39 item 1: with thinking on and a 512-token limit the reasoning is often cut
    off; the reference's post-processor keeps it, so the last number is still there."""
    dec = decoding_for("gsm8k", "Qwen/Qwen3-8B")
    out = finish(
        "<think>Janet has 16 eggs, eats 3, bakes 4: 16-3-4 = 9, sells at $2: 18",
        GenerationSettings(),
        dec,
    )
    assert out.endswith("= 9, sells at $2: 18")
    assert gsm8k_postprocess(extract_non_reasoning_content(out)) == "18"


def test_finish_strips_reasoning_only_where_a_tag_is() -> None:
    settings = GenerationSettings(stop=("\nQuestion:",))
    dec = decoding_for("gsm8k", "Qwen/Qwen3-8B")
    assert finish("<think>hm</think> 7\nQuestion: x", settings, dec) == "7"
    # a completion without a tag keeps its indentation (HumanEval bodies)
    assert finish("    return 1\n", settings, dec) == "    return 1\n"
    assert finish("<think>hm</think> 7", settings, GREEDY) == "<think>hm</think> 7"


def test_item_seeds_depend_on_the_prompt_and_seed_only() -> None:
    assert item_seed(0, "a") == item_seed(0, "a")
    assert len({item_seed(0, "a"), item_seed(0, "b"), item_seed(1, "a")}) == 3
    assert 0 <= item_seed(0, "a") < 2**63


def test_vllm_parameter_mapping() -> None:
    settings = GenerationSettings(max_new_tokens=64, stop=("\n",))
    greedy = sampling_kwargs(GREEDY, settings, "p", [2])
    assert greedy == {
        "n": 1, "temperature": 0.0, "max_tokens": 64, "stop": ["\n"], "stop_token_ids": [2],
        "skip_special_tokens": True,
    }  # fmt: skip
    dec = decoding_for("humaneval", "meta-llama/Llama-3.1-8B-Instruct")
    kw = sampling_kwargs(dec, GenerationSettings(), "prompt", [])
    assert kw["temperature"] == 0.7 and kw["top_p"] == 0.95 and kw["top_k"] == 40
    assert kw["max_tokens"] == 4096 and kw["seed"] == item_seed(DEFAULT_SEED, "prompt")
    assert kw["stop"] is None and "repetition_penalty" not in kw
    no_k = Decoding(temperature=1.0, top_k=0, seed=3)
    assert sampling_kwargs(no_k, settings, "p", [], max_tokens=5)["top_k"] == -1
    assert sampling_kwargs(no_k, settings, "p", [], max_tokens=5)["max_tokens"] == 5


def test_backend_config_resolves_once_and_keeps_greedy_settings_as_before(
    tmp_path: Path,
) -> None:
    assert "decoding" not in BackendConfig().to_dict()  # greedy: run.json/hash as before
    model = tmp_path / "m"
    model.mkdir()
    (model / "config.json").write_text(
        json.dumps({"_name_or_path": "mistralai/Mistral-7B-Instruct-v0.3", "eos_token_id": 2})
    )
    cfg = BackendConfig().for_run("humaneval", str(model), model)
    assert cfg.stop_token_ids == (2,)
    dec = cfg.decoding_settings()
    assert (dec.temperature, dec.top_k, dec.max_new_tokens) == (0.7, 50, 8192)
    assert BackendConfig.from_dict(cfg.to_dict()) == cfg
    # an output limit the task's options set wins over the table's (the rest of the row stays)
    asked = BackendConfig().for_run("humaneval", str(model), model, 512).decoding_settings()
    assert (asked.temperature, asked.top_k, asked.max_new_tokens) == (0.7, 50, 512)
    assert BackendConfig().for_run("arith-lite", str(model), model).decoding is None
    assert BackendConfig().for_run("arith-lite", str(model), model, 64).decoding is None
    lite = BackendConfig(protocol="agent2rl").for_run("humaneval", str(model), model)
    assert lite.decoding is None
    with pytest.raises(UserError, match="unknown --protocol"):
        BackendConfig(protocol="beam").validate()


def test_describe_is_one_line() -> None:
    assert GREEDY.describe().startswith("greedy, 1 sample(s) per item")
    text = decoding_for("gsm8k", "Qwen/Qwen3-8B").describe()
    assert "sampled T=0.6 top-p 0.95 top-k 20, seed 0 per item" in text
    assert "thinking on" in text and "Qwen/Qwen3-8B" in text


def test_the_report_says_how_items_were_decoded() -> None:
    from agent2rl.analysis.report.compute_metrics import _decoding_text
    from agent2rl.analysis.report.render import render_markdown
    from tests.support.studyruns import make_run

    assert _decoding_text(None) is None  # a run.json from before the protocol
    assert _decoding_text({"kind": "auto"}).startswith("greedy, 1 sample(s) per item")
    cfg = BackendConfig().for_run("gsm8k", "Qwen/Qwen3-8B", Path("/nonexistent"))
    text = _decoding_text(cfg.to_dict())
    assert text is not None and "sampled T=0.6" in text
    md = render_markdown(make_run(scores=[20.0], decoding=text).metrics)
    assert f"| Decoding | {text} |" in md
