"""deepsearchqa's ``protocol=reference`` (issue #39 item 2): the paper's reference loop and
judge exactly, on the reference's own strings (RD-Agent ``benchmarks/deepsearchqa/eval.py``
at 471eb30d: lines 32-46 the instructions, 96 the stops, 236-277 the loop, 296-306 the
SerpAPI observation, 337-359 the judge and its fallback).

The loop is checked step by step on :class:`ReferenceEpisode` and end to end through the
task's ``evaluate()``: a scripted raw-text policy, searches on a SerpAPI-speaking server on
loopback, the judge on the project's fake OpenAI-compatible provider.
"""

from __future__ import annotations

import pytest
from support.fake_provider import Turn, start_fake_provider
from test_deepsearchqa import FIXTURE, SERP_KEY, _Serp

from agent2rl.errors import UserError
from agent2rl.files import read_jsonl
from agent2rl.inference.backend import GenerationSettings
from agent2rl.tasks.deepsearch.judge import parse_reference_verdict, reference_messages
from agent2rl.tasks.deepsearch.protocol import ReferenceEpisode, reference_snippets

JUDGE_KEY = "judge-test-key-loop"

#: eval.py 32-46, verbatim
REFERENCE_REACT = """You are a research assistant that answers questions by searching the web.

You must follow this format strictly:
Thought: [your reasoning]
Action: search[your search query]   <- to search the web
  OR
Action: answer[Paris]   <- to give final answer

Rules:
- Always start with a Thought
- Use search[] to find information
- Use answer[] ONLY when you have enough information
- For Set Answer questions, list all items separated by commas
- Be concise and factual
"""
#: eval.py 96 and 247
STOPS = ("\nAction:", "\nThought:", "\nObservation:")
FORCED = (128, ("]",))
#: eval.py 337-343 as the f-string renders (its continuation lines keep 8 spaces)
JUDGE_USER = """You are an answer evaluator. Compare the predicted answer to the gold answer.
        Question answer type: Set Answer
        Gold answer: Ada, Bo
        Predicted answer: Ada and Bo
        For "Single Answer": The predicted answer is correct if it contains the same key information as the gold answer.
        For "Set Answer": The predicted answer is correct if it contains ALL items from the gold answer (order doesn't matter, minor wording variations are OK).
        Reply with ONLY "correct" or "incorrect". No explanation."""  # noqa: E501


def test_a_reply_with_its_action_on_a_new_line_is_forced_to_answer() -> None:
    ep = ReferenceEpisode("Who designed Harrowgate Bridge?", "single")
    head = (
        REFERENCE_REACT + "\n\nQuestion: Who designed Harrowgate Bridge?\n"
        "Answer type: Single Answer\n\nThought:"
    )
    assert ep.prompt == head
    # generation stopped at "\nAction:": the reply is the thought alone
    assert ep.feed(" I should search for the bridge. ") == ("force", "")
    assert ep.prompt == head + " I should search for the bridge.\nAction: answer["
    assert ep.feed_forced(" Ada Fenwick") == ("answer", "Ada Fenwick")
    assert ep.done and ep.answer == "Ada Fenwick" and ep.forced and ep.steps == 1


def test_search_on_the_thought_line_then_answer_keeps_the_whole_history() -> None:
    ep = ReferenceEpisode("Q?", "set")
    assert ep.prompt.endswith("Question: Q?\nAnswer type: Set Answer\n\nThought:")
    assert ep.feed("Look it up. Action: search[ bridge designer ]") == ("search", "bridge designer")
    ep.observe(reference_snippets(["Ada built it.", "Bo helped."]))
    assert ep.prompt.endswith(
        " Look it up. Action: search[ bridge designer ]\n"
        "Observation: Ada built it. | Bo helped.\nThought:"
    )  # the thought stays in the prompt
    assert reference_snippets([]) == "No results found."
    assert ep.feed("Done. Action: answer[Ada, Bo]") == ("answer", "Ada, Bo")


