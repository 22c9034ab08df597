"""One client for every OpenAI-compatible Chat Completions call the harness makes itself: the
AlpacaEval judges (:mod:`agent2rl.scoring.judges.openai_compatible`,
:mod:`~agent2rl.scoring.judges.ranking`), DeepSearchQA's judge
(:mod:`agent2rl.tasks.deepsearch.judge`) and the dashboard's run summaries
(:mod:`agent2rl.analysis.dashboard.summary`). (The agent's own LLM calls go through the
metering proxy, :mod:`agent2rl.metering`, never through this.)

Retries: a connection error, a timeout, a dropped connection, 408/409/425/429 or any 5xx is
retried up to ``max_attempts`` times in all, waiting ``backoff_s`` doubled after each failure
(at most :data:`MAX_BACKOFF_S`); any other status (401, 404: a wrong key or model) fails at
once. A request that fails for good raises the client's ``unavailable`` error naming the
endpoint and the last cause. In :meth:`LLMClient.chat_many` the first such failure cancels
the requests still queued and cuts the waits of those retrying, so an outage fails a batch in
about one request's retry time. :meth:`LLMClient.close` cuts every wait too.

A response that arrives (200) but lacks what the caller needs (no logprobs, no message) is
not retried: the caller's ``parse`` raises :class:`UnusableResponse`, the request's usage line
says so, and the client raises ``unavailable``.

Metering: every request sent, failed ones included, is one
:class:`~agent2rl.metering.usage.UsageRecord` line on the client's :class:`LLMMeter` (written
to its file when it has one) with the provider's usage, normalised tokens and the model's list
price (:mod:`agent2rl.metering.pricing`; None for a model without one). A response answered
from the cache sends nothing and writes no line: it is counted as a ``cache_hit``.

Cache: with a :class:`ResponseCache`, a request whose endpoint and JSON body are byte-for-byte
those of an earlier successful one (the body canonicalised: keys sorted) is answered from the
cache, so a caller that asks again (a re-graded submission, a dashboard rebuilt over the same
runs) pays nothing twice. Only responses that ``parse`` accepted are stored. The key is never
part of the cache key, so an endpoint reached with another key shares its cache.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import httpx

from agent2rl.files import json_object
from agent2rl.metering.pricing import estimate_cost
from agent2rl.metering.providers.openai import OpenAIProvider
from agent2rl.metering.usage import TokenCounts, UsageRecord, append_record
from agent2rl.sqlite_store import SQLiteStore

DEFAULT_BASE_URL = "https://api.openai.com/v1"
#: statuses below 500 worth another try: timeouts, conflicts, too early, rate limits
TRANSIENT_STATUSES = frozenset({408, 409, 425, 429})
#: the longest wait between two attempts
MAX_BACKOFF_S = 30.0
#: the settings :meth:`LLMClient.options_from_env` reads (``{prefix}_{NAME}``) and their defaults
DEFAULT_OPTIONS: dict[str, float] = {
    "max_attempts": 5,
    "backoff_s": 1.0,
    "timeout_s": 60.0,
    "concurrency": 8,
}

T = TypeVar("T")


class LLMUnavailable(RuntimeError):
    """The endpoint could not answer: unreachable after its retries, a refused request
    (401, 404...), or an answer without what the caller needs. One line naming the endpoint
    and the cause."""


class UnusableResponse(ValueError):
    """Raised by a ``parse`` function: the response (200) lacks what the caller needs.
    ``message`` completes "<model> at <url> ..." in the error raised to the caller; ``note``
    is the short reason written on the request's usage line."""

    def __init__(self, message: str, note: str) -> None:
        super().__init__(message)
        self.message = message
        self.note = note


