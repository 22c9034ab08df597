"""A judge behind any OpenAI-compatible Chat Completions endpoint (OpenAI, a vLLM server, a
gateway): the HTTP :class:`~agent2rl.scoring.judges.base.LogprobJudgeBackend`, and
:func:`openai_judge` to build the whole judge.

The key comes from the grader's environment — ``AGENT2RL_JUDGE_API_KEY``, else
``OPENAI_API_KEY`` — which the agent never gets (its environment is built explicitly; see
:func:`agent2rl.workspace.builder.agent_env`). A server without auth (a local vLLM) needs no
key.

Requests go through the harness's one LLM client (:mod:`agent2rl.scoring.llm_client`: its
retries, and the cancelling of a batch's queued requests once one fails for good, so an
outage fails an evaluation in about one request's retry time rather than 805 of them); a
request that fails for good raises :class:`~agent2rl.scoring.judges.base.JudgeUnavailable`.
The retry settings are the host's (``AGENT2RL_JUDGE_MAX_ATTEMPTS``, ``..._BACKOFF_S``,
``..._TIMEOUT_S``, ``..._CONCURRENCY``): they change how long grading takes, never a
preference. The client's response cache stays off: a judge caches whole judgments
(:class:`~agent2rl.scoring.judges.cache.JudgmentCache`), local judges' included.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agent2rl.scoring.judges import protocol
from agent2rl.scoring.judges.base import JudgeUnavailable, Messages, NextToken
from agent2rl.scoring.judges.cache import JudgmentCache
from agent2rl.scoring.judges.logprob import LogprobJudge
from agent2rl.scoring.llm_client import (
    DEFAULT_BASE_URL,
    Completion,
    LLMClient,
    LLMMeter,
    ResponseCache,
    UnusableResponse,
)

KEY_ENVS = ("AGENT2RL_JUDGE_API_KEY", "OPENAI_API_KEY")
#: the prefix of the host's retry settings (:meth:`LLMClient.options_from_env`)
OPTIONS_ENV_PREFIX = "AGENT2RL_JUDGE"


def judge_api_key() -> str:
    """The judge's key from the host environment (first of :data:`KEY_ENVS` set), or ``""``."""
    return next((os.environ[k] for k in KEY_ENVS if os.environ.get(k)), "")


def judge_client(
    model: str,
    base_url: str = DEFAULT_BASE_URL,
    api_key: str | None = None,
    meter: LLMMeter | None = None,
    *,
    max_attempts: int | None = None,
    backoff_s: float | None = None,
    timeout_s: float | None = None,
    concurrency: int | None = None,
    cache_path: Path | None = None,
) -> LLMClient:
    """The :class:`LLMClient` of a judge: the host's key (``api_key`` None:
    :func:`judge_api_key`), the host's retry settings where not given
    (``AGENT2RL_JUDGE_*``), errors raised as :class:`JudgeUnavailable` and named "judge
    <model> at <url>"; ``cache_path`` (None: none) holds its response cache."""
    options = LLMClient.options_from_env(
        OPTIONS_ENV_PREFIX,
        max_attempts=max_attempts,
        backoff_s=backoff_s,
        timeout_s=timeout_s,
        concurrency=concurrency,
    )
    return LLMClient(
        model,
        base_url,
        judge_api_key() if api_key is None else api_key,
        meter=meter,
        cache=ResponseCache(cache_path) if cache_path is not None else None,
        label="judge",
        unavailable=JudgeUnavailable,
        **options,  # type: ignore[arg-type]  # LLMClient rounds the counts down itself
    )


class OpenAICompatibleBackend:
    """Next-token logprobs from ``{base_url}/chat/completions``.

    Each prompt is one request with AlpacaEval's settings (:meth:`request_body`); up to
    ``concurrency`` are in flight at once. Every request, failed ones included, is one line
    on ``meter``. ``backend_options`` (``max_attempts``, ``backoff_s``, ``timeout_s``,
    ``concurrency``) go to :func:`judge_client`. A subclass asks for something else by
    overriding :meth:`request_body` and :meth:`read`.
    """

    def __init__(
        self,
        model: str,
        base_url: str = DEFAULT_BASE_URL,
        api_key: str | None = None,
        meter: LLMMeter | None = None,
        **backend_options: Any,
    ) -> None:
        self.client = judge_client(model, base_url, api_key, meter, **backend_options)
        self.model, self.base_url, self.meter = model, self.client.base_url, self.client.meter
        #: prompts per :meth:`next_tokens` call: a few rounds of the concurrency, so a batch
        #: keeps every connection busy and an outage loses at most one batch of work
        self.batch_size = 4 * self.client.concurrency

    def identity(self) -> dict[str, Any]:
        return {"kind": "openai-compatible", "model": self.model, "base_url": self.base_url}

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

    def read(self, answer: Completion) -> NextToken:
        """What the judge reads from one answer, the first token's top candidates;
        :class:`UnusableResponse` when it has none."""
        try:
            logprobs = answer.data["choices"][0].get("logprobs") or {}
            first = (logprobs.get("content") or [None])[0]
            top = [(str(t["token"]), float(t["logprob"])) for t in first["top_logprobs"]]
        except (ValueError, KeyError, IndexError, TypeError, AttributeError):
            raise UnusableResponse(
                "answered without top logprobs: the judge needs a server that supports "
                "logprobs and top_logprobs on chat completions",
                "no logprobs in the response",
            ) from None
        return NextToken(top=top, tokens=answer.tokens)

    def next_tokens(self, prompts: Sequence[Messages], top_logprobs: int) -> list[NextToken]:
        bodies = [self.request_body(p, top_logprobs) for p in prompts]
        return self.client.chat_many(bodies, self.read)

    def close(self) -> None:
        self.client.close()


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
    meter = LLMMeter(usage_path)
    backend = OpenAICompatibleBackend(model, base_url, api_key, meter, **backend_options)
    cache = JudgmentCache(cache_path) if cache_path is not None else None
    return LogprobJudge(backend, cache=cache, meter=meter)
