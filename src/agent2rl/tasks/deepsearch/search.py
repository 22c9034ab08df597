"""Search behind one interface (:class:`SearchBackend`), for the grader's episodes and the
rollout service's alike.

- :class:`BM25Backend`: a local corpus (``corpus.jsonl``: ``id``, ``title``, ``text``,
  optional ``url``) searched with ``bm25s`` (Lucene's BM25, pyserini's ``k1 = 0.9,
  b = 0.4``, English stop words, the Snowball stemmer), offline and deterministic. A hit's
  snippet is the page's sentence that shares the most query words beyond the page's title
  (the first sentence when none does), so a query that names a page and a relation
  (``amber loom society founded``) shows the sentence stating it.
- :class:`SerpAPIBackend`: Google results through SerpAPI (the reference's choice), when
  ``SERPAPI_KEY`` is set in the host's environment (``AGENT2RL_SERPAPI_URL`` overrides the
  endpoint: a proxy, a test server). The key stays on the host: the grader
  and the rollout service call SerpAPI, the agent only ever calls the service.

Every query can be recorded (:class:`QueryLog`: one JSON line per query with the backend,
the number of hits and the time taken). A backend that cannot answer raises
:class:`SearchUnavailable`: the harness's failure, never a silent empty result.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

import httpx
import numpy as np

from agent2rl.files import read_jsonl

#: BM25 parameters: pyserini's defaults (as the WebShop search uses)
BM25_K1 = 0.9
BM25_B = 0.4
SERPAPI_URL = "https://serpapi.com/search.json"
SERPAPI_KEY_ENV = "SERPAPI_KEY"
#: the host may point SerpAPI requests elsewhere (a proxy, a loopback test server)
SERPAPI_URL_ENV = "AGENT2RL_SERPAPI_URL"
_SENTENCE = re.compile(r"(?<=[.!?])\s+")
_WORD = re.compile(r"[a-z0-9]+")


class SearchUnavailable(RuntimeError):
    """The search backend could not answer (network, quota, a refused key). One line naming
    the backend and the cause."""


@dataclass(frozen=True)
class Hit:
    """One search result."""

    title: str
    snippet: str
    url: str = ""

    def to_dict(self) -> dict[str, str]:
        return asdict(self)


class SearchBackend(Protocol):
    """A search engine: ``search`` returns up to ``k`` hits, best first."""

    name: str

    def search(self, query: str, k: int) -> list[Hit]: ...

    def identity(self) -> dict[str, Any]:
        """What can change a result (the backend, its corpus or engine): part of the
        evaluation settings."""
        ...


class QueryLog:
    """Appends one JSON line per query to ``path`` (thread-safe); None records nothing."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._lock = threading.Lock()

    def record(self, backend: str, query: str, hits: int, seconds: float, error: str = "") -> None:
        if self.path is None:
            return
        row = {"t": time.time(), "backend": backend, "query": query, "hits": hits,
               "seconds": round(seconds, 4)}  # fmt: skip
        if error:
            row["error"] = error
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
    best, best_n = sentences[0], 0
    for s in sentences:
        n = len(wanted & _words(s))
        if n > best_n:
            best, best_n = s, n
    return best


class BM25Backend:
    """BM25 over ``documents`` (dicts with ``title`` and ``text``, optional ``id`` and
    ``url``); hits scoring above 0 only, ties in corpus order (deterministic)."""

    name = "bm25"

    def __init__(self, documents: list[dict[str, Any]], digest: str = "") -> None:
        import bm25s
        import Stemmer
        from bm25s.tokenization import Tokenizer

        self.documents = documents
        self.digest = digest
        self._tokenizer = Tokenizer(stopwords="en", stemmer=Stemmer.Stemmer("english").stemWord)
        corpus = self._tokenizer.tokenize(
            [f"{d['title']} {d['text']}".lower() for d in documents],
            return_as="tuple",
            show_progress=False,
        )
        self._bm25 = bm25s.BM25(k1=BM25_K1, b=BM25_B, method="lucene")
        self._bm25.index(corpus, show_progress=False)
        self._lock = threading.Lock()

    def identity(self) -> dict[str, Any]:
        return {"backend": self.name, "corpus": self.digest, "documents": len(self.documents)}

    def search(self, query: str, k: int) -> list[Hit]:
        with self._lock:  # the tokenizer's vocabulary lookups are not thread-safe
            tokens = self._tokenizer.tokenize(
                [query.lower()], update_vocab=False, return_as="string", show_progress=False
            )[0]
            tokens = [t for t in tokens if t]
            if not tokens or not self.documents:
                return []
            scores = np.asarray(self._bm25.get_scores(tokens), dtype=float)
        order = np.lexsort((np.arange(len(scores)), -scores))
        hits = []
        for i in order[:k]:
            if scores[i] <= 0:
                break
            d = self.documents[int(i)]
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


class SerpAPIBackend:
    """Google's organic results through SerpAPI (``engine=google``): a hit is a result's
    ``title``, ``snippet`` and ``link``. Transient failures (connection errors, 429, 5xx)
    are retried ``max_attempts`` times with exponential backoff; then, or on any other
    status, :class:`SearchUnavailable`."""

    name = "serpapi"

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
        self.api_key = api_key
        self.url = url or os.environ.get(SERPAPI_URL_ENV) or SERPAPI_URL
        self.max_attempts = max(1, max_attempts)
        self.backoff_s = backoff_s
        self._http = httpx.Client(timeout=timeout_s)

    def identity(self) -> dict[str, Any]:
        return {"backend": self.name, "engine": "google", "url": self.url}

    def search(self, query: str, k: int) -> list[Hit]:
        params = {"engine": "google", "q": query, "num": k, "api_key": self.api_key}
        last = ""
        for attempt in range(self.max_attempts):
            if attempt:
                time.sleep(min(self.backoff_s * 2 ** (attempt - 1), 30.0))
            try:
                resp = self._http.get(self.url, params=params)
            except httpx.HTTPError as err:
                last = f"{type(err).__name__}: {err}"
                continue
            if resp.status_code == 200:
                return self._parse(resp, k)
            last = f"HTTP {resp.status_code}"
            if resp.status_code != 429 and resp.status_code < 500:
                break
        raise SearchUnavailable(f"SerpAPI at {self.url} failed ({last})")

    def _parse(self, resp: httpx.Response, k: int) -> list[Hit]:
        try:
            data = resp.json()
        except ValueError:
            raise SearchUnavailable(f"SerpAPI at {self.url} answered without JSON") from None
        if data.get("error") and not data.get("organic_results"):
            if "hasn't returned any results" in str(data["error"]):
                return []
            raise SearchUnavailable(f"SerpAPI at {self.url}: {data['error']}")
        hits = []
        for row in (data.get("organic_results") or [])[:k]:
            hits.append(
                Hit(
                    str(row.get("title") or ""),
                    " ".join(str(row.get("snippet") or "").split()),
                    str(row.get("link") or ""),
                )
            )
        return hits

    def close(self) -> None:
        self._http.close()


def serpapi_key() -> str:
    """The SerpAPI key from the host environment, or ``""``."""
    return os.environ.get(SERPAPI_KEY_ENV, "")
