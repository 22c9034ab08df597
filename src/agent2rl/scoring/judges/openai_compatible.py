"""A judge behind any OpenAI-compatible Chat Completions endpoint (OpenAI, a vLLM server, a
gateway): the HTTP :class:`~agent2rl.scoring.judges.base.LogprobJudgeBackend`, and
:func:`openai_judge` to build the whole judge.

The key comes from the grader's environment — ``AGENT2RL_JUDGE_API_KEY``, else
``OPENAI_API_KEY`` — which the agent never gets (its environment is built explicitly; see
:func:`agent2rl.workspace.builder.agent_env`). A server without auth (a local vLLM) needs no
key.

Failures: a connection error, a timeout, a dropped connection, 429 or any 5xx is retried up
to ``max_attempts`` times with exponential backoff (``backoff_s``, doubled each time, capped
at 30 s); any other status (401, 404: a wrong key or model) fails at once. A request that
fails for good raises :class:`~agent2rl.scoring.judges.base.JudgeUnavailable`, one line, and
the requests of its batch still queued are cancelled, so an outage fails an evaluation in
about one request's retry time rather than 805 of them. The retry settings are the host's
(``AGENT2RL_JUDGE_MAX_ATTEMPTS``, ``AGENT2RL_JUDGE_BACKOFF_S``, ``AGENT2RL_JUDGE_TIMEOUT_S``,
``AGENT2RL_JUDGE_CONCURRENCY``): they change how long grading takes, never a preference.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

import httpx

from agent2rl.metering.providers.openai import OpenAIProvider
from agent2rl.scoring.judges import protocol
from agent2rl.scoring.judges.base import JudgeUnavailable, Messages, NextToken
from agent2rl.scoring.judges.cache import JudgmentCache
from agent2rl.scoring.judges.logprob import LogprobJudge
from agent2rl.scoring.judges.meter import JudgeMeter

KEY_ENVS = ("AGENT2RL_JUDGE_API_KEY", "OPENAI_API_KEY")
DEFAULT_BASE_URL = "https://api.openai.com/v1"
#: statuses worth another try: rate limits and server-side failures
_TRANSIENT = {408, 409, 425, 429}
_MAX_BACKOFF_S = 30.0


def judge_api_key() -> str:
    """The judge's key from the host environment (first of :data:`KEY_ENVS` set), or ``""``."""
    return next((os.environ[k] for k in KEY_ENVS if os.environ.get(k)), "")


def _env_number(name: str, default: float) -> float:
    try:
        return float(os.environ.get(name) or default)
    except ValueError:
        return default


