"""deepsearch-lite: the generator's determinism, every public expert walkthrough at full
reward, disjoint splits, the search, the protocol, the exact-match / F1 scoring, ``agent2rl
data make deepsearch-lite`` and a grader evaluation of the tiny model."""

from __future__ import annotations

import json

import pytest
from support.cli import run_cli

from agent2rl.dataset import Sample
from agent2rl.files import read_jsonl
from agent2rl.solvers.base import Output
from agent2rl.tasks.deepsearch import protocol
from agent2rl.tasks.deepsearch.games import INTRO, QuestionGames
from agent2rl.tasks.deepsearch.generate_lite import generate_world
from agent2rl.tasks.deepsearch.outcome import AnswerOutcome, final_answer
from agent2rl.tasks.deepsearch.search import BM25Backend, best_sentence, open_corpus
from agent2rl.tasks.deepsearch.store import corpus_file

SMALL = {"n_regions": 6, "n_eval_regions": 1, "n_validation_regions": 1}


@pytest.fixture(scope="module")
def lite(a2home):
    from agent2rl.settings import load_settings
    from agent2rl.tasks import get_task, prepare_task

    task = get_task("deepsearch-lite", SMALL)
    return task, prepare_task(task, load_settings().task_store)


def test_world_is_deterministic_fictional_and_linked() -> None:
    world = generate_world(seed=3, n_regions=2)
    assert world == generate_world(seed=3, n_regions=2)
    assert generate_world(seed=4, n_regions=2).documents != world.documents
    titles = [d["title"] for d in world.documents]
    assert len(titles) == len(set(titles)) and len({d["id"] for d in world.documents}) == len(
        titles
    )
    kinds = {d["kind"] for d in world.documents}
    assert kinds == {"person", "town", "river", "society"}
    cats = {q["category"] for q in world.questions}
    assert cats == {"founder-birthplace", "birthplace-river", "society-town-year",
                    "founded-members", "river-towns"}  # fmt: skip
    types = {q["answer_type"] for q in world.questions}
    assert types == {"single", "set"}
    for q in world.questions:  # two hops: the bridge, then the answer
        assert len(q["plan"]) == 2 and q["plan"][0][1] not in q["question"]


def test_splits_are_disjoint_and_every_walkthrough_wins(lite) -> None:
    task, prepared = lite
    rows = {s: read_jsonl(prepared.split(s) / "questions.jsonl") for s in
            ("public", "private", "validation")}  # fmt: skip
    assert all(rows.values())
    ids = {s: {r["game_id"] for r in v} for s, v in rows.items()}
    regions = {s: {r["region"] for r in v} for s, v in rows.items()}
    for a, b in (("public", "private"), ("public", "validation"), ("private", "validation")):
        assert not ids[a] & ids[b] and not regions[a] & regions[b]
    assert len(regions["private"]) == 1 and len(regions["validation"]) == 1
    walks = read_jsonl(prepared.public / "walkthroughs.jsonl")
    assert len(walks) == len(rows["public"])
    # replayed through the same environment the grader and the rollout service use
    source = task.environment(prepared, "public")
    fmt = task.episode_format()
    for w in walks:
        assert w["game_id"] in ids["public"] and w["won"] and w["reward"] == 1.0
        ep = source.open(source.by_id[w["game_id"]])
        assert ep.last.observation == INTRO == w["steps"][0]["observation"]
        for s in w["steps"]:
            result = ep.step(s["action"])
        assert result.done and result.won and result.reward == 1.0 and result.kind == "answer"
        pairs = [(s["observation"], s["action"]) for s in w["steps"]]
        for t in range(len(pairs)):  # prompts fit the tiny model's budget
            p = protocol.build_prompt(w["goal"], pairs[:t], pairs[t][0], [], fmt)
            assert len(p) <= fmt.max_prompt_chars and p.endswith("\n>")
        head, pieces = protocol.transcript(w["goal"], pairs, fmt)
        assert head + pieces[0][0] == protocol.build_prompt(w["goal"], [], pairs[0][0], [], fmt)
    assert json.dumps(fmt.to_dict())


