"""DeepSearchQA's LLM judge on any OpenAI-compatible endpoint, on the level-2 judge plumbing
(:mod:`agent2rl.scoring.judges`: the same HTTP backend with its retries, concurrency and
metering, the same judgment cache file, the same host-side key).

The rubric follows DeepSearchQA's autorater: the judge sees the question, the ground-truth
answer as a list of expected items (one for a single answer) and the model's response, and
says for every expected item whether the response contains it (semantically: spelling,
word order and equivalent names are fine) and which items of the response match no expected
item. Precision, recall, F1 and the outcome category are then computed from those counts
(:func:`~.protocol.score_counts`), never by the judge. Its reply is one JSON object::

    {"expected": [{"item": "...", "found": true}, ...], "extraneous": ["..."]}

A reply that is not such an object is *unjudged*: scored as fully incorrect and counted
(``unjudged`` in the details). An empty response is fully incorrect without a request. The
judge answers at temperature 0; its verdicts are cached by (judge identity, question,
expected answer, response).
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from agent2rl.metering.providers.openai import OpenAIProvider
from agent2rl.scoring.judges import JudgeMeter, JudgeUnavailable, JudgmentCache, NextToken, Pair
from agent2rl.scoring.judges.cache import judge_key, pair_key
from agent2rl.scoring.judges.openai_compatible import OpenAICompatibleBackend
from agent2rl.tasks.deepsearch.protocol import SET, AnswerScore, score_counts

RUBRIC_VERSION = "1"
MAX_TOKENS = 1024
_GOLD_SPLIT = re.compile(r"\s*[;\n]\s*|\s*,\s*")

TEMPLATE = """You are grading a research assistant's answer against the ground truth.

Question: {question}

Expected answer ({kind}): the ground truth lists these items:
{items}

Response: {response}

For every expected item, decide whether the response states it (the same entity, name,
number or date; differences in spelling, word order, formatting or an equivalent name are
fine; a hedge that still commits to the item counts). Then list every item the response gives
as part of its answer that matches no expected item (extraneous items); do not list
explanations or context, only answer items.

Reply with one JSON object and nothing else:
{{"expected": [{{"item": "<expected item>", "found": true or false}}, ...],
 "extraneous": ["<item>", ...]}}"""


def expected_items(gold: str, answer_type: str) -> list[str]:
    """The ground truth as the judge sees it: one item for a single answer; a set answer
    split at commas, semicolons and newlines."""
    if answer_type != SET:
        return [gold.strip()]
    return [p for p in _GOLD_SPLIT.split(gold.strip()) if p] or [gold.strip()]


def judge_messages(question: str, gold: str, answer_type: str, response: str) -> list[dict]:
    """The judge's chat prompt for one response."""
    items = expected_items(gold, answer_type)
    kind = "a set of items: all of them" if answer_type == SET else "a single item"
    text = TEMPLATE.format(
        question=question.strip(),
        kind=kind,
        items="\n".join(f"- {i}" for i in items),
        response=response.strip(),
    )
    return [{"role": "user", "content": text}]


def parse_verdict(text: str, n_expected: int) -> AnswerScore | None:
    """The score a judge's reply gives (None when it is not the JSON object asked for, or
    judges another number of expected items)."""
    m = re.search(r"\{.*\}", text, re.S)
    if not m:
        return None
    try:
        data = json.loads(m.group(0))
        expected = data["expected"]
        extraneous = data.get("extraneous") or []
        found = [bool(e["found"]) for e in expected]
    except (ValueError, KeyError, TypeError):
        return None
    if len(found) != n_expected or not isinstance(extraneous, list):
        return None
    return score_counts(sum(found), n_expected, len(extraneous))


class ChatJudgeBackend(OpenAICompatibleBackend):
    """The L2 judge's HTTP backend asking for text instead of one token's logprobs
    (``temperature=0``, up to :data:`MAX_TOKENS`): retries, concurrency, failure handling and
    metering are the parent's. :meth:`complete` returns the replies' texts."""

    def request_body(self, messages: list[dict[str, str]], top_logprobs: int) -> dict[str, Any]:
        return {
            "model": self.model,
            "messages": messages,
            "max_tokens": MAX_TOKENS,
            "temperature": 0,
        }

    def _parse(self, resp: httpx.Response, latency: float) -> NextToken:
        try:
            data = resp.json()
            usage = data.get("usage") or {}
            text = str(data["choices"][0]["message"]["content"] or "")
        except (ValueError, KeyError, IndexError, TypeError, AttributeError):
            self.meter.record("openai", "chat/completions", self.model,
                              status=resp.status_code, latency_s=latency,
                              error="no message in the response")  # fmt: skip
            raise JudgeUnavailable(f"{self._where()} answered without a message") from None
        tokens = OpenAIProvider().normalize(usage) if isinstance(usage, dict) else None
        self.meter.record("openai", "chat/completions", self.model, status=200,
                          latency_s=latency, tokens=tokens,
                          usage=usage if isinstance(usage, dict) else None)  # fmt: skip
        return NextToken(top=[], tokens=tokens, raw={"text": text})

    def complete(self, prompts: Sequence[list[dict[str, str]]]) -> list[str]:
        """One reply text per prompt, in order (:class:`JudgeUnavailable` on failure)."""
        out: list[str] = []
        for start in range(0, len(prompts), self.batch_size):
            chunk = prompts[start : start + self.batch_size]
            out += [str(n.raw["text"]) for n in self.next_tokens(chunk, 0)]
        return out


