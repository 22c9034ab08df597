"""``alpaca-lite``: registration, the generated splits (sizes, disjoint, deterministic, what
each holds), what the agent is told, and one grading through the real grader: the untrained
tiny model's baseline judged by SmolLM2 on CPU, per-item preferences in the grader's record
only, and the judge's usage metered apart from the agent's.
"""

from __future__ import annotations

import json

import pytest
from support.rundirs import make_run

from agent2rl.analysis.report.judging import JudgeSummary, judge_text
from agent2rl.errors import UserError
from agent2rl.files import read_jsonl
from agent2rl.metering.usage import read_usage
from agent2rl.scoring.judges import USAGE_FILE
from agent2rl.scoring.judges.smollm2 import MODEL_NAME
from agent2rl.settings import load_settings
from agent2rl.tasks import get_task, prepare_task, task_names
from agent2rl.tasks.alpaca_lite import EVAL_SIZE, TRAIN_SIZE, VALIDATION_SIZE, make_splits
from agent2rl.tasks.alpaca_lite.data import KINDS, degrade, generate_items


@pytest.fixture(scope="module")
def lite():
    task = get_task("alpaca-lite")
    return task, prepare_task(task, load_settings().task_store)


def test_n_eval_cuts_the_graded_split_and_is_checked() -> None:
    task = get_task("alpaca-lite", {"n_eval": 5})
    prepared = prepare_task(task, load_settings().task_store)
    full = get_task("alpaca-lite").samples(prepared, "private")
    assert [x.id for x in task.samples(prepared, "private")] == [x.id for x in full[:5]]
    assert len(task.samples(prepared, "validation")) == VALIDATION_SIZE
    assert "The 5 evaluation instructions" in task.description(prepared)
    for bad in (0, EVAL_SIZE + 1):
        with pytest.raises(UserError, match="n_eval must be 1 to 100"):
            get_task("alpaca-lite", {"n_eval": bad})


def test_registered_as_a_level_2_task() -> None:
    assert "alpaca-lite" in task_names()
    task = get_task("alpaca-lite")
    assert task.level == 2 and task.options["max_new_tokens"] == 32


def test_splits_sizes_disjoint_and_deterministic(lite) -> None:
    task, prepared = lite
    private = task.samples(prepared, "private")
    validation = task.samples(prepared, "validation")
    public = task.samples(prepared, "public")
    assert (len(private), len(validation), len(public)) == (EVAL_SIZE, VALIDATION_SIZE, TRAIN_SIZE)
    graded = {s.input["instruction"] for s in private}
    held = {s.input["instruction"] for s in validation}
    trained = {s.input["instruction"] for s in public}
    assert len(graded) == EVAL_SIZE and len(held) == VALIDATION_SIZE
    assert not graded & held and not graded & trained and not held & trained
    # every kind is graded, in equal turns
    kinds = [s.metadata["group"] for s in private]
    assert set(kinds) == set(KINDS) and kinds[: len(KINDS)] == list(KINDS)
    # the stored data is the generator's, run again
    assert make_splits() == make_splits()
    rows = read_jsonl(prepared.private / "eval.jsonl")
    assert rows == make_splits()["private"]


def test_references_are_weak_and_public_answers_are_sentences(lite) -> None:
    task, prepared = lite
    private = task.samples(prepared, "private")
    public = read_jsonl(prepared.public / "train.jsonl")
    # weak references: short hedges or fragments; public answers: one sentence ending "."
    assert max(len(s.target.split()) for s in private) <= 8
    assert all(r["output"].endswith(".") and r["input"] == "" for r in public)
    assert sum(len(r["output"]) for r in public) / len(public) > 1.3 * (
        sum(len(s.target) for s in private) / len(private)
    )