def test_the_placeholder_and_the_case_sensitive_action() -> None:
    ep = ReferenceEpisode("Q?", "single")
    assert ep.feed("x Action: answer[Your Final Answer]") == ("continue", "")
    assert ep.prompt.endswith("\nThat is not a valid answer. Please think again.\nThought:")
    # "action:" in lower case is no action (the reference's regex is case-sensitive)
    assert ep.feed("action: search[y]") == ("force", "")
    # a forced placeholder uses the step; the next generation continues after "answer["
    assert ep.feed_forced("your final answer") == ("continue", "")
    assert ep.prompt.endswith("action: search[y]\nAction: answer[") and not ep.done


def test_after_six_steps_the_last_answer_the_model_wrote_else_i_dont_know() -> None:
    ep = ReferenceEpisode("Q?", "single", max_steps=6)
    for i in range(5):
        assert ep.feed(f"Action: search[q{i}]")[0] == "search"
        ep.observe("r")
    # the first action is the search; the answer after it stays in the model's text
    assert ep.feed("Action: search[q5] then Action: answer[Kestrel Bay]")[0] == "search"
    ep.observe("r")
    assert ep.done and ep.answer == "Kestrel Bay"
    other = ReferenceEpisode("Q?", "single", max_steps=2)
    for _ in range(2):
        other.feed("Action: search[q]")
        other.observe("r")
    assert other.answer == "I don't know"


def test_the_judge_prompt_and_reply_are_the_references() -> None:
    messages = reference_messages("Ada and Bo", "Ada, Bo", "set")
    assert messages == [
        {"role": "system", "content": "You are a strict answer evaluator."},
        {"role": "user", "content": JUDGE_USER},
    ]
    assert parse_reference_verdict("Correct.") is True
    assert parse_reference_verdict("  CORRECT!\nbecause ...") is True
    assert parse_reference_verdict("incorrect") is False
    assert parse_reference_verdict("The answer is correct") is False
    assert parse_reference_verdict("  ") is None  # the reference falls back to string match


class _Policy:
    """A scripted raw-text model: question 0 writes its action on a new line (stopped there,
    then forced), the others search on the thought's line then answer from the table."""

    name = "scripted-reference"

    def __init__(self, answers: dict[str, str], first: str) -> None:
        self.answers, self.first = answers, first
        self.calls: list[tuple[GenerationSettings, list[str]]] = []

    def generate(self, prompts: list[str], settings: GenerationSettings) -> list[str]:
        self.calls.append((settings, list(prompts)))
        out = []
        for p in prompts:
            assert p.startswith(REFERENCE_REACT)
            question = p.split("\nQuestion: ", 1)[1].split("\n", 1)[0]
            if p.endswith("\nAction: answer["):
                out.append(f" {self.answers[question]}")
            elif question == self.first:
                out.append(" I know this one.")  # "\nAction: ..." was cut by the stop
            elif "Observation:" not in p:
                out.append(f" Let me search. Action: search[{question[:80]}]")
            else:
                out.append(f" Found. Action: answer[{self.answers[question]}]")
        return out

    def chat_prompt(self, messages):  # never used: the reference gives raw text
        raise AssertionError("the reference loop uses no chat template")

    def describe(self) -> dict:
        return {"backend": self.name}

    def close(self) -> None:
        pass


@pytest.fixture(scope="module")
def prepared(a2home):
    from agent2rl.settings import load_settings
    from agent2rl.tasks import get_task, prepare_task, task_root

    task = get_task("deepsearchqa", {"score": "string", "search": "bm25"})
    task.import_data(FIXTURE, task_root(task, load_settings().task_store))
    return prepare_task(task, load_settings().task_store)


def _task(options: dict):
    from agent2rl.settings import load_settings
    from agent2rl.tasks import get_task, prepare_task

    task = get_task("deepsearchqa", options)
    prepare_task(task, load_settings().task_store)
    return task


