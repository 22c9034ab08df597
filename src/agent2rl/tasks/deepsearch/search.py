"""Search behind one interface (:class:`SearchBackend`), for the grader's episodes and the
rollout service's alike.

- :class:`BM25Backend`: a local corpus (``corpus.jsonl``: ``id``, ``title``, ``text``,
  optional ``url``) searched with BM25 (:mod:`~agent2rl.tasks.shared.bm25`). A hit's
  snippet is the page's sentence that shares the most query words beyond the page's title
  (the first sentence when none does), so a query that names a page and a relation
  (``amber loom society founded``) shows the sentence stating it.
- :class:`SerpAPIBackend`: Google results through SerpAPI (the reference's choice), when
  ``SERPAPI_KEY`` is set in the host's environment (``AGENT2RL_SERPAPI_URL`` overrides the
  endpoint: a proxy, a test server). The key stays on the host: the grader
  and the rollout service call SerpAPI, the agent only ever calls the service.
- :class:`WikipediaBackend`: keyless web search, English Wikipedia's full-text search
  through the MediaWiki Action API (``action=query&list=search``; ``AGENT2RL_WIKIPEDIA_URL``
  overrides the endpoint). Chosen over scraping a search engine's HTML page (DuckDuckGo's
  ``html.duckduckgo.com``): it is a documented JSON API that Wikimedia allows automated
  clients to use without a key, while an HTML results page changes without notice and
  answers automated clients with CAPTCHAs. It searches Wikipedia only, not the whole web,
  and its index is live: results drift over time.

The backends a task may name (``--task-opt search=NAME``) are :data:`SEARCH_BACKENDS`, a
:class:`~agent2rl.registry.Registry` of :class:`SearchEngine` entries: the three above, and
any an installed distribution adds through the ``agent2rl.search_backends`` entry-point
group (naming a :class:`SearchEngine`); a second engine under a taken name is refused.

Every query can be recorded (:class:`QueryLog`: one JSON line per query with the game, the
step, the backend, the number of hits and the time taken). A backend that cannot answer
raises :class:`SearchUnavailable`: the harness's failure, never a silent empty result (the
rollout service answers it with 503, the step unplayed).
"""

from __future__ import annotations

import functools
import hashlib
import html
import json
import logging
import os
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import quote, urljoin

import httpx

from agent2rl.files import read_jsonl
from agent2rl.registry import Registry
from agent2rl.rollout.env import EnvironmentUnavailable, SearchRecord
from agent2rl.tasks.shared.bm25 import BM25Index

log = logging.getLogger(__name__)

SERPAPI_URL = "https://serpapi.com/search.json"
#: the reference's name (deepsearchqa/eval.py reads ``os.environ.get("SERPAPI_KEY")``)
SERPAPI_KEY_ENV = "SERPAPI_KEY"
#: SerpAPI's client libraries' name, accepted with a warning when SERPAPI_KEY is not set
SERPAPI_KEY_ALIAS_ENV = "SERPAPI_API_KEY"
#: the host may point SerpAPI requests elsewhere (a proxy, a loopback test server)
SERPAPI_URL_ENV = "AGENT2RL_SERPAPI_URL"
WIKIPEDIA_URL = "https://en.wikipedia.org/w/api.php"
#: the host may point Wikipedia requests elsewhere (another language, a mirror, a test server)
WIKIPEDIA_URL_ENV = "AGENT2RL_WIKIPEDIA_URL"
#: Wikimedia's User-Agent policy asks for a descriptive agent; generic ones may get 403
USER_AGENT = "agent2rl/0.1 (agentic RL benchmark harness; deepsearchqa search backend)"
#: the longest wait a Retry-After header may impose before a retry
MAX_BACKOFF_S = 30.0
_TAG = re.compile(r"<[^>]*>")
_SENTENCE = re.compile(r"(?<=[.!?])\s+")
_WORD = re.compile(r"[a-z0-9]+")


class SearchUnavailable(EnvironmentUnavailable):
    """The search backend could not answer (network, quota, a refused key, a timeout). One
    line naming the backend and the cause."""


@dataclass(frozen=True)
class Hit:
    """One search result."""

    title: str
    snippet: str
    url: str = ""


class SearchBackend(Protocol):
    """A search engine: ``search`` returns up to ``k`` hits, best first."""

    name: str

    def search(self, query: str, k: int) -> list[Hit]: ...

    def identity(self) -> dict[str, Any]:
        """What can change a result (the backend, its corpus or engine): part of the
        evaluation settings."""
        ...


