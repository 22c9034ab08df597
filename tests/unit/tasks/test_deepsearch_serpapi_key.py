"""The SerpAPI key's name (issue #39 item 7): the reference reads ``SERPAPI_KEY``
(``deepsearchqa/eval.py``: ``os.environ.get("SERPAPI_KEY")``); ``SERPAPI_API_KEY``, the name
paper.toml's comment once gave, is accepted with a warning naming the right one."""

from __future__ import annotations

import logging

import pytest

from agent2rl.tasks.deepsearch import search


def test_the_reference_name_is_read_without_a_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    search._warn_alias.cache_clear()
    monkeypatch.setenv("SERPAPI_KEY", "ref-key")
    monkeypatch.setenv("SERPAPI_API_KEY", "other-key")
    with caplog.at_level(logging.WARNING):
        assert search.serpapi_key() == "ref-key"
    assert not caplog.records


def test_the_other_name_is_accepted_with_a_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    search._warn_alias.cache_clear()
    monkeypatch.delenv("SERPAPI_KEY", raising=False)
    monkeypatch.setenv("SERPAPI_API_KEY", "other-key")
    with caplog.at_level(logging.WARNING):
        assert search.serpapi_key() == "other-key"
        assert search.SEARCH_BACKENDS.get("serpapi").unavailable(search.Path("x")) is None
    assert any("set SERPAPI_KEY" in r.getMessage() for r in caplog.records)


def test_no_key_under_either_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SERPAPI_KEY", raising=False)
    monkeypatch.delenv("SERPAPI_API_KEY", raising=False)
    assert search.serpapi_key() == ""
