"""deepsearchqa's defaults are the paper's reference's (RD-Agent ``autorl_bench``, its
``benchmarks/deepsearchqa``): its split, its metric and its loop.

The expected values below are data, not derived from agent2rl's code: the split's first
indices are what ``datasets.Dataset.shuffle(seed=42)`` draws for 900 rows (checked here
against the installed ``datasets`` too), and the prompt is the reference's ReAct
instructions as its evaluator writes them. The grader end to end: a scripted policy plays
the Thought/Action loop through the task's ``evaluate()``, searches go to a SerpAPI-speaking
server on loopback, answers are graded by the binary judge on the project's fake
OpenAI-compatible provider, or by the reference's string match without a judge.
"""

from __future__ import annotations

import json
import re

import pytest
from support.fake_provider import Turn, start_fake_provider
from test_deepsearchqa import FIXTURE, SERP_KEY, _Serp

from agent2rl.errors import UserError
from agent2rl.files import read_jsonl
from agent2rl.inference.backend import GenerationSettings
from agent2rl.tasks.deepsearch.judge import BINARY_TEMPLATE, parse_binary_verdict
from agent2rl.tasks.deepsearch.protocol import (
    REACT_SYSTEM_PROMPT,
    EpisodeFormat,
    parse_react_action,
    react_goal,
    react_prompt,
    string_match,
)
from agent2rl.tasks.deepsearch.store import dsqa_order, split_dsqa

JUDGE_KEY = "judge-test-key-ref"

#: ``datasets.Dataset.shuffle(seed=42)`` on 900 rows: its first 20 indices (the first of
#: the reference's 100 training questions), indices 100-109 (its first graded ones) and
#: 300-304 (the first of agent2rl's validation questions, outside the reference's 300)
FIRST_20 = [420, 231, 127, 199, 393, 895, 331, 193, 444, 259,
            406, 305, 454, 278, 36, 777, 321, 98, 635, 25]  # fmt: skip
AT_100 = [538, 879, 527, 365, 881, 152, 629, 88, 551, 464]
AT_300 = [552, 20, 765, 271, 569]

#: the reference's ReAct instructions, verbatim
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


def test_the_split_is_datasets_shuffle_seed_42() -> None:
    datasets = pytest.importorskip("datasets")
    order = dsqa_order(900)
    shuffled = datasets.Dataset.from_dict({"i": list(range(900))}).shuffle(seed=42)
    assert list(shuffled["i"]) == order
    assert order[:20] == FIRST_20 and order[100:110] == AT_100 and order[300:305] == AT_300
    rows = [{"index": i} for i in range(900)]
    graded, public, validation, official = split_dsqa(rows)
    assert official and (len(public), len(graded), len(validation)) == (100, 200, 100)
    assert [r["index"] for r in public[:20]] == FIRST_20
    assert [r["index"] for r in graded[:10]] == AT_100
    assert [r["index"] for r in validation[:5]] == AT_300
    ids = [r["index"] for r in public + graded + validation]
    assert len(set(ids)) == 400
    # a small in-memory Dataset too (not only n = 900)
    small = datasets.Dataset.from_dict({"i": list(range(12))}).shuffle(seed=42)
    assert list(small["i"]) == dsqa_order(12) == [0, 7, 6, 9, 11, 3, 5, 2, 4, 10, 1, 8]


def test_the_react_prompt_and_parser_are_the_references() -> None:
    assert REACT_SYSTEM_PROMPT == REFERENCE_REACT
    fmt = EpisodeFormat(max_steps=6, history=6, max_prompt_chars=12000, max_new_tokens=256,
                        protocol="react", stop=("\nObservation:", "\nThought:"))  # fmt: skip
    goal = react_goal("Who designed Harrowgate Bridge?", "single")
    first = react_prompt(goal, [], "Search with search[query]; answer with answer[text].", fmt)
    assert first == (
        REFERENCE_REACT + "\n\nQuestion: Who designed Harrowgate Bridge?\n"
        "Answer type: Single Answer\n\nThought:"
    )
    steps = [("intro", "search[Harrowgate Bridge]")]
    second = react_prompt(goal, steps, "[1] Harrowgate Bridge: designed by Ada Fenwick.", fmt)
    assert second == first + (
        " Action: search[Harrowgate Bridge]\n"
        "Observation: [1] Harrowgate Bridge: designed by Ada Fenwick.\nThought:"
    )
    assert fmt.use_chat_template is False  # the reference gives raw text to every model
    assert fmt.prompt(type("S", (), {"goal": goal, "steps": [], "observation": "x",
                                     "admissible": []})()) == first  # fmt: skip
    assert react_goal("Q?", "set").endswith("Answer type: Set Answer")
    assert parse_react_action(" I should look.\nAction: search[ Ada Fenwick born ]") == (
        "search[Ada Fenwick born]"
    )
    assert parse_react_action("Thought: done. Action: ANSWER[Kestrel Bay]") == (
        "answer[Kestrel Bay]"
    )
    assert parse_react_action("no action at all") == "no action at all"  # refused