class QueryLog:
    """Appends one JSON line per query to ``path`` (thread-safe); None records nothing.

    A line: ``t`` (Unix time), ``game_id`` and ``step`` (the episode's step number the
    search was, or would have been had it not failed), then the
    :meth:`~agent2rl.rollout.env.SearchRecord.to_row` fields: ``backend``, ``query`` (cut to
    :data:`~agent2rl.rollout.env.MAX_RECORDED_QUERY_CHARS`), ``query_chars``, ``hits``,
    ``seconds`` and ``error`` ('' unless the search failed)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._lock = threading.Lock()

    def record(self, search: SearchRecord, game_id: str = "", step: int = 0) -> None:
        if self.path is None:
            return
        row = {"t": time.time(), "game_id": game_id, "step": step, **search.to_row()}
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "a", encoding="utf-8") as fh:
                fh.write(json.dumps(row) + "\n")


def _words(text: str) -> set[str]:
    return set(_WORD.findall(text.lower()))


def best_sentence(text: str, title: str, query: str) -> str:
    """The sentence of ``text`` sharing the most query words that are not title words
    (the first on a tie, the first sentence when none shares any)."""
    sentences = [s for s in _SENTENCE.split(text.strip()) if s] or [text]
    wanted = _words(query) - _words(title)
    return max(sentences, key=lambda s: len(wanted & _words(s)))  # max keeps the first


class BM25Backend:
    """BM25 (:class:`~agent2rl.tasks.shared.bm25.BM25Index`) over ``documents`` (dicts with
    ``title`` and ``text``, optional ``id`` and ``url``); hits scoring above 0 only, ties in
    corpus order (deterministic)."""

    name = "bm25"

    def __init__(self, documents: list[dict[str, Any]], digest: str = "") -> None:
        self.documents = documents
        self.digest = digest
        self._index = BM25Index([f"{d['title']} {d['text']}".lower() for d in documents])

    def identity(self) -> dict[str, Any]:
        return {"backend": self.name, "corpus": self.digest, "documents": len(self.documents)}

    def search(self, query: str, k: int) -> list[Hit]:
        hits = []
        for i in self._index.rank(query.lower(), k):
            d = self.documents[i]
            hits.append(
                Hit(d["title"], best_sentence(d["text"], d["title"], query), d.get("url", ""))
            )
        return hits


@functools.lru_cache(maxsize=4)
def open_corpus(path: Path) -> BM25Backend:
    """The BM25 backend over the ``corpus.jsonl`` at ``path``, built once per process (every
    split and session shares it). FileNotFoundError when there is none."""
    data = Path(path).read_bytes()
    return BM25Backend(read_jsonl(Path(path)), hashlib.sha256(data).hexdigest()[:16])


class _WebBackend:
    """What the web backends share: one HTTP client, a GET of :attr:`url` and its JSON body.
    Transient failures (connection errors, timeouts, 429, 5xx) are retried ``max_attempts``
    times with exponential backoff (:func:`fetch_with_retries`); then, or on another status,
    or a body that is not JSON: :class:`SearchUnavailable`."""

    name: str
    #: the backend's name in its errors
    label: str

    def __init__(
        self,
        url: str,
        timeout_s: float,
        max_attempts: int,
        backoff_s: float,
        headers: dict[str, str] | None = None,
    ) -> None:
        self.url = url
        self.max_attempts = max(1, max_attempts)
        self.backoff_s = backoff_s
        self._http = httpx.Client(timeout=timeout_s, headers=headers)

    def _get(self, params: dict[str, Any]) -> Any:
        resp = fetch_with_retries(
            self._http, self.url, params, self.label, self.max_attempts, self.backoff_s
        )
        try:
            return resp.json()
        except ValueError:
            raise SearchUnavailable(f"{self.label} at {self.url} answered without JSON") from None

    def close(self) -> None:
        self._http.close()


class SerpAPIBackend(_WebBackend):
    """Google's organic results through SerpAPI (``engine=google``): a hit is a result's
    ``title``, ``snippet`` and ``link``; an error in the body is :class:`SearchUnavailable`,
    but SerpAPI's "hasn't returned any results", which is no results."""

    name = "serpapi"
    label = "SerpAPI"

    def __init__(
        self,
        api_key: str,
        url: str | None = None,
        timeout_s: float = 30.0,
        max_attempts: int = 3,
        backoff_s: float = 1.0,
    ) -> None:
        if not api_key:
            raise ValueError(f"SerpAPI needs a key: set {SERPAPI_KEY_ENV} on the host")
        url = url or os.environ.get(SERPAPI_URL_ENV) or SERPAPI_URL
        super().__init__(url, timeout_s, max_attempts, backoff_s)
        self.api_key = api_key

    def identity(self) -> dict[str, Any]:
        return {"backend": self.name, "engine": "google", "url": self.url}

    def search(self, query: str, k: int) -> list[Hit]:
        data = self._get({"engine": "google", "q": query, "num": k, "api_key": self.api_key})
        if data.get("error") and not data.get("organic_results"):
            if "hasn't returned any results" in str(data["error"]):
                return []
            raise SearchUnavailable(f"SerpAPI at {self.url}: {data['error']}")
        return [
            Hit(
                str(row.get("title") or ""),
                " ".join(str(row.get("snippet") or "").split()),
                str(row.get("link") or ""),
            )
            for row in (data.get("organic_results") or [])[:k]
        ]