def test_search_finds_the_fact_and_snippets_pick_the_sentence(lite) -> None:
    _, prepared = lite
    backend = open_corpus(corpus_file(prepared.private.parent).resolve())
    society = next(d for d in backend.documents if d["kind"] == "society")
    hits = backend.search(f"{society['title']} founded", 3)
    assert hits[0].title == society["title"] or society["title"] in hits[0].snippet
    assert "founded by" in hits[0].snippet or "founded the" in hits[0].snippet
    assert len(backend.search("zzqx unknownword", 3)) == 0
    assert backend.search("the of and", 3) == []  # stop words only
    text = "A is a town. It was established in 1400. It lies on the B River."
    assert best_sentence(text, "A", "A river") == "It lies on the B River."
    assert best_sentence(text, "A", "A") == "A is a town."
    small = BM25Backend([{"title": "X", "text": "x one."}, {"title": "Y", "text": "y two."}])
    assert [h.title for h in small.search("two", 5)] == ["Y"]


def test_episode_actions_and_refusals(lite) -> None:
    task, prepared = lite
    source: QuestionGames = task.environment(prepared, "public")
    game = source.games[0]
    ep = source.open(game)
    row = game.meta["row"]
    for bad in ["jump", "search[]", "answer[ ]", "click[x]", "search[" + "q" * 300 + "]"]:
        with pytest.raises(ValueError):
            ep.step(bad)
    assert ep.steps == 0 and not ep.done
    # answering first, without a search, is legal and ends the episode
    result = ep.step(f"answer[{row['answer'].upper()}]")
    assert result.done and result.won and result.kind == "answer" and result.steps == 1
    with pytest.raises(RuntimeError):
        ep.step("search[x]")
    ep = source.open(game, max_steps=2)
    assert ep.step("search[anything at all]").kind == "search"
    last = ep.step("search[more]")
    assert last.done and not last.won and last.reward == 0.0


def test_protocol_parses_and_scores() -> None:
    assert protocol.parse_action(" search[Amber  Loom] more\nx") == "search[Amber Loom]"
    assert protocol.parse_action("> Answer[Ostrewick]") == "answer[Ostrewick]"
    assert protocol.parse_action("Action 2: answer[a, b") == "answer[a, b]"
    assert protocol.parse_action("\n \n") == ""
    assert protocol.parse_action("I think so") == "I think so"
    assert protocol.normalize_answer("  The Osk-River! ") == "osk river"
    assert protocol.normalize_answer("Café") == "cafe"
    assert protocol.answer_items("Ama, Bo and Cy; ama") == ["ama", "bo", "cy"]
    s = protocol.answer_score("osk river", "The Osk River")
    assert s.f1 == 1.0 and s.outcome == "fully_correct"
    s = protocol.answer_score("Tys River", "Osk River")
    assert s.f1 == 0.0 and s.outcome == "fully_incorrect" and s.extraneous == 1
    assert protocol.answer_score("", "Osk River").outcome == "fully_incorrect"
    s = protocol.answer_score("Al, Bo", "Al, Bo, Cy", "set")
    assert s.outcome == "partially_correct" and s.precision == 1.0 and s.recall == 2 / 3
    assert s.f1 == pytest.approx(0.8)
    s = protocol.answer_score("Al, Bo, Cy, Di", "Al, Bo, Cy", "set")
    assert s.outcome == "correct_with_extraneous" and s.f1 == pytest.approx(6 / 7)
    assert protocol.answer_reward("cy, bo, al", "Al, Bo and Cy", "set") == 1.0
    msg = protocol.build_chat_message("q?", [], "obs", [], protocol.EpisodeFormat(5, 1, 300, 8))
    assert msg == "Question: q?\nobs\n" + protocol.CHAT_INSTRUCTION


