"""The run's token budget: reserved before a request is forwarded, settled when it ends.

Checking a running total before forwarding and adding the tokens once a response ends lets
concurrent requests all pass a check that none of them has paid for yet. Instead every metered
request first *reserves* an estimate of what it may cost (:class:`Estimate`: the prompt, from
its body's size, plus the output it may generate), under a lock, and is refused unless the
tokens already used plus everything reserved plus its estimate fit the budget. When the request
ends its reservation is released and what it really cost (the provider's usage, or the
estimate where the provider never said, see :mod:`agent2rl.metering`) is added to ``used``.

The budget is as hard as the estimates are high: a request that uses more than it reserved
(a prompt denser than :data:`BYTES_PER_TOKEN`, output beyond :data:`OUTPUT_RESERVE_TOKENS` when
it asked for more) can still take the total past the budget, by at most its own excess.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

#: Prompt bytes per token of the estimate. A request body is JSON (keys, quotes, tool
#: schemas), and English text or code runs at 3.5-4.5 bytes per token, so 4 over-estimates
#: the prompt of almost every request; base64 images are over-estimated many times over.
BYTES_PER_TOKEN = 4
#: The output tokens reserved for a request: what it asked for (``max_tokens`` and the like)
#: up to this cap, or the cap when it asked for nothing. Agents ask for far more than they use
#: (Claude Code: 32000), and reserving all of it would refuse most requests near the end of a
#: budget that real answers would fit.
OUTPUT_RESERVE_TOKENS = 4096


def estimate_prompt_tokens(body: bytes) -> int:
    """An upper estimate of the prompt tokens of a request ``body`` (at least 1)."""
    return max(1, -(-len(body) // BYTES_PER_TOKEN))


@dataclass(frozen=True)
class Estimate:
    """What a metered request may cost: ``prompt`` (estimated input) and ``output``
    (reserved output) tokens."""

    prompt: int
    output: int

    @property
    def total(self) -> int:
        return self.prompt + self.output


def estimate_request(body: bytes, requested_output: int | None) -> Estimate:
    """The estimate of a request with JSON ``body`` that asked for at most
    ``requested_output`` tokens (None: it did not say; a value below 1 counts as not saying,
    since the provider would refuse it anyway), capped at :data:`OUTPUT_RESERVE_TOKENS`."""
    cap = OUTPUT_RESERVE_TOKENS
    output = cap if requested_output is None or requested_output < 1 else min(requested_output, cap)
    return Estimate(estimate_prompt_tokens(body), output)


@dataclass(frozen=True)
class Refusal:
    """Why a reservation was refused. ``final``: the budget cannot fit the request however
    long the client waits (the used tokens alone leave no room); otherwise requests in flight
    hold the room and it may come back when they end."""

    message: str
    final: bool


class TokenBudget:
    """``used`` and ``reserved`` tokens against ``limit`` (None: no budget; every reservation
    succeeds, and ``used`` still counts). Thread-safe; no method blocks."""

    def __init__(self, limit: int | None, used: int = 0) -> None:
        self.limit = limit
        self.used = used
        self.reserved = 0
        self.in_flight = 0
        self._lock = threading.Lock()

    def reserve(self, estimate: Estimate) -> Refusal | None:
        """Reserve ``estimate.total`` tokens; a :class:`Refusal` (and nothing reserved) when
        ``used + reserved + estimate.total`` would exceed the limit."""
        with self._lock:
            limit, need = self.limit, estimate.total
            if limit is not None and self.used + self.reserved + need > limit:
                return self._refusal(limit, estimate)
            self.reserved += need
            self.in_flight += 1
            return None

    def _refusal(self, limit: int, estimate: Estimate) -> Refusal:
        need, used = estimate.total, self.used
        what = (
            f"this request may use up to {need} tokens (about {estimate.prompt} prompt + up to "
            f"{estimate.output} output)"
        )
        if used >= limit:
            return Refusal(
                f"token budget of {limit} exhausted ({used} tokens used in this run)", True
            )
        if used + need > limit:
            return Refusal(
                f"token budget of {limit} exhausted: {used} tokens used, {limit - used} left, "
                f"and {what}; a request asking for fewer output tokens (max_tokens) may fit",
                True,
            )
        return Refusal(
            f"token budget of {limit}: {used} tokens used and {self.reserved} reserved by "
            f"{self.in_flight} request(s) in flight, and {what}; retry once they finish",
            False,
        )

    def settle(self, estimate: Estimate | None, charged: int) -> None:
        """A request ended: release its reservation (None: it had none) and add the
        ``charged`` tokens to ``used``."""
        with self._lock:
            if estimate is not None:
                self.reserved -= estimate.total
                self.in_flight -= 1
            self.used += charged