# -- metering -------------------------------------------------------------------------------
@dataclass
class LLMMeter:
    """Records LLM requests (thread-safe). ``path`` None keeps the totals only; its
    directory is made on the first line.

    The lines are the metering proxy's format (:class:`~agent2rl.metering.usage.UsageRecord`);
    a judge's go to its evaluation's grading directory, never to the agent's usage file: the
    judge is the grader's cost, not the agent's.
    """

    path: Path | None = None
    requests: int = 0
    errors: int = 0
    cache_hits: int = 0
    tokens: TokenCounts = TokenCounts()
    cost_usd: float = 0.0
    unpriced_requests: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def record(
        self,
        api: str,
        endpoint: str,
        model: str,
        *,
        status: int,
        latency_s: float,
        tokens: TokenCounts | None = None,
        usage: dict[str, Any] | None = None,
        error: str | None = None,
    ) -> UsageRecord:
        """Count one request and append its line. ``tokens`` None: the response carried no
        usage (a failed request); the cost is the list price of ``model`` (None when it is
        not in :data:`~agent2rl.metering.pricing.PRICES`, e.g. a local model)."""
        rec = UsageRecord(api=api, endpoint=endpoint, model=model, status=status, error=error)
        rec.latency_s = round(latency_s, 4)
        if tokens is not None:
            rec.set_usage(usage or {}, tokens, estimate_cost(model, tokens))
        with self._lock:
            self.requests += 1
            self.errors += bool(error) or status >= 400
            if tokens is not None:
                self.tokens += tokens
                self.cost_usd += rec.cost_usd or 0.0
                self.unpriced_requests += rec.cost_usd is None and tokens.total > 0
            if self.path is not None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                append_record(self.path, rec)
        return rec

    def hit(self, n: int = 1) -> None:
        with self._lock:
            self.cache_hits += n

    def totals(self) -> dict[str, Any]:
        """``requests`` (sent, failed ones included), ``errors``, ``cache_hits``, the token
        fields, ``total_tokens``, ``cost_usd`` (a lower bound when ``unpriced_requests`` is
        non-zero) and the usage file's name."""
        with self._lock:
            return {
                "requests": self.requests,
                "errors": self.errors,
                "cache_hits": self.cache_hits,
                **self.tokens.as_fields(),
                "total_tokens": self.tokens.total,
                "cost_usd": round(self.cost_usd, 6),
                "unpriced_requests": self.unpriced_requests,
                "usage_file": self.path.name if self.path is not None else None,
            }


# -- the response cache ------------------------------------------------------------------------
_CACHE_SCHEMA = """
CREATE TABLE IF NOT EXISTS llm_responses (
    key TEXT PRIMARY KEY,
    model TEXT,
    response TEXT NOT NULL,
    created REAL NOT NULL
)
"""


def request_key(base_url: str, body: dict[str, Any]) -> str:
    """The cache key of a request: a SHA-256 over the endpoint and the canonical JSON of its
    body (keys sorted, no whitespace), so equal bodies share a key whatever their key order.
    Raises ``TypeError`` for a body that is not JSON."""
    blob = json.dumps(
        [base_url.rstrip("/"), body], sort_keys=True, separators=(",", ":"), ensure_ascii=False
    )
    return hashlib.sha256(blob.encode("utf-8", "surrogatepass")).hexdigest()


class ResponseCache:
    """Responses by request (:func:`request_key`), in SQLite: WAL and a busy timeout let
    processes (a study's evaluations) share the file; within a process one connection behind
    one lock (:class:`~agent2rl.sqlite_store.SQLiteStore`). The file is opened on first use,
    so a client built only for its identity touches none. A cache file may live beside other
    tables (the judges' ``judgments``): this one is ``llm_responses``."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._store = SQLiteStore(self.path, schema=_CACHE_SCHEMA, timeout=60.0, lazy=True)

    def get(self, key: str) -> dict[str, Any] | None:
        """The stored response of ``key``, None when there is none (or it is unreadable)."""
        row = self._store.fetchone("SELECT response FROM llm_responses WHERE key = ?", (key,))
        return None if row is None else json_object(row[0])

    def put(self, key: str, model: str, response: dict[str, Any]) -> None:
        self._store.write(
            "INSERT OR REPLACE INTO llm_responses VALUES (?, ?, ?, ?)",
            (key, model, json.dumps(response, ensure_ascii=False), time.time()),
        )

    def close(self) -> None:
        """Close the file; a later use opens it again."""
        self._store.close()


# -- the client ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Completion:
    """One chat completion: the response's JSON (``data``), the tokens it used (None when it
    carried no usage), the request's latency (0 from the cache) and whether it came from the
    cache."""

    data: dict[str, Any]
    tokens: TokenCounts | None = None
    latency_s: float = 0.0
    cached: bool = False

    def message(self) -> dict[str, Any]:
        """``choices[0].message``; :class:`UnusableResponse` when the response has none."""
        try:
            message = self.data["choices"][0]["message"]
        except (KeyError, IndexError, TypeError):
            message = None
        if not isinstance(message, dict):
            raise UnusableResponse("answered without a message", "no message in the response")
        return message

    def text(self) -> str:
        """The first choice's message text ("" when its content is null: a tool call);
        :class:`UnusableResponse` when there is no message."""
        return str(self.message().get("content") or "")


def completion(c: Completion) -> Completion:
    """The identity ``parse``: any JSON object answered with 200 is accepted."""
    return c


def _env_number(name: str, default: float) -> float:
    try:
        return float(os.environ.get(name) or default)
    except ValueError:
        return default


def _error_message(resp: httpx.Response) -> str:
    """The provider's error message (OpenAI's ``error.message``), else the body's start."""
    err = (json_object(resp.content) or {}).get("error")
    message = err.get("message") if isinstance(err, dict) else err
    text = str(message or resp.text or resp.reason_phrase)
    return " ".join(text.split())[:200]