def test_exact_match_scorer_reports_f1_and_outcomes() -> None:
    samples = [
        Sample("a", {"question": "q1"}, "Osk River", {"group": "g1", "answer_type": "single"}),
        Sample("b", {"question": "q2"}, "Al, Bo, Cy", {"group": "g2", "answer_type": "set"}),
        Sample("c", {"question": "q3"}, "X", {"group": "g1", "answer_type": "single"}),
    ]
    outputs = [
        Output("", {"actions": ["search[x]", "answer[osk river]"], "steps": 2}),
        Output("", {"actions": ["answer[Al, Bo]"], "steps": 1}),
        Output("", {"actions": ["search[x]", "search[y]"], "steps": 2}),
    ]
    assert final_answer(["answer[a]", "search[b]", "answer[c]"]) == "c"
    scorer = AnswerOutcome()
    assert scorer.settings() == {"scorer": "deepsearchqa-answer", "grading": "exact-match"}
    items = scorer.score(samples, outputs)
    assert [i.score for i in items] == [1.0, pytest.approx(0.8), 0.0]
    assert [i.correct for i in items] == [True, False, False]
    assert [i.meta["outcome"] for i in items] == ["fully_correct", "partially_correct",
                                                  "fully_incorrect"]  # fmt: skip
    d = scorer.details(items, outputs)
    assert d["grading"] == "exact-match" and d["f1_x100"] == pytest.approx(60.0)
    assert d["answered_rate"] == pytest.approx(200 / 3)
    assert d["by_answer_type"]["set"]["partially_correct_rate"] == 100.0
    assert d["by_group"]["g1"]["items"] == 2 and d["mean_searches"] == 1.0


def test_tiny_model_evaluation(lite, tiny) -> None:
    from agent2rl.inference import load_backend

    task, prepared = lite
    backend = load_backend(tiny.path, "transformers")
    try:
        result = task.evaluate(backend, prepared, limit=4)
    finally:
        backend.close()
    assert len(result.items) == 4
    assert result.details["grading"] == "exact-match"
    for item in result.items:
        assert 1 <= item.meta["steps"] <= task.opts["max_steps"]
        assert 0.0 <= item.score <= 1.0
    assert 0.0 <= result.score <= 100.0
    assert task.eval_settings()["solver"]["search"]["backend"] == "bm25"


def test_data_make_deepsearch_lite(tmp_path) -> None:
    out = tmp_path / "world"
    r = run_cli(["data", "make", "deepsearch-lite", "--out", str(out), "--n", "2", "--seed", "5"])
    assert r.returncode == 0, r.stdout + r.stderr
    assert "2 regions" in r.stdout
    docs = read_jsonl(out / "corpus.jsonl")
    questions = read_jsonl(out / "questions.jsonl")
    walks = read_jsonl(out / "walkthroughs.jsonl")
    assert docs and questions and len(walks) == len(questions)
    assert all(w["reward"] == 1.0 for w in walks)
    assert docs == generate_world(5, 2).documents
    again = run_cli(["data", "make", "deepsearch-lite", "--out", str(out), "--n", "2"])
    assert again.returncode != 0 and "not empty" in again.stdout + again.stderr


def test_workspace_has_protocol_client_questions_and_no_graded_item(lite, tiny, tmp_path) -> None:
    import subprocess
    import sys

    from agent2rl.rundir import RunPaths
    from agent2rl.workspace import build_workspace

    task, prepared = lite
    paths = RunPaths(tmp_path / "run")
    build_workspace(paths, task, prepared, tiny)
    data = paths.data
    saved = json.loads((data / "eval_format.json").read_text())
    assert protocol.EpisodeFormat.from_dict(saved) == task.episode_format()
    assert (data / "protocol.py").read_text() == task.workspace_files()["protocol.py"].read_text()
    assert "class EnvClient" in (data / "env_client.py").read_text()
    assert (data / "questions.jsonl").exists() and (data / "walkthroughs.jsonl").exists()
    # the protocol file runs with the standard library alone (no agent2rl on the path)
    code = "import protocol; print(protocol.answer_reward('Bo, Al', 'Al and Bo', 'set'))"
    out = subprocess.run(
        [sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, {str(data)!r}); {code}"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert out.stdout.strip() == "1.0"
    desc = (paths.workspace / "description.md").read_text()
    assert "ENV_SERVER_URL" in desc and "at most 6 actions" in desc and "exact match" in desc
    graded = [r["question"] for r in read_jsonl(prepared.private / "questions.jsonl")]
    text = "\n".join(p.read_text() for p in paths.workspace.rglob("*.*") if p.is_file()
                     and p.suffix in (".md", ".jsonl", ".json"))  # fmt: skip
    assert not any(q in text for q in graded)