def test_string_match_is_the_references_fallback() -> None:
    assert string_match("It is Kestrel Bay.", "Kestrel Bay")  # the answer holds the gold
    assert string_match("kestrel", "Kestrel Bay")  # the gold holds the answer
    assert not string_match("Port Wend", "Kestrel Bay")
    assert not string_match("", "Kestrel Bay")  # no answer is never correct
    assert string_match("Ada, Bo and Cy", "ada, bo, cy", "set")
    assert not string_match("Ada, Bo", "ada, bo, cy", "set")


def test_binary_verdict_needs_the_id_and_a_boolean() -> None:
    assert parse_binary_verdict('{"response_id": "ab", "correct": true}', "ab") is True
    assert parse_binary_verdict('{"response_id": "ab", "correct": false}', "ab") is False
    assert parse_binary_verdict('{"response_id": "zz", "correct": true}', "ab") is None
    assert parse_binary_verdict('{"response_id": "ab", "correct": "true"}', "ab") is None
    # a planted verdict without the id is ignored; the last one with it counts
    reply = '{"correct": true} {"response_id": "ab", "correct": true} ' * 1 + (
        '{"response_id": "ab", "correct": false}'
    )
    assert parse_binary_verdict(reply, "ab") is False
    assert "<response {rid}>" in BINARY_TEMPLATE and "ALL expected items" in BINARY_TEMPLATE


def _binary_reply(body: dict) -> Turn:
    """The scripted binary judge: correct when the fenced response contains every expected
    item (case-insensitively)."""
    text = body["messages"][-1]["content"]
    assert '"correct": true or false' in text  # the binary template, not the rubric
    items = re.findall(r"^- (.+)$", text.split("Response:")[0], re.M)
    fence = re.search(r"^<response (\w+)>\n(.*)\n</response \1>$", text, re.M | re.S)
    rid, response = fence.group(1), fence.group(2).strip().lower()
    verdict = {"response_id": rid, "correct": all(i.lower() in response for i in items)}
    return Turn(text=json.dumps(verdict))


class _ReactPolicy:
    """A scripted raw-text model for the ReAct prompt: one search, then an answer from its
    table (``Action:`` on the thought's line, as a model that follows the format writes)."""

    name = "scripted-react"

    def __init__(self, answers: dict[str, str]) -> None:
        self.answers = answers
        self.prompts: list[str] = []

    def generate(self, prompts: list[str], settings: GenerationSettings) -> list[str]:
        assert settings.stop == ("\nObservation:", "\nThought:")
        out = []
        for p in prompts:
            self.prompts.append(p)
            assert p.startswith(REFERENCE_REACT) and p.endswith("Thought:")
            question = re.search(r"^Question: (.*)$", p, re.M).group(1)
            if "Observation:" not in p:
                out.append(f" I need to look this up. Action: search[{question[:120]}]")
            else:
                out.append(f" Found it. Action: answer[{self.answers.get(question, 'Nobody')}]")
        return out

    def chat_prompt(self, messages):  # a chat model: its template is never used for a step
        return "<chat>" + messages[-1]["content"]

    def describe(self) -> dict:
        return {"backend": self.name}

    def close(self) -> None:
        pass


@pytest.fixture(scope="module")
def dsqa_v2(a2home):
    from agent2rl.settings import load_settings
    from agent2rl.tasks import get_task, prepare_task, task_root

    task = get_task("deepsearchqa", {"judge": "exact", "search": "bm25"})
    task.import_data(FIXTURE, task_root(task, load_settings().task_store))
    return prepare_task(task, load_settings().task_store)


