"""Task options: the evaluation hash of every registered task pinned (default options and a
few given as ``--task-opt`` strings), so that typing the options never changes a score's
comparability."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent2rl.dataset import PreparedTask
from agent2rl.tasks import get_task, task_names

#: eval_hash({"backend": "pinned"}) of each task with its default options, over a fixed
#: placeholder store (data digest "pinned", a one-document corpus): recorded before the
#: options became typed dataclasses. A change here means scores stop comparing equal.
DEFAULT_HASHES = {
    "alfworld": "c1460880f41285c3",
    "alfworld-lite": "5a9a9713d9738a9c",
    "alpaca-lite": "8427ddd3e91c34d5",
    "alpacaeval": "59f44f269cdef891",
    "arith-lite": "100dfe1ed8db93d5",
    "deepsearch-lite": "c446f0590407ffa9",
    "deepsearchqa": "e07d1a0a9b68aabf",
    "gsm8k": "18362873706393c2",
    "humaneval": "d58f71434119c683",
    "webshop": "320aad1dccbb73d8",
    "webshop-lite": "7610226f2bbb7f64",
}

#: options given as the CLI gives them (strings), parsed into the declared types
GIVEN = {
    "gsm8k": {"max_new_tokens": "256", "num_fewshot": "3", "public": "reference"},
    "humaneval": {"timeout_s": "5", "max_new_tokens": "300"},
    "alfworld-lite": {"show_admissible": "true", "max_steps": "12", "n_eval": "6"},
    "webshop": {"separator": " | ", "score": "reward", "invalid": "refuse"},
    "deepsearchqa": {"search": "bm25", "judge": "exact", "metric": "f1", "top_k": "5"},
    "alpacaeval": {"judge": "annotators_gpt52_fn", "base_prompt": "alpaca"},
}
GIVEN_HASHES = {
    "gsm8k": "26073b5fa3a58f6c",
    "humaneval": "243b1c77bafbe96a",
    "alfworld-lite": "1a894452fd84d8f1",
    "webshop": "25cb59ec83bb4d3c",
    "deepsearchqa": "cc156a613e94f5da",
    "alpacaeval": "e0305eef7b119f86",
}


@pytest.fixture
def placeholder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> PreparedTask:
    """A store with no items and a one-document corpus; no key or URL from the host
    environment (``auto`` options resolve the same everywhere)."""
    for var in (
        "SERPAPI_KEY",
        "AGENT2RL_SERPAPI_URL",
        "AGENT2RL_WIKIPEDIA_URL",
        "AGENT2RL_JUDGE_API_KEY",
        "OPENAI_API_KEY",
    ):
        monkeypatch.delenv(var, raising=False)
    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "corpus.jsonl").write_text(
        '{"id": "d1", "title": "Pinned", "text": "one document"}\n'
    )
    return PreparedTask(tmp_path / "public", tmp_path / "private", tmp_path / "validation")


def _hash(name: str, options: dict[str, str] | None, prepared: PreparedTask) -> str:
    task = get_task(name, options)
    task.prepared = prepared
    task.data_digest = "pinned"
    return task.eval_hash({"backend": "pinned"})


def test_every_task_is_pinned() -> None:
    assert sorted(DEFAULT_HASHES) == task_names()


@pytest.mark.parametrize("name", sorted(DEFAULT_HASHES))
def test_default_options_keep_their_eval_hash(name: str, placeholder: PreparedTask) -> None:
    assert _hash(name, None, placeholder) == DEFAULT_HASHES[name]


@pytest.mark.parametrize("name", sorted(GIVEN))
def test_given_options_keep_their_eval_hash(name: str, placeholder: PreparedTask) -> None:
    assert _hash(name, GIVEN[name], placeholder) == GIVEN_HASHES[name]
