"""GSM8K: importing the official files offline, the prompt protocol, grading, and a run.

The fixture (``tests/fixtures/gsm8k``) is authored in the official schema and laid out like
OpenAI's grade-school-math repository; the parquet layout of the hub is built from it here.
No test downloads anything.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from support import FIXTURES
from support.cli import only_run, run_cli

from agent2rl.errors import UserError
from agent2rl.inference import load_backend
from agent2rl.rundir import RunPaths
from agent2rl.settings import load_settings
from agent2rl.tasks import get_task, prepare_task, task_root
from agent2rl.tasks.gsm8k import Gsm8k, gold_answer
from agent2rl.workspace import build_workspace

FIXTURE = FIXTURES / "gsm8k"


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.open()]


def _hub_layout(tmp_path: Path) -> Path:
    """The hub's layout: main/ and socratic/ parquet files (socratic must be ignored)."""
    root = tmp_path / "gsm8k-hub"
    for config in ("main", "socratic"):
        (root / config).mkdir(parents=True)
        for split in ("train", "test"):
            rows = _rows(FIXTURE / "grade_school_math" / "data" / f"{split}.jsonl")
            if config == "socratic":
                rows = [{**r, "question": "SOCRATIC " + r["question"]} for r in rows]
            table = pa.Table.from_pylist(rows)
            pq.write_table(table, root / config / f"{split}-00000-of-00001.parquet")
    return root


@pytest.fixture(scope="module")
def gsm8k():
    """gsm8k imported from the jsonl fixture into the session's task store."""
    task = get_task("gsm8k")
    task.import_data(FIXTURE, task_root(task, load_settings().task_store))
    return task, prepare_task(task, load_settings().task_store)


def test_import_from_jsonl_and_parquet_give_the_same_splits(tmp_path, gsm8k) -> None:
    _, prepared = gsm8k
    train, test = _rows(prepared.public / "train.jsonl"), _rows(prepared.private / "test.jsonl")
    val = _rows(prepared.validation / "validation.jsonl")
    # A tenth of a small import's train rows (the last ones) are the validation split.
    assert (len(train), len(val), len(test)) == (9, 1, 6)
    assert val[0]["id"] == "train-0009"
    assert train[0]["id"] == "train-0000" and set(train[0]) == {"id", "question", "answer"}
    assert not {r["question"] for r in train} & {r["question"] for r in test}

    root = tmp_path / "store"
    summary = Gsm8k().import_data(_hub_layout(tmp_path), root)
    assert "9 train / 1 validation / 6 test" in summary and "subset" in summary
    assert _rows(root / "public" / "train.jsonl") == train  # socratic/ was ignored
    assert _rows(root / "private" / "test.jsonl") == test
    assert json.loads((root / "manifest.json").read_text())["official_sizes"] is False


def test_bad_imports_are_clear_and_keep_earlier_data(tmp_path) -> None:
    root = tmp_path / "store"
    Gsm8k().import_data(FIXTURE, root)
    before = (root / "private" / "test.jsonl").read_bytes()

    bad = tmp_path / "bad"
    shutil.copytree(FIXTURE, bad)
    test_file = bad / "grade_school_math" / "data" / "test.jsonl"
    test_file.write_text(test_file.read_text() + json.dumps({"question": "q", "answer": "4"}))
    with pytest.raises(UserError, match=r"test row 6 is not in the official schema"):
        Gsm8k().import_data(bad, root)
    test_file.unlink()
    with pytest.raises(UserError, match="no GSM8K test file"):
        Gsm8k().import_data(bad, root)
    with pytest.raises(UserError, match="is not a directory"):
        Gsm8k().import_data(tmp_path / "missing", root)
    assert (root / "private" / "test.jsonl").read_bytes() == before


def test_without_data_or_network_the_error_names_the_import(tmp_path) -> None:
    with pytest.raises(UserError, match="agent2rl data import gsm8k DIR"):
        Gsm8k().prepare(tmp_path / "empty-store")


def test_options_are_validated_and_hashed() -> None:
    with pytest.raises(UserError, match="has no option 'shots'"):
        get_task("gsm8k", {"shots": "3"})
    with pytest.raises(UserError, match="not a valid int"):
        get_task("gsm8k", {"max_new_tokens": "many"})
    with pytest.raises(UserError, match="unknown protocol 'lm-eval'.*opencompass, agent2rl"):
        get_task("gsm8k", {"protocol": "lm-eval"})
    default, short = get_task("gsm8k"), get_task("gsm8k", {"max_new_tokens": "64"})
    ours = get_task("gsm8k", {"protocol": "agent2rl"})
    assert default.opts["protocol"] == "opencompass" and default.opts["max_new_tokens"] == 512
    assert short.opts["max_new_tokens"] == 64
    store = load_settings().task_store
    for task in (default, short, ours):
        prepare_task(task, store)
    hashes = {t.eval_hash({"backend": "x"}) for t in (default, short, ours)}
    assert len(hashes) == 3  # the protocol is part of the evaluation hash


def _agent2rl(gsm8k):
    """The task under agent2rl's own protocol (``protocol=agent2rl``), on the same data."""
    task = get_task("gsm8k", {"protocol": "agent2rl"})
    return task, prepare_task(task, load_settings().task_store)


