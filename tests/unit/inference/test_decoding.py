"""The decoding table (issue #26 item 4): greedy by default, the reference's per-model rows
by prefix under the ``reference`` protocol, seeded sampling, greedy hashes unchanged."""

from __future__ import annotations

import pytest

from agent2rl.errors import UserError
from agent2rl.inference.backend import BackendConfig
from agent2rl.inference.decoding import (
    DEFAULT_SEED,
    GREEDY,
    decoding_for,
    default_protocol,
    reference_decoding,
)


@pytest.mark.parametrize("model", ["Qwen/Qwen3-8B", "/models/qwen3-8b-base/", "Qwen3-8B-Instruct"])
def test_qwen3_8b_gets_the_reference_row(model: str) -> None:
    d = decoding_for(model, "reference")
    assert (d.temperature, d.top_p, d.top_k, d.enable_thinking) == (0.6, 0.95, 20, True)
    assert d.seed == DEFAULT_SEED and d.samples == 1
    # The reference's "long output limit" is not known here: said, not guessed.
    assert d.max_new_tokens is None and "max_new_tokens" in d.unknown
    assert d.to_dict()["unknown"] == ["max_new_tokens"]


def test_unlisted_models_and_the_greedy_protocol_decode_greedily() -> None:
    assert reference_decoding("HuggingFaceTB/SmolLM2-135M").greedy
    assert reference_decoding("Qwen/Qwen3-4B").greedy  # another size: not in the table
    assert decoding_for("Qwen/Qwen3-8B") == GREEDY  # greedy is the default protocol
    assert decoding_for("Qwen/Qwen3-8B", "reference", seed=7).seed == 7
    with pytest.raises(UserError, match="use one of greedy, reference"):
        decoding_for("m", "nucleus")


def test_default_protocol_is_reference_only_on_full_tasks() -> None:
    assert default_protocol("gsm8k", "reference") == "reference"
    assert default_protocol("arith-lite", "reference") == "greedy"
    assert default_protocol("gsm8k", None) == "greedy"


def test_backend_kwargs() -> None:
    assert GREEDY.transformers_kwargs() == {"do_sample": False}
    d = decoding_for("Qwen3-8B", "reference", seed=3)
    assert d.transformers_kwargs() == {
        "do_sample": True, "temperature": 0.6, "top_p": 0.95, "top_k": 20,
    }  # fmt: skip
    assert d.vllm_kwargs() == {"temperature": 0.6, "top_p": 0.95, "top_k": 20, "seed": 3, "n": 1}


def test_backend_config_keeps_greedy_hashes_and_records_the_reference() -> None:
    greedy = BackendConfig().to_dict()
    assert "decoding" not in greedy and "decoding_seed" not in greedy  # hashes as before
    ref = BackendConfig(decoding="reference", decoding_seed=5)
    assert ref.to_dict()["decoding"] == "reference"
    back = BackendConfig.from_dict(ref.to_dict())
    assert back == ref and back.decoding_for("Qwen/Qwen3-8B").seed == 5
    assert BackendConfig.from_dict(greedy).decoding == "greedy"
    with pytest.raises(UserError, match="unknown decoding"):
        BackendConfig(decoding="beam").validate()
