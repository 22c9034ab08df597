import json

from agent2rl.inference import GenerationSettings, load_backend
from agent2rl.rundir import RunPaths
from agent2rl.tasks.arith_lite import FORMAT, TEST_SIZE, TRAIN_SIZE, generate_split
from agent2rl.tasks.gsm8k import gold_answer
from agent2rl.workspace import build_workspace


def _rows(path):
    return [json.loads(line) for line in path.open()]


def test_splits_are_deterministic_disjoint_and_sized(arith) -> None:
    task, prepared = arith
    train, test = _rows(prepared.public / "train.jsonl"), _rows(prepared.private / "test.jsonl")
    assert len(train) == TRAIN_SIZE and len(test) == TEST_SIZE
    assert not {r["question"] for r in train} & {r["question"] for r in test}
    assert generate_split(2, 5) == generate_split(2, 5)
    assert not (prepared.public / "test.jsonl").exists()
    for row in test[:50]:
        a, op, b, _eq, c = row["answer"].split("\n")[0].split()
        assert int(c) == eval(f"{a} {op} {b}")  # noqa: S307 - our own generated digits
        assert gold_answer(row["answer"]) == c


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