class OpenAICompatibleBackend:
    """Next-token logprobs from ``{base_url}/chat/completions``.

    Each prompt is one request with AlpacaEval's settings (``max_tokens=1``,
    ``temperature=1``, ``top_p=1``, ``logprobs=true``, ``top_logprobs``); up to
    ``concurrency`` are in flight at once. Every request, failed ones included, is one line
    on ``meter``.
    """

    def __init__(
        self,
        model: str,
        base_url: str = DEFAULT_BASE_URL,
        api_key: str | None = None,
        meter: JudgeMeter | None = None,
        *,
        max_attempts: int | None = None,
        backoff_s: float | None = None,
        timeout_s: float | None = None,
        concurrency: int | None = None,
    ) -> None:
        self.model = model
        self.base_url = base_url.rstrip("/")
        self.api_key = judge_api_key() if api_key is None else api_key
        self.meter = meter or JudgeMeter()
        attempts = max_attempts or _env_number("AGENT2RL_JUDGE_MAX_ATTEMPTS", 5)
        self.max_attempts = max(1, int(attempts))
        if backoff_s is None:
            backoff_s = _env_number("AGENT2RL_JUDGE_BACKOFF_S", 1.0)
        self.backoff_s = backoff_s
        timeout = timeout_s or _env_number("AGENT2RL_JUDGE_TIMEOUT_S", 60.0)
        workers = concurrency or _env_number("AGENT2RL_JUDGE_CONCURRENCY", 8)
        self.concurrency = max(1, int(workers))
        #: prompts per :meth:`next_tokens` call: a few rounds of the concurrency, so a batch
        #: keeps every connection busy and an outage loses at most one batch of work
        self.batch_size = 4 * self.concurrency
        self.timeout_s = timeout
        # Opened on the first request: a backend built only for its identity (the evaluation
        # hash) holds no connection.
        self._http: httpx.Client | None = None
        self._lock = threading.Lock()
        self._closed = threading.Event()

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

    def identity(self) -> dict[str, Any]:
        return {"kind": "openai-compatible", "model": self.model, "base_url": self.base_url}

    def _where(self) -> str:
        return f"judge {self.model} at {self.base_url}"

    def request_body(self, messages: Messages, top_logprobs: int) -> dict[str, Any]:
        """The exact JSON body of one judgment request."""
        return {
            "model": self.model,
            "messages": messages,
            "max_tokens": protocol.MAX_TOKENS,
            "temperature": protocol.TEMPERATURE,
            "top_p": protocol.TOP_P,
            "logprobs": True,
            "top_logprobs": top_logprobs,
        }

    def next_tokens(self, prompts: Sequence[Messages], top_logprobs: int) -> list[NextToken]:
        if len(prompts) <= 1 or self.concurrency == 1:
            return [self._one(p, top_logprobs) for p in prompts]
        stop = threading.Event()
        with ThreadPoolExecutor(self.concurrency, thread_name_prefix="judge") as pool:
            futures = [pool.submit(self._one, p, top_logprobs, stop) for p in prompts]
            done, _ = wait(futures, return_when=FIRST_EXCEPTION)
            failed = next((f for f in futures if f.done() and f.exception()), None)
            if failed is not None:
                # The judge is down: stop the queued requests and the retries in flight.
                stop.set()
                for f in futures:
                    f.cancel()
                raise failed.exception()  # type: ignore[misc]
            return [f.result() for f in futures]

    def _one(
        self, messages: Messages, top_logprobs: int, stop: threading.Event | None = None
    ) -> NextToken:
        body = self.request_body(messages, top_logprobs)
        url = f"{self.base_url}/chat/completions"
        last = ""
        for attempt in range(self.max_attempts):
            if attempt:
                delay = min(self.backoff_s * 2 ** (attempt - 1), _MAX_BACKOFF_S)
                if (stop and stop.wait(delay)) or (not stop and self._closed.wait(delay)):
                    break
            started = time.monotonic()
            try:
                resp = self._client.post(url, json=body)
            except httpx.HTTPError as err:  # connection refused or dropped, timeout
                last = f"{type(err).__name__}: {str(err) or 'no response'}"
                self.meter.record(
                    "openai",
                    "chat/completions",
                    self.model,
                    status=0,
                    latency_s=time.monotonic() - started,
                    error=last,
                )
                continue
            latency = time.monotonic() - started
            if resp.status_code != 200:
                last = f"HTTP {resp.status_code}: {_error_message(resp)}"
                self.meter.record(
                    "openai",
                    "chat/completions",
                    self.model,
                    status=resp.status_code,
                    latency_s=latency,
                    error=last,
                )
                if resp.status_code in _TRANSIENT or resp.status_code >= 500:
                    continue
                raise JudgeUnavailable(f"{self._where()} refused the request ({last})")
            return self._parse(resp, latency)
        raise JudgeUnavailable(
            f"{self._where()} unreachable after {self.max_attempts} attempts ({last})"
        )

    def _parse(self, resp: httpx.Response, latency: float) -> NextToken:
        try:
            data = resp.json()
            usage = data.get("usage") or {}
            logprobs = data["choices"][0].get("logprobs") or {}
            first = (logprobs.get("content") or [None])[0]
            top = [(str(t["token"]), float(t["logprob"])) for t in first["top_logprobs"]]
        except (ValueError, KeyError, IndexError, TypeError, AttributeError):
            self.meter.record(
                "openai",
                "chat/completions",
                self.model,
                status=resp.status_code,
                latency_s=latency,
                error="no logprobs in the response",
            )
            raise JudgeUnavailable(
                f"{self._where()} answered without top logprobs: the judge needs a server "
                "that supports logprobs and top_logprobs on chat completions"
            ) from None
        tokens = OpenAIProvider().normalize(usage) if isinstance(usage, dict) else None
        self.meter.record(
            "openai",
            "chat/completions",
            self.model,
            status=200,
            latency_s=latency,
            tokens=tokens,
            usage=usage if isinstance(usage, dict) else None,
        )
        return NextToken(top=top, tokens=tokens)

    def close(self) -> None:
        self._closed.set()
        with self._lock:
            if self._http is not None:
                self._http.close()
                self._http = None


def _error_message(resp: httpx.Response) -> str:
    """The provider's error message (OpenAI's ``error.message``), else the body's start."""
    try:
        err = resp.json().get("error")
        message = err.get("message") if isinstance(err, dict) else err
    except (ValueError, AttributeError):
        message = None
    text = str(message or resp.text or resp.reason_phrase)
    return " ".join(text.split())[:200]


def openai_judge(
    model: str = protocol.DEFAULT_MODEL,
    base_url: str = DEFAULT_BASE_URL,
    *,
    cache_path: Path | None = None,
    usage_path: Path | None = None,
    api_key: str | None = None,
    **backend_options: Any,
) -> LogprobJudge:
    """AlpacaEval 2.0's judge on an OpenAI-compatible endpoint: ``model`` at ``base_url``,
    cached in ``cache_path`` (SQLite; None: no cache), each request metered into
    ``usage_path`` (None: totals only). ``backend_options`` go to
    :class:`OpenAICompatibleBackend` (retries, timeout, concurrency)."""
    meter = JudgeMeter(usage_path)
    backend = OpenAICompatibleBackend(model, base_url, api_key, meter, **backend_options)
    cache = JudgmentCache(cache_path) if cache_path is not None else None
    return LogprobJudge(backend, cache=cache, meter=meter)
