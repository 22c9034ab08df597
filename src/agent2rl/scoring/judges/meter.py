"""What a judge costs: one usage line per request it sends, and running totals.

The lines are the metering proxy's format (:class:`~agent2rl.metering.usage.UsageRecord`),
written to the grading directory of the evaluation (``judge_usage.jsonl`` next to its
``result.json``), never to the agent's ``record/llm_usage.jsonl``: the judge is the
grader's cost, not the agent's. Judgments answered from the cache send no request and write
no line; they are counted as ``cache_hits``.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent2rl.metering.pricing import estimate_cost
from agent2rl.metering.usage import TokenCounts, UsageRecord, append_record

#: the usage file's name in a grading directory
USAGE_FILE = "judge_usage.jsonl"


@dataclass
class JudgeMeter:
    """Records judge requests (thread-safe). ``path`` None keeps the totals only."""

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
        rec = UsageRecord(api=api, endpoint=endpoint, model=model, status=status)
        rec.latency_s = round(latency_s, 4)
        rec.error = error
        cost = None
        if tokens is not None:
            cost = estimate_cost(model, tokens)
            rec.set_usage(usage or {}, tokens, cost)
        with self._lock:
            self.requests += 1
            self.errors += bool(error) or status >= 400
            if tokens is not None:
                self.tokens += tokens
                self.cost_usd += cost or 0.0
                self.unpriced_requests += cost is None and tokens.total > 0
            if self.path is not None:
                append_record(self.path, rec)
        return rec

    def hit(self, n: int = 1) -> None:
        """Count ``n`` judgments answered from the cache."""
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