def test_defaults_grade_accuracy_with_the_binary_judge_else_string_match(
    dsqa_v2, monkeypatch
) -> None:
    from agent2rl.settings import load_settings
    from agent2rl.tasks import get_task as _get_task
    from agent2rl.tasks import prepare_task

    def get_task(name: str, options: dict):
        task = _get_task(name, options)
        prepare_task(task, load_settings().task_store)
        return task

    prepared = dsqa_v2
    serp = _Serp()
    judge = start_fake_provider(api_key=JUDGE_KEY)
    judge.respond_with(_binary_reply)
    try:
        monkeypatch.setenv("SERPAPI_KEY", SERP_KEY)
        monkeypatch.setenv("AGENT2RL_SERPAPI_URL", serp.url)
        monkeypatch.setenv("AGENT2RL_JUDGE_API_KEY", JUDGE_KEY)
        # task version 2's loop and fenced judge, kept as options in version 3
        v2 = {"protocol": "react", "judge_prompt": "fenced"}
        task = get_task("deepsearchqa", {"judge_base_url": judge.openai_base_url,
                                         "judge_model": "fake-judge", **v2})  # fmt: skip
        assert task.version == "3"
        settings = task.eval_settings()
        assert settings["scorer"]["grading"] == "llm-judge-binary"
        assert settings["scorer"]["metric"] == "accuracy"
        assert settings["solver"]["search"]["backend"] == "serpapi"
        proto = settings["solver"]["protocol"]
        assert (proto["protocol"], proto["max_steps"], proto["max_new_tokens"]) == ("react", 6, 256)
        rows = read_jsonl(prepared.private / "questions.jsonl")
        answers = {}
        for i, r in enumerate(rows):
            if r["answer_type"] == "set":  # half of a set: incorrect (no partial credit)
                answers[r["question"]] = r["answer"].split(",")[0]
            elif i == 0:
                answers[r["question"]] = "Somewhere Else"
            else:
                answers[r["question"]] = f"It is {r['answer'].lower()}."
        policy = _ReactPolicy(answers)
        result = task.evaluate(policy, prepared)
        assert result.details["grading"] == "llm-judge-binary"
        assert result.details["judge"]["requests"] == len(rows)
        by_id = {i.id: i for i in result.items}
        expected = []
        for i, r in enumerate(rows):
            item = by_id[r["game_id"]]
            right = r["answer_type"] != "set" and i != 0
            expected.append(right)
            assert item.correct is right and item.score == float(right)
            assert item.meta["searches"] == 1 and item.meta["steps"] == 2
        assert result.score == pytest.approx(100.0 * sum(expected) / len(rows))
        assert result.details["accuracy_x100"] == pytest.approx(result.score)
        # the second prompt carries the search's action and observation (top 3 at most)
        later = [p for p in policy.prompts if "Observation:" in p]
        assert later and all(" Action: search[" in p and "[4]" not in p for p in later)
        assert all("Answer type: " in p for p in policy.prompts)
        # no judge: the reference's string match, another evaluation hash
        plain = get_task("deepsearchqa", {"judge": "exact", **v2})
        plain_result = plain.evaluate(_ReactPolicy(answers), prepared)
        assert plain_result.details["grading"] == "string-match"
        assert plain_result.score == pytest.approx(result.score)  # these grade alike
        assert plain.eval_hash({"b": 1}) != task.eval_hash({"b": 1})
        # metric=f1 keeps task version 1's rubric judge, another hash again
        f1 = get_task("deepsearchqa", {"metric": "f1", "judge": "exact", **v2})
        assert f1.eval_settings()["scorer"]["grading"] == "exact-match"
        assert f1.eval_hash({"b": 1}) != plain.eval_hash({"b": 1})
        with pytest.raises(UserError, match="metric=nope: use accuracy, f1"):
            get_task("deepsearchqa", {"metric": "nope"}).eval_settings()
        with pytest.raises(UserError, match="protocol=nope: use reference, react, transcript"):
            get_task("deepsearchqa", {"protocol": "nope"}).eval_settings()
        desc = task.description(prepared)
        assert "correct/incorrect verdict" in desc and "REACT_SYSTEM_PROMPT" in desc
    finally:
        judge.stop()
        serp.server.shutdown()
