"""Token counts and the usage file: one JSON line per request the metering proxy relayed.

A run's usage file is ``record/llm_usage.jsonl`` (:attr:`agent2rl.rundir.RunPaths.llm_usage`).
The proxy appends one :class:`UsageRecord` per request with :func:`append_record`; reports
read it back with :func:`read_usage` and :func:`summarize_usage`. A line's keys are the
record's fields, in order; reports and tests read them, so they are the file format.

:class:`TokenCounts` is the one token-count type of the harness: the proxy's normalised
provider usage, a usage line's token fields and what an agent's own log reports.
"""

from __future__ import annotations

import dataclasses
import operator
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent2rl.files import append_jsonl_line, read_jsonl_tolerant

#: A usage line's token fields, in :class:`TokenCounts` order (input, output, cached, write).
TOKEN_FIELDS = ("input_tokens", "output_tokens", "cached_tokens", "cache_write_tokens")


def token_count(value: Any) -> int:
    """A token count read from untrusted JSON (a provider's usage, an agent's log): a number
    (a float is truncated) floored at 0. A bool, a string, None or anything else counts 0,
    so a malformed field can neither raise nor make a total negative."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return max(int(value), 0)
    return 0


@dataclass(frozen=True)
class TokenCounts:
    """Normalised token counts (see :mod:`agent2rl.metering` for each provider's mapping).

    ``input`` is every prompt token the provider processed, cached ones included; ``cached``
    (cache reads) and ``cache_write`` (cache creation) are subsets of it; ``output`` counts
    completion tokens, reasoning included.
    """

    input: int = 0
    output: int = 0
    cached: int = 0
    cache_write: int = 0

    @property
    def total(self) -> int:
        """Input + output: what a token budget counts."""
        return self.input + self.output

    def __add__(self, other: TokenCounts) -> TokenCounts:
        return TokenCounts(
            *map(operator.add, dataclasses.astuple(self), dataclasses.astuple(other))
        )

    @classmethod
    def of_line(cls, line: Mapping[str, Any]) -> TokenCounts:
        """The counts of one usage-file line; a field that is missing or null (a refused or
        failed request) counts 0."""
        return cls(*(token_count(line.get(k)) for k in TOKEN_FIELDS))

    def as_fields(self) -> dict[str, int]:
        """The counts under the usage file's names (:data:`TOKEN_FIELDS`)."""
        return dict(zip(TOKEN_FIELDS, dataclasses.astuple(self), strict=True))


@dataclass
class UsageRecord:
    """One line of the usage file: one request to the proxy.

    ``api`` is the provider's name (``openai``, ``anthropic``, ``gemini``); ``endpoint`` the
    path below its API version. The token fields and ``cost_usd`` stay None when the
    response carried no usage (refused, failed before anything was sent upstream, or an
    unmetered endpoint); ``usage`` is the provider's own usage object, unmodified.

    ``estimated``: the token fields are (in part) the proxy's estimate, not the provider's
    count — a request the provider may have billed without ever reporting it (a stream cut
    before its usage, a response that timed out or broke off); see :mod:`agent2rl.metering`.
    ``retries``: how many times the proxy retried the upstream after a 429/5xx or a refused
    connection; the token fields then add up every attempt that reported usage.

    New fields are only ever appended, so older lines read the same.
    """

    api: str
    endpoint: str
    time: float = field(default_factory=time.time)
    model: str | None = None
    stream: bool = False
    status: int = 0
    input_tokens: int | None = None
    output_tokens: int | None = None
    cached_tokens: int | None = None
    cache_write_tokens: int | None = None
    latency_s: float = 0.0
    cost_usd: float | None = None
    refused: bool = False
    error: str | None = None
    usage: dict[str, Any] | None = None
    estimated: bool = False
    retries: int = 0

    @property
    def tokens(self) -> TokenCounts:
        """The token fields as counts (unknown ones 0)."""
        return TokenCounts.of_line(vars(self))

    def set_usage(
        self, usage: dict[str, Any] | None, tokens: TokenCounts, cost_usd: float | None
    ) -> None:
        """Record the provider's ``usage`` object (None: it sent none), the normalised
        ``tokens`` and the estimated cost (None: a model without a known price)."""
        self.usage = usage
        for name, value in tokens.as_fields().items():
            setattr(self, name, value)
        self.cost_usd = cost_usd


def append_record(path: Path, record: UsageRecord) -> None:
    """Append ``record`` as one line (:func:`~agent2rl.files.append_jsonl_line`: whole)."""
    append_jsonl_line(path, dataclasses.asdict(record))


#: All records in a usage file, oldest first, as dicts. A missing file is empty; a torn last
#: line (the proxy was killed mid-write) and any other malformed line are skipped.
read_usage = read_jsonl_tolerant


@dataclass
class _Tally:
    """Requests, tokens and known cost of a group of usage lines."""

    requests: int = 0
    tokens: TokenCounts = TokenCounts()
    cost_usd: float = 0.0

    def add(self, tokens: TokenCounts, cost_usd: float | None) -> None:
        self.requests += 1
        self.tokens += tokens
        self.cost_usd += cost_usd or 0.0

    def row(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            **self.tokens.as_fields(),
            "cost_usd": round(self.cost_usd, 6),
        }


def summarize_usage(path: Path) -> dict[str, Any]:
    """Totals of a usage file for the run report.

    Returns ``requests`` (every line), ``refused`` (budget or key refusals), ``errors``
    (status >= 400 or an error, refusals included), ``input_tokens``, ``output_tokens``,
    ``cached_tokens``, ``cache_write_tokens``, ``total_tokens`` (input + output),
    ``cost_usd`` (sum of the known estimates), ``unpriced_requests`` (requests that used
    tokens on a model missing from the metering proxy's price table, so ``cost_usd`` is a
    lower bound when it is non-zero) and ``by_model`` (the same token and cost fields per
    model name, ``(none)`` for requests without one). A missing file gives all zeros.
    """
    total = _Tally()
    by_model: dict[str, _Tally] = {}
    refused = errors = unpriced = 0
    for line in read_usage(path):
        tokens, cost = TokenCounts.of_line(line), line.get("cost_usd")
        total.add(tokens, cost)
        by_model.setdefault(line.get("model") or "(none)", _Tally()).add(tokens, cost)
        refused += bool(line.get("refused"))
        errors += bool(line.get("error")) or (line.get("status") or 0) >= 400
        unpriced += tokens.total > 0 and cost is None
    return {
        **total.row(),
        "refused": refused,
        "errors": errors,
        "unpriced_requests": unpriced,
        "total_tokens": total.tokens.total,
        "by_model": {model: tally.row() for model, tally in by_model.items()},
    }