def test_base_model_prompt_is_few_shot_and_stated(gsm8k, tiny, tmp_path) -> None:
    """agent2rl's protocol: the first train items as shots, cut at a blank line."""
    task, prepared = _agent2rl(gsm8k)
    fmt = task.prompt_format(prepared)
    backend = load_backend(tiny.path)
    first = _rows(prepared.public / "train.jsonl")[:5]
    prompt = fmt.prompt(backend, {"question": "How many?"})
    assert prompt.endswith("Question: How many?\nAnswer:")
    for row in first:  # the five exemplars, verbatim, in order
        assert f"Question: {row['question']}\nAnswer: {row['answer']}\n\n" in prompt
    assert fmt.generation(backend).stop == ("\n\n", "Question:")
    # The workspace states exactly what the grader uses.
    paths = RunPaths(tmp_path / "run")
    build_workspace(paths, task, prepared, tiny)
    assert json.loads((paths.data / "eval_format.json").read_text()) == fmt.to_dict()
    desc = (paths.workspace / "description.md").read_text()
    assert "9 training problems" in desc and "first 5 items" in desc and "512" in desc


def test_chat_models_get_one_zero_shot_message_without_blank_line_stops(gsm8k, tiny, tmp_path):
    task, prepared = _agent2rl(gsm8k)
    chat_model = tmp_path / "chat"
    shutil.copytree(tiny.path, chat_model)
    cfg_path = chat_model / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["chat_template"] = (
        "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}\n{% endfor %}"
        "{% if add_generation_prompt %}<assistant>{% endif %}"
    )
    cfg_path.write_text(json.dumps(cfg))
    backend = load_backend(chat_model)
    fmt = task.prompt_format(prepared)
    prompt = fmt.prompt(backend, {"question": "How many?"})
    assert prompt.startswith("<user>Solve the following") and prompt.endswith("<assistant>")
    assert "Question:" not in prompt  # no few-shot exemplars for chat models
    assert fmt.generation(backend).stop == ()


def test_evaluation_grades_every_item_deterministically(gsm8k, tiny) -> None:
    task = get_task("gsm8k", {"max_new_tokens": "24", "num_fewshot": "1"})
    prepared = prepare_task(task, load_settings().task_store)
    backend = load_backend(tiny.path)
    a, b = task.evaluate(backend, prepared), task.evaluate(backend, prepared)
    assert [i.prediction for i in a.items] == [i.prediction for i in b.items]
    assert a.n_items == 6 and 0.0 <= a.score <= 100.0
    assert [i.target for i in a.items] == ["83", "420", "43", "8", "1000", "21"]
    assert gold_answer("x\n#### 1,000") == "1000"


@pytest.mark.slow
def test_gsm8k_run_end_to_end(gsm8k, tiny, tmp_path) -> None:
    """`agent2rl data import` then `agent2rl run --task gsm8k --model PATH` on CPU."""
    imported = run_cli(["data", "import", "gsm8k", str(FIXTURE)], timeout=120)
    assert imported.returncode == 0, imported.stderr
    assert "9 train / 1 validation / 6 test" in imported.stdout
    runs = tmp_path / "runs"
    r = run_cli(
        [
            "run",
            "--task",
            "gsm8k",
            "--agent",
            "reference-sft",
            "--model",
            str(tiny.path),
            "--budget",
            "75s",
            "--task-opt",
            "max_new_tokens=32",
            "--task-opt",
            "num_fewshot=0",
            # agent2rl's protocol: the paper's four-exemplar prompt (~900 words) does not
            # fit the tiny model's 512-token context, so SFT would have no row to train on
            "--task-opt",
            "protocol=agent2rl",
            "--runs-dir",
            str(runs),
        ],
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "agent_error" not in r.stdout, r.stdout
    run_dir = only_run(runs).root
    metrics = json.loads((run_dir / "report" / "metrics.json").read_text())
    assert metrics["task"] == "gsm8k" and metrics["baseline_n_items"] == 6
    assert metrics["valid_submissions"] >= 1
    assert metrics["best_score_ci95"] is not None and metrics["within_noise"] is not None
    info = json.loads((run_dir / "run.json").read_text())
    assert info["task_options"]["max_new_tokens"] == 32
    assert info["task_options"]["protocol"] == "agent2rl"
    fmt = json.loads((run_dir / "workspace" / "data" / "eval_format.json").read_text())
    assert fmt["max_new_tokens"] == 32
    report = (run_dir / "report" / "report.md").read_text()
    assert "95% CI" in report and "noise" in report
    assert "| Task options | protocol=agent2rl, " in report  # the protocol that graded it


@pytest.mark.network
def test_download_from_the_hub_gives_the_official_splits(tmp_path, monkeypatch) -> None:
    """The path a user with network takes (deselected in CI: no hub here)."""
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    prepared = Gsm8k().prepare(tmp_path / "store")
    assert len(_rows(prepared.public / "train.jsonl")) == 7273
    assert len(_rows(prepared.validation / "validation.jsonl")) == 200
    assert len(_rows(prepared.private / "test.jsonl")) == 1319