def test_the_reference_loop_and_judge_end_to_end(prepared, monkeypatch) -> None:
    rows = read_jsonl(prepared.private / "questions.jsonl")
    answers = {r["question"]: r["answer"] for r in rows}
    wrong = rows[1]["question"]
    answers[wrong] = "Somewhere Else"
    seen: list[dict] = []

    def judge(body: dict) -> Turn:
        seen.append(body)
        user = body["messages"][1]["content"]
        predicted = user.split("Predicted answer: ", 1)[1].split("\n", 1)[0]
        if predicted == "Somewhere Else":
            return Turn(error_status=400)  # the judge call fails: string match grades it
        gold = user.split("Gold answer: ", 1)[1].split("\n", 1)[0]
        return Turn(text="Correct." if predicted == gold else "incorrect")

    serp = _Serp()
    provider = start_fake_provider(api_key=JUDGE_KEY)
    provider.respond_with(judge)
    try:
        monkeypatch.setenv("SERPAPI_KEY", SERP_KEY)
        monkeypatch.setenv("AGENT2RL_SERPAPI_URL", serp.url)
        monkeypatch.setenv("AGENT2RL_JUDGE_API_KEY", JUDGE_KEY)
        task = _task({"judge_base_url": provider.openai_base_url})
        assert task.version == "3" and task.config.judge_model == "gpt-5.2"
        settings = task.eval_settings()
        assert settings["solver"]["solver"] == "deepsearchqa-reference-react"
        assert settings["solver"]["protocol"]["stop"] == list(STOPS)
        assert settings["scorer"]["judge"]["rubric"] == "deepsearchqa-reference-v1"
        policy = _Policy(answers, rows[0]["question"])
        result = task.evaluate(policy, prepared)
        # every step with the reference's stops; forced answers with 128 tokens and "]"
        kinds = {(s.max_new_tokens, s.stop) for s, _ in policy.calls}
        assert kinds == {(256, STOPS), FORCED}
        forced_prompts = [p for s, ps in policy.calls if s.stop == ("]",) for p in ps]
        assert len(forced_prompts) == 1
        assert " I know this one.\nAction: answer[" in forced_prompts[0]
        # observations: SerpAPI's top-3 snippets joined by " | "
        later = [p for s, ps in policy.calls for p in ps if "\nObservation: " in p]
        assert later and all(" Let me search. Action: search[" in p for p in later)
        assert all("[1] " not in p for p in later) and any(" | " in p for p in later)
        # the judge: the reference's messages at temperature 0.5, one request per answer
        assert len(seen) >= len(rows)
        assert all(b["temperature"] == 0.5 and "max_tokens" not in b for b in seen)
        system = "You are a strict answer evaluator."
        assert all(b["messages"][0]["content"] == system for b in seen)
        by_id = {i.id: i for i in result.items}
        for r in rows:
            item = by_id[r["game_id"]]
            assert item.correct is (r["question"] != wrong)
        bad = by_id[rows[1]["game_id"]]
        assert "judge_fallback" in bad.meta  # graded by string match, and said so
        assert result.details["judge_fallbacks"] == 1 and result.details["forced_answers"] == 1
        assert by_id[rows[0]["game_id"]].meta["forced_answer"] is True
        desc = task.description(prepared)
        assert "ReferenceEpisode" in desc and "correct/incorrect verdict" in desc
        # string match is an explicit choice, recorded in the settings; no key is refused
        plain = _task({"score": "string"})
        assert plain.eval_settings()["scorer"]["grading"] == "string-match"
        assert plain.eval_hash({"b": 1}) != task.eval_hash({"b": 1})
        monkeypatch.delenv("AGENT2RL_JUDGE_API_KEY")
        monkeypatch.delenv("OPENAI_API_KEY", raising=False)
        with pytest.raises(UserError, match="--task-opt score=string"):
            _task({}).eval_settings()
    finally:
        provider.stop()
        serp.server.shutdown()