class WikipediaBackend(_WebBackend):
    """Keyless web search: English Wikipedia's full-text search (CirrusSearch) through the
    MediaWiki Action API. A hit is an article's ``title``, its search ``snippet`` (HTML
    highlighting removed, entities decoded) and its ``/wiki/`` address.

    Requests carry a descriptive User-Agent (Wikimedia's policy) and at most
    ``max_parallel`` are in flight at once (Wikimedia asks API clients not to flood it; the
    rollout service may run dozens of sessions). An API error in the body (MediaWiki answers
    errors with HTTP 200 and an ``error`` object), or a body that is not the API's JSON, is
    :class:`SearchUnavailable`. No results is an empty list, not an error. A blank query or
    ``k < 1`` returns ``[]`` without a request."""

    name = "wikipedia"
    label = "Wikipedia"

    def __init__(
        self,
        url: str | None = None,
        timeout_s: float = 30.0,
        max_attempts: int = 3,
        backoff_s: float = 1.0,
        max_parallel: int = 4,
    ) -> None:
        super().__init__(
            url or wikipedia_url(), timeout_s, max_attempts, backoff_s, {"User-Agent": USER_AGENT}
        )
        self._slots = threading.BoundedSemaphore(max(1, max_parallel))

    def identity(self) -> dict[str, Any]:
        return {"backend": self.name, "engine": "mediawiki", "url": self.url}

    def search(self, query: str, k: int) -> list[Hit]:
        if not query.strip() or k < 1:
            return []
        params = {
            "action": "query",
            "list": "search",
            "srsearch": query,
            "srlimit": k,
            "srprop": "snippet",
            "format": "json",
            "formatversion": 2,
            "utf8": 1,
        }
        with self._slots:
            data = self._get(params)
        if not isinstance(data, dict):
            raise SearchUnavailable(f"Wikipedia at {self.url} answered {type(data).__name__}")
        if isinstance(data.get("error"), dict):
            err = data["error"]
            raise SearchUnavailable(
                f"Wikipedia at {self.url}: {err.get('code', '?')}: {err.get('info', '')}"
            )
        rows = (data.get("query") or {}).get("search")
        if not isinstance(rows, list):
            raise SearchUnavailable(f"Wikipedia at {self.url} answered without query.search")
        hits = []
        for row in rows[:k]:
            if isinstance(row, dict):
                title = str(row.get("title") or "")
                hits.append(
                    Hit(title, snippet_text(str(row.get("snippet") or "")), self.page_url(title))
                )
        return hits

    def page_url(self, title: str) -> str:
        """The article's address beside the API's (``.../w/api.php`` -> ``.../wiki/T_itle``)."""
        return urljoin(self.url, "/wiki/" + quote(title.replace(" ", "_"), safe="/:(),'!*"))


def snippet_text(snippet: str) -> str:
    """MediaWiki's HTML search snippet as plain text: tags (the ``searchmatch`` highlights)
    removed, entities decoded, whitespace collapsed."""
    return " ".join(html.unescape(_TAG.sub("", snippet)).split())


