"""deepsearchqa: the offline import of a fixture in the dataset's schema and the seeded
split; SerpAPI's backend against a SerpAPI-speaking server on loopback; and the grader end
to end: a scripted policy plays the ReAct loop through the task's evaluate(), its searches
go to that server, its answers are graded by the DeepSearchQA rubric on the project's fake
OpenAI-compatible judge (with the judgment cache), or by exact match without a judge."""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest
from support.fake_provider import Turn, start_fake_provider
from support.fake_wikipedia import start_fake_wikipedia

from agent2rl.errors import UserError
from agent2rl.files import read_jsonl
from agent2rl.inference.backend import GenerationSettings
from agent2rl.scoring.judges import JudgeUnavailable
from agent2rl.tasks.deepsearch.judge import parse_verdict
from agent2rl.tasks.deepsearch.search import SearchUnavailable, SerpAPIBackend
from agent2rl.tasks.deepsearch.store import (
    DSQA_SPLIT_SEED,
    read_table,
    split_dsqa,
    write_dsqa_store,
)

FIXTURE = Path(__file__).resolve().parents[2] / "support" / "fixtures" / "deepsearchqa"
SERP_KEY = "serp-test-key"
JUDGE_KEY = "judge-test-key"
#: task version 1's grading and loop (the transcript protocol, mean F1), still options; the
#: reference's defaults are tested in test_deepsearchqa_reference.py
V1 = {"protocol": "transcript", "metric": "f1"}


