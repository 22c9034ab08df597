"""Sampled grading on the tiny model (CPU): seeded per item, so an item's completion does not
depend on the batch it is generated in; and ``--protocol`` reaches the grader's worker."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from agent2rl.files import read_jsonl
from agent2rl.inference import vllm_usable
from agent2rl.inference.backend import GenerationSettings
from agent2rl.inference.decoding import GREEDY, Decoding
from agent2rl.inference.transformers_backend import TransformersBackend
from agent2rl.tasks.arith_lite import FORMAT, TEST_SEED, generate_split
from tests.support.cli import run_cli

SAMPLED = Decoding(protocol="reference", temperature=1.0, top_p=0.95, top_k=40, seed=0)


def _prompts(n: int) -> list[str]:
    return [FORMAT.template.format(question=r["question"]) for r in generate_split(TEST_SEED, n)]


def test_sampled_completions_do_not_depend_on_the_batch(tiny) -> None:
    prompts = _prompts(9)
    backend = TransformersBackend(tiny.path, decoding=SAMPLED)
    try:
        runs = [
            backend.generate(prompts, GenerationSettings(max_new_tokens=12, batch_size=b))
            for b in (1, 4, 9)
        ]
        # the same items in another order, in batches of 2
        rev = backend.generate(prompts[::-1], GenerationSettings(max_new_tokens=12, batch_size=2))
        other = Decoding(protocol="reference", temperature=1.0, top_p=0.95, top_k=40, seed=1)
        backend.decoding = other
        reseeded = backend.generate(prompts, GenerationSettings(max_new_tokens=12, batch_size=4))
        backend.decoding = GREEDY
        greedy = backend.generate(prompts, GenerationSettings(max_new_tokens=12, batch_size=4))
    finally:
        backend.close()
    assert runs[0] == runs[1] == runs[2] == rev[::-1]
    assert runs[0] != greedy  # it does sample
    assert runs[0] != reseeded  # and the seed is what fixes it


def _llama_named_tiny(tiny, tmp_path: Path) -> Path:
    """The tiny model saved as if from a hub model the table lists as sampled."""
    model = tmp_path / "tiny-as-llama"
    shutil.copytree(tiny.path, model)
    cfg = json.loads((model / "config.json").read_text())
    cfg["_name_or_path"] = "meta-llama/Llama-3.1-8B-Instruct"
    (model / "config.json").write_text(json.dumps(cfg))
    return model


def _eval(model: Path, out: Path, *extra: str) -> dict:
    proc = run_cli(
        ["eval", "--task", "arith-lite", "--model", str(model), "--limit", "8", "--out", str(out)]
        + list(extra),
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads((out / "result.json").read_text())


@pytest.mark.slow
def test_protocol_flag_reaches_the_grader(tiny, tmp_path: Path) -> None:
    model = _llama_named_tiny(tiny, tmp_path)
    ref = _eval(model, tmp_path / "ref", "--protocol", "reference")
    again = _eval(model, tmp_path / "again", "--protocol", "reference")
    default = _eval(model, tmp_path / "default")  # arith-lite: agent2rl's greedy
    dec = ref["decoding"]  # as the grader's worker decoded, not as the CLI asked
    assert (dec["temperature"], dec["top_p"], dec["top_k"]) == (0.7, 0.95, 40)
    assert dec["samples"] == 1 and dec["seed"] == 0
    assert "meta-llama/Llama-3.1-8B-Instruct" in dec["source"]
    assert default["decoding"] is None and default["eval_hash"] != ref["eval_hash"]
    # seeded: the same per-item outputs twice; sampled: not the greedy ones
    ref_out, again_out, greedy_out = (
        [i["prediction"] for i in read_jsonl(tmp_path / d / "items.jsonl")]
        for d in ("ref", "again", "default")
    )
    assert len(ref_out) == 8 and ref_out == again_out and ref_out != greedy_out
    assert again["eval_hash"] == ref["eval_hash"]
    request = json.loads((tmp_path / "ref" / "request.json").read_text())
    assert request["backend"]["protocol"] == "reference"


@pytest.mark.gpu
@pytest.mark.skipif(not vllm_usable(), reason="needs CUDA and the vllm package")
def test_vllm_sampled_completions_do_not_depend_on_the_batch(tiny) -> None:
    from agent2rl.inference.backend import BackendConfig
    from agent2rl.inference.vllm_backend import VllmBackend

    config = BackendConfig(kind="vllm", decoding=SAMPLED.to_dict(), gpu_memory_utilization=0.3)
    backend = VllmBackend(tiny.path, config)
    prompts = _prompts(9)
    try:
        settings = GenerationSettings(max_new_tokens=12)
        together = backend.generate(prompts, settings)
        alone = [backend.generate([p], settings)[0] for p in prompts]
        backend.decoding = GREEDY
        greedy = backend.generate(prompts, settings)
    finally:
        backend.close()
    assert together == alone and together != greedy


def test_an_output_limit_set_in_the_task_options_wins_over_the_table(tiny, tmp_path) -> None:
    """HumanEval under the reference protocol takes its output limit from the table (4096 in
    this model name's row) unless the user set ``max_new_tokens``: then the grader's worker
    decodes with that limit and the result says so (the table's used to replace it
    silently)."""
    model = _llama_named_tiny(tiny, tmp_path)
    out = tmp_path / "he"
    proc = run_cli(
        ["eval", "--task", "humaneval", "--model", str(model), "--limit", "2", "--out", str(out),
         "--task-opt", "max_new_tokens=6"],
        timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    dec = json.loads((out / "result.json").read_text())["decoding"]  # as the worker decoded
    assert dec["max_new_tokens"] == 6 and dec["temperature"] == 0.7  # the rest of the row
