"""The transformers backend's own greedy loop (finished rows leave the batch) gives exactly
the completions ``model.generate`` gives, on a real (perturbed tiny) model: with and without
stop strings, stops that end rows at different steps, an end token, several batch sizes."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent2rl.inference.backend import GenerationSettings
from agent2rl.inference.transformers_backend import TransformersBackend
from agent2rl.models import resolve_model
from agent2rl.orchestration.scratch_run import perturbed_copy
from agent2rl.settings import load_settings


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory) -> TransformersBackend:
    base = resolve_model("tiny", load_settings().model_store).path
    # noisy enough that the 24 prompts get 24 different completions, stopping at different steps
    model = perturbed_copy(base, tmp_path_factory.mktemp("m") / "noisy", seed=3, scale=0.3)
    # an end token the noisy model emits sometimes, so that rows also end on it
    b = TransformersBackend(Path(model), stop_token_ids=(5, 9))
    yield b
    b.close()


PROMPTS = [f"Question: what is {i} plus {3 * i + 1}?\nAnswer:" for i in range(24)] + ["x"]


@pytest.mark.parametrize(
    ("stop", "batch_size"),
    [((), 8), (("\n\n", "Question:"), 8), (("1", "7"), 5), ((":", "e"), 32)],
)
def test_lean_loop_matches_model_generate(
    backend: TransformersBackend, stop: tuple[str, ...], batch_size: int
) -> None:
    settings = GenerationSettings(max_new_tokens=24, stop=stop, batch_size=batch_size)
    assert backend._lean
    lean = backend.generate(PROMPTS, settings)
    backend._lean = False
    try:
        reference = backend.generate(PROMPTS, settings)
    finally:
        backend._lean = True
    assert lean == reference
    assert len(set(lean)) > 5  # not a vacuous comparison of identical completions


def test_other_model_types_keep_model_generate() -> None:
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

    from agent2rl.inference.transformers_backend import lean_model

    small = {"vocab_size": 64}
    gpt2 = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=16, n_head=2, **small))
    assert not lean_model(gpt2)
    llama = dict(num_hidden_layers=1, hidden_size=16, intermediate_size=32, num_attention_heads=2)
    assert lean_model(LlamaForCausalLM(LlamaConfig(**llama, **small)))
