"""``--task-opt public=reference``: gsm8k and humaneval can show the agent the reference's
whole public set (GSM8K's 7,473 train items, HumanEval's problems 0-81), the validation
items the default holds back included; the default stays ``heldout``."""

from __future__ import annotations

import pytest
from support import FIXTURES

from agent2rl.errors import UserError
from agent2rl.files import read_jsonl
from agent2rl.settings import load_settings
from agent2rl.tasks import get_task, prepare_task, task_root


def test_humaneval_reference_view_shows_problems_0_to_81(a2home) -> None:
    store = load_settings().task_store
    held = get_task("humaneval")
    prepared = prepare_task(held, store)
    ids = [r["task_id"] for r in read_jsonl(prepared.public / "train.jsonl")]
    assert ids == [f"HumanEval/{i}" for i in range(74)]
    ref = get_task("humaneval", {"public": "reference"})
    shown = prepare_task(ref, store)
    ids = [r["task_id"] for r in read_jsonl(shown.public / "train.jsonl")]
    assert ids == [f"HumanEval/{i}" for i in range(82)]  # the reference's public 0-81
    val = [r["task_id"] for r in read_jsonl(shown.validation / "validation.jsonl")]
    assert val == [f"HumanEval/{i}" for i in range(74, 82)]  # still never graded
    assert shown.private == prepared.private and shown.public != prepared.public
    graded = [r["task_id"] for r in read_jsonl(shown.private / "test.jsonl")]
    assert graded[0] == "HumanEval/82" and not set(graded) & set(ids)
    desc = ref.description(shown)
    assert "HumanEval/0 to HumanEval/81 (82" in desc and "held\n  back" not in desc
    assert "HumanEval/0 to HumanEval/73 (74" in held.description(prepared)
    assert ref.eval_hash({"b": 1}) != held.eval_hash({"b": 1})  # the option is recorded
    # the held-out view is untouched by the reference view beside it
    assert len(read_jsonl(prepare_task(get_task("humaneval"), store).public / "train.jsonl")) == 74
    with pytest.raises(UserError, match="public=all: use heldout, reference"):
        get_task("humaneval", {"public": "all"})


def test_gsm8k_reference_view_is_the_whole_train_file_in_order(a2home) -> None:
    store = load_settings().task_store
    held = get_task("gsm8k")
    held.import_data(FIXTURES / "gsm8k", task_root(held, store))
    prepared = prepare_task(held, store)
    public = read_jsonl(prepared.public / "train.jsonl")
    validation = read_jsonl(prepared.validation / "validation.jsonl")
    assert validation  # the fixture holds some back
    ref = get_task("gsm8k", {"public": "reference"})
    shown = prepare_task(ref, store)
    assert read_jsonl(shown.public / "train.jsonl") == public + validation
    assert f"{len(public) + len(validation)} training problems" in ref.description(shown)
    with pytest.raises(UserError, match="public=x: use heldout, reference"):
        get_task("gsm8k", {"public": "x"})