# -- a SerpAPI-speaking server on loopback -------------------------------------------------
class _Serp:
    def __init__(self) -> None:
        self.docs = read_jsonl(FIXTURE / "corpus.jsonl")
        self.queries: list[str] = []
        self.fail = 0  # answer this many requests with 503 first
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:
                q = parse_qs(urlparse(self.path).query)
                if outer.fail:
                    outer.fail -= 1
                    return self._send(503, {"error": "busy"})
                if q.get("api_key") != [SERP_KEY] or q.get("engine") != ["google"]:
                    return self._send(401, {"error": "Invalid API key."})
                query = q["q"][0]
                outer.queries.append(query)
                words = set(re.findall(r"\w+", query.lower()))

                def overlap(d: dict) -> int:
                    return len(words & set(re.findall(r"\w+", f"{d['title']} {d['text']}".lower())))

                scored = sorted(
                    ((overlap(d), i) for i, d in enumerate(outer.docs)), key=lambda t: (-t[0], t[1])
                )
                rows = [
                    {"position": r + 1, "title": outer.docs[i]["title"],
                     "link": outer.docs[i]["url"], "snippet": outer.docs[i]["text"]}
                    for r, (n, i) in enumerate(scored[: int(q.get("num", ["5"])[0])]) if n
                ]  # fmt: skip
                self._send(200, {"search_metadata": {"status": "Success"}, "organic_results": rows})

            def _send(self, status: int, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/search.json"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture(scope="module")
def serp():
    s = _Serp()
    yield s
    s.server.shutdown()


def _judge_reply(body: dict) -> Turn:
    """The scripted judge: an expected item is found when the response contains it; the
    response's comma-separated items matching none are extraneous."""
    text = body["messages"][-1]["content"]
    items = re.findall(r"^- (.+)$", text.split("Response:")[0], re.M)
    # the response is fenced by its id: <response ID> ... </response ID>
    fence = re.search(r"^<response (\w+)>\n(.*)\n</response \1>$", text, re.M | re.S)
    rid, response = fence.group(1), fence.group(2).strip().lower()
    found = [{"item": i, "found": i.lower() in response} for i in items]
    extra = [
        r.strip() for r in response.split(",") if r.strip() and not any(
            i.lower() in r for i in items)
    ]  # fmt: skip
    verdict = {"response_id": rid, "expected": found, "extraneous": extra}
    return Turn(text="Verdict:\n" + json.dumps(verdict))


@pytest.fixture(scope="module")
def judge():
    provider = start_fake_provider(api_key=JUDGE_KEY)
    provider.respond_with(_judge_reply)
    yield provider
    provider.stop()


@pytest.fixture(scope="module")
def dsqa(a2home):
    from agent2rl.settings import load_settings
    from agent2rl.tasks import get_task, prepare_task, task_root

    task = get_task("deepsearchqa", {**V1, "judge": "exact", "search": "bm25"})
    summary = task.import_data(FIXTURE, task_root(task, load_settings().task_store))
    return task, prepare_task(task, load_settings().task_store), summary


class _Policy:
    """A scripted model: searches the question once, then answers from its table (a set
    question only half, one question wrongly)."""

    name = "scripted-policy"

    def __init__(self, answers: dict[str, str]) -> None:
        self.answers = answers

    def generate(self, prompts: list[str], settings: GenerationSettings) -> list[str]:
        out = []
        for p in prompts:
            question = p.split("\n", 1)[0].removeprefix("Question: ")
            if "[1] " not in p:
                out.append(f" search[{question[:120]}]\n")
            else:
                out.append(f" answer[{self.answers.get(question, 'Nobody')}]\n")
        return out

    def chat_prompt(self, messages):
        return None

    def describe(self) -> dict:
        return {"backend": self.name}

    def close(self) -> None:
        pass


def test_import_splits_the_fixture_seeded_and_disjoint(dsqa, tmp_path) -> None:
    task, prepared, summary = dsqa
    assert "4 graded / 4 public / 4 validation" in summary and "subset" in summary
    rows = {s: read_jsonl(prepared.split(s) / "questions.jsonl") for s in
            ("private", "public", "validation")}  # fmt: skip
    ids = [r["game_id"] for v in rows.values() for r in v]
    assert len(ids) == len(set(ids)) == 12
    source = read_table(FIXTURE / "deepsearchqa_eval.csv")
    assert set(source[0]) == {"problem", "problem_category", "answer", "answer_type"}
    by_q = {r["problem"]: r for r in source}
    for r in rows["private"] + rows["public"]:
        src = by_q[r["question"]]
        assert r["answer"] == src["answer"] and r["category"] == src["problem_category"]
        assert r["answer_type"] == ("set" if src["answer_type"] == "Set Answer" else "single")
    # the split is a shuffle seeded with DSQA_SPLIT_SEED: the same every time
    again = split_dsqa([dict(r, game_id=str(i)) for i, r in enumerate(source)])
    assert [len(x) for x in again[:3]] == [4, 4, 4] and again[3] is False
    assert DSQA_SPLIT_SEED == 42
    manifest = json.loads((prepared.private.parent / "manifest.json").read_text())
    assert manifest["local_corpus"] and not manifest["official_sizes"]
    desc = task.description(prepared)
    assert "exact match" in desc and "(bm25)" in desc and "subset" in desc
    samples = task.samples(prepared, "private")
    assert samples[0].metadata["answer_type"] in ("single", "set")
    with pytest.raises(UserError, match="no DeepSearchQA questions"):
        task.import_data(tmp_path, tmp_path / "store")


def test_without_data_or_search_the_errors_name_the_fix(dsqa, tmp_path, monkeypatch) -> None:
    from agent2rl.tasks import get_task

    task = get_task("deepsearchqa")
    with pytest.raises(UserError, match="data import deepsearchqa"):
        task.prepare(tmp_path / "empty")  # offline in tests: no hub download
    _, prepared, _ = dsqa
    monkeypatch.delenv("SERPAPI_KEY", raising=False)
    with pytest.raises(UserError, match="SERPAPI_KEY"):
        get_task("deepsearchqa", {"search": "serpapi"}).search_identity(prepared)
    # auto is the reference's: SerpAPI with a key, else the keyless web search (a local
    # corpus only when asked for: search=bm25)
    assert get_task("deepsearchqa").search_identity(prepared)["backend"] == "wikipedia"
    assert get_task("deepsearchqa", {"search": "bm25"}).search_identity(prepared)["backend"] == (
        "bm25"
    )
    monkeypatch.setenv("SERPAPI_KEY", SERP_KEY)
    assert get_task("deepsearchqa").search_identity(prepared)["backend"] == "serpapi"


def test_serpapi_backend_on_loopback(serp) -> None:
    backend = SerpAPIBackend(SERP_KEY, url=serp.url, backoff_s=0.01)
    hits = backend.search("Harrowgate Bridge designed", 3)
    assert hits[0].title == "Harrowgate Bridge" and "Ada Fenwick" in hits[0].snippet
    assert hits[0].url.startswith("https://example.org/") and len(hits) <= 3
    serp.fail = 2  # transient 503s are retried
    assert backend.search("Tamsin Observatory", 2)[0].title == "Tamsin Observatory"
    with pytest.raises(SearchUnavailable, match="HTTP 401"):
        SerpAPIBackend("wrong", url=serp.url).search("x", 1)
    with pytest.raises(ValueError, match="SERPAPI_KEY"):
        SerpAPIBackend("")
    backend.close()


def test_verdict_parsing() -> None:
    ok = parse_verdict('x {"expected": [{"item": "a", "found": true}], "extraneous": ["b"]}', 1)
    assert ok is not None and ok.outcome == "correct_with_extraneous" and ok.f1 == 2 / 3
    assert parse_verdict("no json here", 1) is None
    assert parse_verdict('{"expected": [], "extraneous": []}', 1) is None


def test_grader_end_to_end_with_judge_serpapi_and_exact(dsqa, serp, judge, monkeypatch) -> None:
    from agent2rl.settings import load_settings
    from agent2rl.tasks import get_task, prepare_task

    _, prepared, _ = dsqa
    monkeypatch.setenv("SERPAPI_KEY", SERP_KEY)
    monkeypatch.setenv("AGENT2RL_SERPAPI_URL", serp.url)
    monkeypatch.setenv("AGENT2RL_JUDGE_API_KEY", JUDGE_KEY)
    rows = read_jsonl(prepared.private / "questions.jsonl")
    answers = {}
    for i, r in enumerate(rows):
        if r["answer_type"] == "set":  # half of a set: partially correct
            answers[r["question"]] = r["answer"].split(",")[0]
        elif i == 0:
            answers[r["question"]] = "Somewhere Else"
        else:
            answers[r["question"]] = r["answer"].lower()
    options = {**V1, "judge_base_url": judge.openai_base_url, "judge_model": "fake-judge"}
    task = get_task("deepsearchqa", options)  # judge=auto with a key: the LLM judge
    prepare_task(task, load_settings().task_store)
    assert task.judge_enabled()
    settings = task.eval_settings()
    assert settings["scorer"]["grading"] == "llm-judge"
    assert settings["solver"]["search"]["backend"] == "serpapi"
    record = prepared.private.parent.parent / "grading-record"
    task.record_dir = record
    served_before = len(judge.served)
    result = task.evaluate(_Policy(answers), prepared)
    assert len(result.items) == len(rows) == 4
    assert result.details["grading"] == "llm-judge"
    assert result.details["search_backend"] == "serpapi"
    assert result.details["judge"]["requests"] == 4 and result.details["judge"]["errors"] == 0
    assert len(judge.served) - served_before == 4
    by_id = {i.id: i for i in result.items}
    for i, r in enumerate(rows):
        item = by_id[r["game_id"]]
        assert item.meta["searches"] == 1 and item.meta["steps"] == 2
        if r["answer_type"] == "set":
            assert item.meta["outcome"] == "partially_correct" and 0 < item.score < 1
        elif i == 0:
            assert item.meta["outcome"] == "fully_incorrect" and item.score == 0.0
        else:
            assert item.correct and item.score == 1.0
    queries = read_jsonl(record / "search_queries.jsonl")
    assert len(queries) == 4 and {q["backend"] for q in queries} == {"serpapi"}
    assert (record / "judge_usage.jsonl").exists()
    assert set(serp.queries) >= {q["query"] for q in queries}
    # the same answers again: every verdict from the cache, no judge request
    task.record_dir = None
    again = task.evaluate(_Policy(answers), prepared)
    assert again.details["judge"]["cache_hits"] == 4 and again.details["judge"]["requests"] == 0
    assert [i.score for i in again.items] == [i.score for i in result.items]
    # without a judge: exact match, another evaluation hash, over the local BM25 corpus
    exact = get_task("deepsearchqa", {**options, "judge": "exact", "search": "bm25"})
    prepare_task(exact, load_settings().task_store)
    plain = exact.evaluate(_Policy(answers), prepared)
    assert plain.details["grading"] == "exact-match" and "judge" not in plain.details
    assert plain.details["search_backend"] == "bm25"
    assert exact.eval_hash({"b": 1}) != task.eval_hash({"b": 1})
    assert plain.score == pytest.approx(result.score)  # these answers grade alike
    # the judge down: a harness failure, never a silent 0
    judge.respond_with(lambda body: Turn(error_status=401, error_message="bad key"))
    try:
        fresh = {q: a + " (again)" for q, a in answers.items()}
        with pytest.raises(JudgeUnavailable):
            task.evaluate(_Policy(fresh), prepared)
    finally:
        judge.respond_with(_judge_reply)


def test_wikipedia_search_is_keyless_and_the_grader_records_every_query(
    dsqa, tmp_path, monkeypatch
) -> None:
    """search=wikipedia through a MediaWiki-speaking server on loopback: the identity and
    the description name it, auto picks it when there is neither a key nor a corpus, the
    grader's episodes search it and record every query, and an outage fails the evaluation
    (SearchUnavailable), never a silent 0."""
    from agent2rl.dataset import PreparedTask
    from agent2rl.tasks import get_task

    _, prepared, _ = dsqa
    wiki = start_fake_wikipedia(read_jsonl(FIXTURE / "corpus.jsonl"))
    try:
        monkeypatch.delenv("SERPAPI_KEY", raising=False)
        monkeypatch.setenv("AGENT2RL_WIKIPEDIA_URL", wiki.url)
        task = get_task("deepsearchqa", {**V1, "judge": "exact", "search": "wikipedia"})
        identity = task.search_identity(prepared)
        assert identity == {"backend": "wikipedia", "engine": "mediawiki", "url": wiki.url}
        assert "(wikipedia)" in task.description(prepared)
        with pytest.raises(UserError, match="bm25, wikipedia"):
            get_task("deepsearchqa", {"search": "nope"}).search_identity(prepared)
        # no key and no local corpus: auto is the keyless web search
        bare = tmp_path / "bare"
        rows = read_table(FIXTURE / "deepsearchqa_eval.csv")
        write_dsqa_store(bare, rows, None, "fixture without corpus")
        no_corpus = PreparedTask(bare / "public", bare / "private", bare / "validation")
        assert get_task("deepsearchqa").search_identity(no_corpus)["backend"] == "wikipedia"
        with pytest.raises(UserError, match="search=wikipedia"):
            get_task("deepsearchqa", {"search": "bm25"}).search_identity(no_corpus)

        graded = read_jsonl(prepared.private / "questions.jsonl")
        answers = {r["question"]: r["answer"] for r in graded}
        task.record_dir = tmp_path / "grading"
        result = task.evaluate(_Policy(answers), prepared)
        assert result.details["search_backend"] == "wikipedia"
        assert task.solver_settings(prepared)["search"]["backend"] == "wikipedia"
        assert result.score == pytest.approx(100.0)
        queries = read_jsonl(tmp_path / "grading" / "search_queries.jsonl")
        assert len(queries) == len(graded) and {q["backend"] for q in queries} == {"wikipedia"}
        assert sorted(q["query"] for q in queries) == sorted(wiki.queries)
        assert {q["game_id"] for q in queries} == {r["game_id"] for r in graded}
        assert all(q["step"] == 1 and q["hits"] > 0 for q in queries)
        # Wikipedia down: the evaluation fails as the harness's failure
        wiki.fail = 100
        with pytest.raises(SearchUnavailable, match="HTTP 503"):
            task.evaluate(_Policy(answers), prepared)
        failed = read_jsonl(tmp_path / "grading" / "search_queries.jsonl")[len(queries) :]
        assert failed and all(q["error"] and q["hits"] == 0 for q in failed)
    finally:
        wiki.stop()