class LLMClient:
    """Chat completions from ``{base_url}/chat/completions`` as ``model`` (see the module
    docstring for retries, metering and the cache).

    ``api_key`` goes as ``Authorization: Bearer`` ("": no header, for a local server without
    auth). ``label`` names the caller in errors ("judge gpt-4 at https://..."). ``unavailable``
    is the error class raised when the endpoint cannot answer (a caller's own subclass of
    :class:`LLMUnavailable`, e.g. the judges' ``JudgeUnavailable``). The HTTP connection pool
    (``concurrency`` connections) opens on the first request.
    """

    def __init__(
        self,
        model: str,
        base_url: str = DEFAULT_BASE_URL,
        api_key: str = "",
        *,
        meter: LLMMeter | None = None,
        cache: ResponseCache | None = None,
        max_attempts: int = 5,
        backoff_s: float = 1.0,
        timeout_s: float = 60.0,
        concurrency: int = 8,
        label: str = "LLM",
        unavailable: type[LLMUnavailable] = LLMUnavailable,
    ) -> None:
        self.model = model
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self.meter = meter if meter is not None else LLMMeter()
        self.cache = cache
        self.max_attempts = max(1, int(max_attempts))
        self.backoff_s = max(0.0, float(backoff_s))
        self.timeout_s = float(timeout_s)
        self.concurrency = max(1, int(concurrency))
        self.label = label
        self.unavailable = unavailable
        self._http: httpx.Client | None = None
        self._lock = threading.Lock()
        self._closed = threading.Event()

    @staticmethod
    def options_from_env(prefix: str, **given: float | None) -> dict[str, float]:
        """The retry settings: each of :data:`DEFAULT_OPTIONS` from ``given`` when not None
        (0 counts as unset for all but ``backoff_s``), else ``{prefix}_{NAME}`` in the
        environment (``AGENT2RL_JUDGE_MAX_ATTEMPTS``...), else the default. A value that is
        not a number reads as the default. They change how long a call takes, never what it
        returns. ``TypeError`` names any other setting given."""
        unknown = ", ".join(sorted(given.keys() - DEFAULT_OPTIONS.keys()))
        if unknown:
            raise TypeError(
                f"unknown LLM client option {unknown}: one of {', '.join(DEFAULT_OPTIONS)}"
            )
        out: dict[str, float] = {}
        for name, default in DEFAULT_OPTIONS.items():
            value = given.get(name)
            unset = value is None if name == "backoff_s" else not value
            out[name] = _env_number(f"{prefix}_{name.upper()}", default) if unset else value  # type: ignore[assignment]
        return out

    @property
    def _client(self) -> httpx.Client:
        with self._lock:
            if self._http is None:
                headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
                self._http = httpx.Client(
                    timeout=self.timeout_s,
                    headers=headers,
                    limits=httpx.Limits(max_connections=self.concurrency),
                )
            return self._http

    def where(self) -> str:
        """``"<label> <model> at <base_url>"``: how errors name this endpoint."""
        return f"{self.label} {self.model} at {self.base_url}"

    def chat(
        self,
        body: dict[str, Any],
        parse: Callable[[Completion], T] = completion,  # type: ignore[assignment]
        stop: threading.Event | None = None,
    ) -> T:
        """One chat completion for the JSON ``body`` (``model`` and ``messages`` included),
        read by ``parse``: from the cache when it holds this request, else requested (with
        retries). Raises ``self.unavailable`` when no usable answer comes; ``stop`` (or
        :meth:`close`) set during a wait between attempts gives up at once."""
        key = request_key(self.base_url, body) if self.cache is not None else ""
        if self.cache is not None:
            data = self.cache.get(key)
            if data is not None:
                try:
                    value = parse(Completion(data, _tokens(data), 0.0, cached=True))
                except UnusableResponse:
                    pass  # stored by an older reader that accepted it: ask again
                else:
                    self.meter.hit()
                    return value
        answer = self._request(body, stop)
        try:
            value = parse(answer)
        except UnusableResponse as err:
            self._meter(200, answer.latency_s, error=err.note)
            raise self.unavailable(f"{self.where()} {err.message}") from None
        # answer.tokens is None unless ``usage`` is an object, and then the usage is not read
        self._meter(200, answer.latency_s, tokens=answer.tokens, usage=answer.data.get("usage"))
        if self.cache is not None:
            self.cache.put(key, self.model, answer.data)
        return value

    def chat_many(
        self,
        bodies: Sequence[dict[str, Any]],
        parse: Callable[[Completion], T] = completion,  # type: ignore[assignment]
    ) -> list[T]:
        """:meth:`chat` for each body, up to ``concurrency`` at once; the results in order.
        The first request that fails for good cancels the queued ones and cuts the others'
        retries, and its error is raised."""
        if len(bodies) <= 1 or self.concurrency == 1:
            return [self.chat(b, parse) for b in bodies]
        stop = threading.Event()
        with ThreadPoolExecutor(self.concurrency, thread_name_prefix="llm") as pool:
            futures = [pool.submit(self.chat, b, parse, stop) for b in bodies]
            wait(futures, return_when=FIRST_EXCEPTION)
            failed = next((f for f in futures if f.done() and f.exception()), None)
            if failed is not None:
                stop.set()
                for f in futures:
                    f.cancel()
                raise failed.exception()  # type: ignore[misc]
            return [f.result() for f in futures]

    def _request(self, body: dict[str, Any], stop: threading.Event | None) -> Completion:
        """The first 200 response, after retries (module docstring); its body as a JSON
        object (``{}`` when it is not one)."""
        url = f"{self.base_url}/chat/completions"
        last = ""
        for attempt in range(self.max_attempts):
            if attempt:
                delay = min(self.backoff_s * 2 ** (attempt - 1), MAX_BACKOFF_S)
                if (stop or self._closed).wait(delay) or self._closed.is_set():
                    break
            started = time.monotonic()
            try:
                resp = self._client.post(url, json=body)
            except httpx.HTTPError as err:  # connection refused or dropped, timeout
                last = f"{type(err).__name__}: {str(err) or 'no response'}"
                self._meter(0, time.monotonic() - started, error=last)
                continue
            latency = time.monotonic() - started
            if resp.status_code != 200:
                last = f"HTTP {resp.status_code}: {_error_message(resp)}"
                self._meter(resp.status_code, latency, error=last)
                if resp.status_code in TRANSIENT_STATUSES or resp.status_code >= 500:
                    continue
                raise self.unavailable(f"{self.where()} refused the request ({last})")
            # A body that is not a JSON object reads as an empty one: the caller's parse
            # says what it lacked.
            data = json_object(resp.content) or {}
            return Completion(data, _tokens(data), latency)
        raise self.unavailable(
            f"{self.where()} unreachable after {self.max_attempts} attempts ({last})"
        )

    def _meter(self, status: int, latency_s: float, **fields: Any) -> None:
        """One request's line (``fields``: :meth:`LLMMeter.record`'s tokens, usage, error)."""
        self.meter.record(
            "openai", "chat/completions", self.model, status=status, latency_s=latency_s, **fields
        )

    def close(self) -> None:
        """Cut every wait between attempts and close the connections and the cache; a later
        request opens new connections but gives up at its first failure."""
        self._closed.set()
        with self._lock:
            if self._http is not None:
                self._http.close()
                self._http = None
        if self.cache is not None:
            self.cache.close()


def _tokens(data: dict[str, Any]) -> TokenCounts | None:
    usage = data.get("usage")
    return OpenAIProvider().normalize(usage) if isinstance(usage, dict) else None
