"""deepsearchqa's keyless web search (:class:`WikipediaBackend`) against a MediaWiki-speaking
server on loopback (``support.fake_wikipedia``): hits parsed from the API's JSON and HTML
snippets, the User-Agent Wikimedia asks for, retries of transient failures, and every
failure (HTTP errors, a timeout, an API error in the body, a body that is not JSON, a
refused connection) as :class:`SearchUnavailable`. No request leaves the machine."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from support.fake_wikipedia import start_fake_wikipedia

from agent2rl.files import read_jsonl
from agent2rl.tasks.deepsearch.search import (
    USER_AGENT,
    WIKIPEDIA_URL,
    SearchUnavailable,
    WikipediaBackend,
    snippet_text,
    wikipedia_url,
)

FIXTURE = Path(__file__).resolve().parents[2] / "support" / "fixtures" / "deepsearchqa"


@pytest.fixture(scope="module")
def wiki():
    docs = read_jsonl(FIXTURE / "corpus.jsonl")
    docs.append({"title": "Ada Fenwick (engineer)", "text": 'Ada "Fen" Fenwick & <co> built it.'})
    w = start_fake_wikipedia(docs)
    yield w
    w.stop()


@pytest.fixture()
def fresh(wiki):
    """The server's failure settings back to none after each test."""
    yield wiki
    wiki.fail, wiki.fail_status, wiki.delay_s = 0, 503, 0.0
    wiki.api_error, wiki.garbage = "", False


def test_hits_from_the_api_json(fresh) -> None:
    backend = WikipediaBackend(url=fresh.url, backoff_s=0.01)
    hits = backend.search("Harrowgate Bridge designed", 3)
    assert 0 < len(hits) <= 3
    assert hits[0].title == "Harrowgate Bridge" and "Ada Fenwick" in hits[0].snippet
    assert "<span" not in hits[0].snippet and "searchmatch" not in hits[0].snippet
    assert hits[0].url == f"{fresh.base}/wiki/Harrowgate_Bridge"
    assert fresh.queries[-1] == "Harrowgate Bridge designed"
    assert fresh.agents[-1] == USER_AGENT  # Wikimedia's policy: a descriptive agent
    # entities decoded, a title with parentheses kept readable in its address
    fen = backend.search("Fen engineer", 1)[0]
    assert fen.snippet == 'Ada "Fen" Fenwick & <co> built it.'
    assert fen.url.endswith("/wiki/Ada_Fenwick_(engineer)")
    assert backend.search("zzqx nothing matches", 5) == []  # no results: empty, no error
    n = len(fresh.queries)
    assert backend.search("   ", 5) == [] and backend.search("bridge", 0) == []
    assert len(fresh.queries) == n  # neither was sent
    assert backend.identity() == {"backend": "wikipedia", "engine": "mediawiki", "url": fresh.url}
    backend.close()


def test_transient_failures_are_retried(fresh) -> None:
    backend = WikipediaBackend(url=fresh.url, max_attempts=3, backoff_s=0.01)
    fresh.fail = 2  # two 503s, then an answer
    assert backend.search("Tamsin Observatory", 2)[0].title == "Tamsin Observatory"
    fresh.fail, fresh.fail_status = 1, 429
    assert backend.search("Tamsin Observatory", 2)[0].title == "Tamsin Observatory"
    backend.close()


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        ({"fail": 5}, r"Wikipedia at .* failed \(HTTP 503\)"),
        ({"fail": 1, "fail_status": 403}, r"HTTP 403"),  # not retried
        ({"api_error": "internal_api_error_DBQueryError"}, r"internal_api_error_DBQueryError"),
        ({"garbage": True}, r"without JSON"),
        ({"delay_s": 1.0}, r"failed \(\w*Timeout"),
    ],
)
def test_failures_raise_search_unavailable(fresh, setup, message) -> None:
    for key, value in setup.items():
        setattr(fresh, key, value)
    backend = WikipediaBackend(url=fresh.url, timeout_s=0.3, max_attempts=2, backoff_s=0.01)
    with pytest.raises(SearchUnavailable, match=message):
        backend.search("Harrowgate Bridge", 3)
    backend.close()


def test_a_refused_connection_is_search_unavailable() -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    backend = WikipediaBackend(url=f"http://127.0.0.1:{port}/w/api.php", backoff_s=0.01)
    with pytest.raises(SearchUnavailable, match="ConnectError"):
        backend.search("anything", 3)
    backend.close()


def test_endpoint_from_the_host_environment(monkeypatch) -> None:
    monkeypatch.delenv("AGENT2RL_WIKIPEDIA_URL", raising=False)
    assert wikipedia_url() == WIKIPEDIA_URL == "https://en.wikipedia.org/w/api.php"
    monkeypatch.setenv("AGENT2RL_WIKIPEDIA_URL", "http://127.0.0.1:9/w/api.php")
    assert WikipediaBackend().url == "http://127.0.0.1:9/w/api.php"


def test_snippet_text() -> None:
    raw = 'The <span class="searchmatch">Bridge</span> &amp; its\n  &quot;arch&quot;'
    assert snippet_text(raw) == 'The Bridge & its "arch"'
    assert snippet_text("") == ""