def fetch_with_retries(
    http: httpx.Client,
    url: str,
    params: dict[str, Any],
    what: str,
    max_attempts: int,
    backoff_s: float,
) -> httpx.Response:
    """GET ``url`` with ``params``: the 200 response. Connection errors, timeouts, 429 and
    5xx are retried up to ``max_attempts`` tries in all, waiting ``backoff_s`` doubling per
    try (a ``Retry-After`` in seconds instead, when given; at most
    :data:`MAX_BACKOFF_S`); then, or at once on another status, :class:`SearchUnavailable`
    naming ``what``, the URL and the last cause."""
    last, wait = "", 0.0
    for attempt in range(max(1, max_attempts)):
        if attempt:
            time.sleep(min(wait or backoff_s * 2 ** (attempt - 1), MAX_BACKOFF_S))
        wait = 0.0
        try:
            resp = http.get(url, params=params)
        except httpx.HTTPError as err:
            last = f"{type(err).__name__}: {err}"
            continue
        if resp.status_code == 200:
            return resp
        last = f"HTTP {resp.status_code}"
        if resp.status_code != 429 and resp.status_code < 500:
            break
        wait = _retry_after(resp.headers.get("retry-after", ""))
    raise SearchUnavailable(f"{what} at {url} failed ({last})")


def _retry_after(value: str) -> float:
    """A ``Retry-After`` in seconds, or 0 (absent, or an HTTP date: the doubling applies)."""
    try:
        return max(0.0, float(value))
    except ValueError:
        return 0.0


def wikipedia_url() -> str:
    """The MediaWiki API endpoint searched: ``AGENT2RL_WIKIPEDIA_URL`` on the host, else
    English Wikipedia's."""
    return os.environ.get(WIKIPEDIA_URL_ENV) or WIKIPEDIA_URL


def serpapi_key() -> str:
    """The SerpAPI key from the host environment, or ``""``: ``SERPAPI_KEY`` (the
    reference's name), else ``SERPAPI_API_KEY`` with a warning naming the right variable
    (logged once per process)."""
    key = os.environ.get(SERPAPI_KEY_ENV, "")
    if key:
        return key
    key = os.environ.get(SERPAPI_KEY_ALIAS_ENV, "")
    if key:
        _warn_alias()
    return key


@functools.cache
def _warn_alias() -> None:
    log.warning(
        "%s is not set; using %s as the SerpAPI key (set %s: the reference's name)",
        SERPAPI_KEY_ENV,
        SERPAPI_KEY_ALIAS_ENV,
        SERPAPI_KEY_ENV,
    )


# -- the registry --------------------------------------------------------------------------
@dataclass(frozen=True)
class SearchEngine:
    """A search backend a task can name: how to open it over the task's store, what
    identifies its results, and whether it can run here.

    ``corpus`` is the path of the task store's ``corpus.jsonl`` (which may not exist: only
    an engine that searches it needs it). ``identity`` states what can change a result
    without opening the engine (building an index or a client): it goes into the
    evaluation settings, so two engines, or one engine over two corpora, never compare.
    ``unavailable`` says in one line why the engine cannot run on this host (no key, no
    corpus) and how to fix that, or None when it can.
    """

    name: str
    open: Callable[[Path], SearchBackend]
    identity: Callable[[Path], dict[str, Any]]
    unavailable: Callable[[Path], str | None] = lambda corpus: None


def _bm25_unavailable(corpus: Path) -> str | None:
    if corpus.exists():
        return None
    return (
        "deepsearchqa has no local corpus: import one (a corpus.jsonl of title/text rows "
        "beside the questions) with `agent2rl data import deepsearchqa DIR`, or search the "
        "web: search=wikipedia (keyless) or search=serpapi (SERPAPI_KEY)"
    )


def _serpapi_unavailable(corpus: Path) -> str | None:
    if serpapi_key():
        return None
    return f"search=serpapi needs {SERPAPI_KEY_ENV} in the host's environment"


#: Every search backend by name, in registration order (an error lists them in this order).
SEARCH_BACKENDS: Registry[SearchEngine] = Registry("search_backends", "search backend")
for _engine in (
    SearchEngine(
        "serpapi",
        lambda corpus: SerpAPIBackend(serpapi_key()),
        # the endpoint is left out: SerpAPI's results do not depend on a proxy in between
        lambda corpus: {"backend": "serpapi", "engine": "google"},
        _serpapi_unavailable,
    ),
    SearchEngine(
        "bm25",
        lambda corpus: open_corpus(corpus.resolve()),
        lambda corpus: open_corpus(corpus.resolve()).identity(),
        _bm25_unavailable,
    ),
    SearchEngine(
        "wikipedia",
        lambda corpus: WikipediaBackend(),
        # the endpoint is the wiki searched: part of the identity
        lambda corpus: {"backend": "wikipedia", "engine": "mediawiki", "url": wikipedia_url()},
    ),
):
    SEARCH_BACKENDS.register(_engine.name, _engine)