class VerdictCache(JudgmentCache):
    """The judgment cache file, holding a DeepSearchQA verdict (the judge's reply text) in
    the column where a pairwise judgment keeps its top tokens, and the F1 as its
    preference."""

    def get_texts(self, judge: str, pairs: Sequence[Pair]) -> list[str | None]:
        keys = [pair_key(judge, p) for p in pairs]
        found: dict[str, str] = {}
        with self._lock:
            for start in range(0, len(keys), 500):
                chunk = keys[start : start + 500]
                marks = ",".join("?" * len(chunk))
                rows = self._db.execute(
                    f"SELECT key, top FROM judgments WHERE key IN ({marks})", chunk
                ).fetchall()
                found.update({k: v for k, v in rows if v is not None})
        return [found.get(k) for k in keys]

    def put_texts(self, judge: str, items: Sequence[tuple[Pair, float | None, str]]) -> None:
        now = time.time()
        rows = [(pair_key(judge, p), judge, f1, text, now) for p, f1, text in items]
        with self._lock:
            self._db.executemany("INSERT OR REPLACE INTO judgments VALUES (?, ?, ?, ?, ?)", rows)
            self._db.commit()


@dataclass(frozen=True)
class Graded:
    """One judged response: its score, or None when the judge's reply was unusable."""

    score: AnswerScore | None
    reply: str


class AnswerJudge:
    """DeepSearchQA's rubric (module docstring) on ``backend``, cached in ``cache``."""

    def __init__(self, backend: ChatJudgeBackend, cache: VerdictCache | None = None) -> None:
        self.backend = backend
        self.cache = cache
        self.meter: JudgeMeter = backend.meter

    def identity(self) -> dict[str, Any]:
        template = hashlib.sha256(TEMPLATE.encode()).hexdigest()[:12]
        return {"rubric": f"deepsearchqa-v{RUBRIC_VERSION}", "template": template,
                **self.backend.identity()}  # fmt: skip

    def totals(self) -> dict[str, Any]:
        return self.meter.totals()

    def grade(self, items: Sequence[tuple[str, str, str, str]]) -> list[Graded]:
        """Judge ``(question, gold, answer_type, response)`` tuples, in order. Raises
        :class:`JudgeUnavailable` when the judge cannot be reached."""
        key = judge_key(self.identity())
        out: list[Graded | None] = [None] * len(items)
        pairs = [Pair(q, f"{t}:{g}", r) for q, g, t, r in items]
        cached = self.cache.get_texts(key, pairs) if self.cache else [None] * len(items)
        todo = []
        for i, (_, g, t, r) in enumerate(items):
            n = len(expected_items(g, t))
            if not r.strip():
                out[i] = Graded(score_counts(0, n, 0), "")
            elif cached[i] is not None:
                out[i] = Graded(parse_verdict(str(cached[i]), n), str(cached[i]))
                self.meter.hit()
            else:
                todo.append(i)
        replies = self.backend.complete([judge_messages(*items[i]) for i in todo])
        new = []
        for i, reply in zip(todo, replies, strict=True):
            _, g, t, _ = items[i]
            score = parse_verdict(reply, len(expected_items(g, t)))
            out[i] = Graded(score, reply)
            new.append((pairs[i], score.f1 if score else None, reply))
        if self.cache and new:
            self.cache.put_texts(key, new)
        return [g for g in out if g is not None]

    def close(self) -> None:
        self.backend.close()
        if self.cache:
            self.cache.close()


def answer_judge(
    model: str,
    base_url: str,
    *,
    cache_path: Path | None = None,
    usage_path: Path | None = None,
    api_key: str | None = None,
    **backend_options: Any,
) -> AnswerJudge:
    """DeepSearchQA's judge: ``model`` at ``base_url``, cached in ``cache_path`` (None: no
    cache), each request metered into ``usage_path`` (None: totals only)."""
    meter = JudgeMeter(usage_path)
    backend = ChatJudgeBackend(model, base_url, api_key, meter, **backend_options)
    cache = VerdictCache(cache_path) if cache_path is not None else None
    return AnswerJudge(backend, cache)
