import json
import random
from collections import Counter

import pytest

from agent2rl.inference import GenerationSettings, load_backend
from agent2rl.rundir import RunPaths
from agent2rl.tasks.arith_lite import (
    FORMAT,
    TEST_SIZE,
    TIERS,
    TRAIN_SIZE,
    VALIDATION_SIZE,
    generate_split,
    make_problem,
)
from agent2rl.tasks.gsm8k import gold_answer
from agent2rl.workspace import build_workspace


def _rows(path):
    return [json.loads(line) for line in path.open()]


def _operands(row) -> tuple[int, str, int, int]:
    a, op, b, _eq, c = row["answer"].split("\n")[0].split()
    return int(a), op, int(b), int(c)


def test_splits_are_deterministic_disjoint_and_sized(arith) -> None:
    task, prepared = arith
    train, test = _rows(prepared.public / "train.jsonl"), _rows(prepared.private / "test.jsonl")
    val = _rows(prepared.validation / "validation.jsonl")
    assert (len(train), len(test), len(val)) == (TRAIN_SIZE, TEST_SIZE, VALIDATION_SIZE)
    questions = [{r["question"] for r in rows} for rows in (train, test, val)]
    assert not questions[0] & questions[1] and not questions[0] & questions[2]
    assert not questions[1] & questions[2]
    assert sum(map(len, questions)) == TRAIN_SIZE + TEST_SIZE + VALIDATION_SIZE  # no repeats
    assert generate_split(2, 5) == generate_split(2, 5)
    assert test == generate_split(2, TEST_SIZE)  # the graded split is the fixed-seed one
    assert not (prepared.public / "test.jsonl").exists()
    for row in test:
        a, op, b, c = _operands(row)
        assert c == eval(f"{a} {op} {b}") >= 0  # noqa: S307 - our own generated digits
        assert gold_answer(row["answer"]) == str(c)


def test_the_tests_fine_tune_trains_on_no_held_out_question(arith) -> None:
    # It sampled the train seed's first 500 problems without the held-out exclusion: 2 of
    # them were graded or validation questions.
    from support.finetune import training_texts

    _task, prepared = arith
    held_out = {
        f"Question: {r['question']}\n"
        for path in (prepared.private / "test.jsonl", prepared.validation / "validation.jsonl")
        for r in _rows(path)
    }
    texts = training_texts()
    assert len(texts) == 500
    assert not {t[: t.index("\n") + 1] for t in texts} & held_out


def test_every_split_spans_the_tiers_equally(arith) -> None:
    task, prepared = arith
    for path in (
        prepared.public / "train.jsonl",
        prepared.private / "test.jsonl",
        prepared.validation / "validation.jsonl",
    ):
        counts = Counter(r["tier"] for r in _rows(path))
        assert set(counts) == set(TIERS)
        assert max(counts.values()) - min(counts.values()) <= 1, (path, counts)
    assert "tier 1" in task.description(prepared) and "per tier" in task.description(prepared)


@pytest.mark.parametrize("tier", sorted(TIERS))
def test_tier_operands(tier) -> None:
    rng = random.Random(tier)
    ops = Counter()
    for _ in range(400):
        row = make_problem(rng, tier)
        a, op, b, c = _operands(row)
        ops[op] += 1
        assert row["tier"] == tier and c >= 0
        digits = sorted((len(str(a)), len(str(b))))
        if op == "*":
            assert tier == 2 and 2 <= a <= 9 and 2 <= b <= 9
        elif tier == 1:
            assert digits == [1, 1]
        elif tier == 2:
            assert digits == [1, 2]
        else:
            assert digits == [2, 2]
    assert ops["+"] and ops["-"] and bool(ops["*"]) == (tier == 2)
    with pytest.raises(KeyError):
        make_problem(rng, 4)


def test_workspace_format_matches_grader(arith, tiny, tmp_path) -> None:
    task, prepared = arith
    paths = RunPaths(tmp_path / "run")
    build_workspace(paths, task, prepared, tiny)
    fmt = json.loads((paths.data / "eval_format.json").read_text())
    assert fmt == FORMAT.to_dict()
    desc = task.description(prepared)
    assert "Question: {question}" in desc and "####" in desc


def test_evaluation_is_deterministic_and_per_item(arith, tiny) -> None:
    task, prepared = arith
    backend = load_backend(tiny.path)
    a = task.evaluate(backend, prepared, limit=24)
    b = task.evaluate(backend, prepared, limit=24)
    assert [i.prediction for i in a.items] == [i.prediction for i in b.items]
    assert a.n_items == 24 and {i.id for i in a.items} == {f"2-{k:05d}" for k in range(24)}
    assert a.score == 100 * sum(i.correct for i in a.items) / 24


def test_batching_does_not_change_greedy_outputs(tiny) -> None:
    backend = load_backend(tiny.path)
    prompts = [
        "Question: 1 + 2?\nAnswer:",
        "Q: a much longer prompt with padding 12 + 30\nA:",
        "x",
        "Question: There were 5 eggs.\nAnswer:",
    ]
    one = backend.generate(prompts, GenerationSettings(max_new_tokens=12, batch_size=1))
    many = backend.generate(prompts, GenerationSettings(max_new_tokens=12, batch_size=4))
    assert one == many


def test_stop_strings_cut_completions(tiny) -> None:
    backend = load_backend(tiny.path)
    full = backend.generate(["Question:"], GenerationSettings(max_new_tokens=20))[0]
    assert len(full) > 2
    stop = full[2:4]
    cut = backend.generate(["Question:"], GenerationSettings(max_new_tokens=20, stop=(stop,)))[0]
    assert stop not in cut and full.startswith(cut)