def test_generator_edges() -> None:
    items = generate_items(5, 16)
    assert [it["kind"] for it in items] == list(KINDS) * 2
    assert generate_items(5, 16) == items and generate_items(6, 16) != items
    assert generate_items(5, 0) == []
    with pytest.raises(ValueError, match="cannot draw"):
        generate_items(5, 1000)
    assert degrade("It depends.", "empty") == ""
    assert degrade("It depends on the day.", "truncated") == "It depends"
    assert degrade("Hmm.", "truncated") == "Hm" and degrade("Hmm.", "shuffled") == ".mmH"
    shuffled = degrade("I am not sure.", "shuffled")
    assert shuffled != "I am not sure." and sorted(shuffled.split()) == sorted(
        "I am not sure.".split()
    )
    with pytest.raises(ValueError, match="unknown degradation"):
        degrade("x", "reversed")


def test_judge_weights_and_cache_are_private() -> None:
    from agent2rl.scoring.judges import CACHE_RELPATH
    from agent2rl.scoring.judges.smollm2 import weights
    from agent2rl.tasks import private_paths

    masked = get_task("alpaca-lite").private_paths()
    assert weights()[0].parent in masked
    assert load_settings().home / CACHE_RELPATH.parent in masked
    assert weights()[0].parent in private_paths()  # every agent sandbox masks it


def test_description_states_the_judge_rules(lite) -> None:
    task, prepared = lite
    text = task.description(prepared)
    assert "may **not** use the grading judge" in text
    assert "metering" in text and "token budget" in text
    assert "Instruction: {instruction}\\nResponse:" in text
    # no graded instruction or reference is quoted to the agent
    for s in task.samples(prepared, "private"):
        assert s.input["instruction"] not in text


#: graded items in the grading test (``n_eval``): the whole 100 took 130-200 s here
N_GRADED = 12


@pytest.mark.slow
def test_baseline_grading_through_the_grader(tiny, tmp_path) -> None:
    """The untrained tiny model writes noise: the judge prefers the weak references."""
    task = get_task("alpaca-lite", {"n_eval": N_GRADED})
    prepared = prepare_task(task, load_settings().task_store)
    paths = make_run(tmp_path / "run", task, prepared, tiny)
    result = json.loads((paths.baseline_dir / "result.json").read_text())
    details = result["details"]
    assert details["metric"] == "win_rate" and details["n_total"] == N_GRADED
    assert result["score"] == pytest.approx(details["win_rate"])
    assert result["score"] < 50, "noise loses to the weak references"
    # the minimal GLM's LC win rate beside the score, named
    assert details.get("lc_glm") == "length_controlled_minimal", details.get("lc_error")
    assert 0 <= details["length_controlled_winrate"] <= 100
    # both orders in two phrasings, nothing cached yet
    assert details["judge"]["requests"] == 4 * N_GRADED
    usage = read_usage(paths.baseline_dir / USAGE_FILE)
    assert len(usage) == 4 * N_GRADED and {u["model"] for u in usage} == {MODEL_NAME}
    items = read_jsonl(paths.baseline_dir / "items.jsonl")
    assert all(1 <= i["meta"]["preference"] <= 2 for i in items)
    assert not (paths.record / "llm_usage.jsonl").exists(), "the judge is not the agent's usage"
    for f in paths.workspace.rglob("*"):
        if f.is_file() and f.suffix in (".jsonl", ".md", ".json"):
            text = f.read_text(errors="replace")
            assert '"preference"' not in text, f"per-item judgments reached the agent: {f}"


def test_report_names_the_minimal_glm_beside_the_raw_score() -> None:
    side = {"win_rate": 45.0, "standard_error": 4.0, "length_controlled_winrate": 40.0,
            "lc_standard_error": 0.0, "lc_glm": "length_controlled_minimal"}  # fmt: skip
    text = judge_text(JudgeSummary(metric="win_rate", baseline=side, best=side))
    assert "Score: the raw win rate" in text
    assert "LC win rate (length_controlled_minimal GLM) 40.00" in text
    # the leaderboard's GLM is plain "LC win rate"
    v1 = {**side, "lc_glm": "length_controlled_v1"}
    text = judge_text(JudgeSummary(metric="length_controlled_winrate", baseline=v1, best=v1))
    assert "LC win rate 40.00" in text and "GLM" not in text
