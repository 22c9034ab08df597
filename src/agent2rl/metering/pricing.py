"""List prices per model and the cost estimate of a request's tokens (for reports only)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from agent2rl.metering.usage import TokenCounts


@dataclass(frozen=True)
class Price:
    """List prices in USD per million tokens. ``cached_input`` / ``cache_write`` default to the
    input price when a provider has no separate rate."""

    input: float
    output: float
    cached_input: float | None = None
    cache_write: float | None = None


#: Public list prices (late 2025), for estimates in reports only — never for billing. A model
#: matches its entry exactly or with a snapshot suffix (``-20250514``, ``-2024-08-06``,
#: ``-latest``); anything else is unknown rather than guessed from a similar name, since one
#: family's versions differ in price (Opus 4.1 costs three times Opus 4.5).
PRICES: dict[str, Price] = {
    # GPT-4 Turbo: AlpacaEval 2.0's judge (gpt-4-1106-preview), priced for the judge's cost
    "gpt-4-turbo": Price(10.00, 30.00),
    "gpt-4-1106-preview": Price(10.00, 30.00),
    "gpt-4-0125-preview": Price(10.00, 30.00),
    "gpt-4o": Price(2.50, 10.00, 1.25),
    "gpt-4o-mini": Price(0.15, 0.60, 0.075),
    "gpt-4.1": Price(2.00, 8.00, 0.50),
    "gpt-4.1-mini": Price(0.40, 1.60, 0.10),
    "gpt-4.1-nano": Price(0.10, 0.40, 0.025),
    "gpt-5": Price(1.25, 10.00, 0.125),
    "gpt-5-codex": Price(1.25, 10.00, 0.125),
    "gpt-5-mini": Price(0.25, 2.00, 0.025),
    "gpt-5-nano": Price(0.05, 0.40, 0.005),
    "gpt-5.1": Price(1.25, 10.00, 0.125),
    "gpt-5.1-codex": Price(1.25, 10.00, 0.125),
    # The paper's drivers GPT-5.2 and GPT-5.4. GPT-5.2: OpenAI's list price at its launch
    # (December 2025). GPT-5.4: written from memory of its launch announcement and NOT
    # checked against OpenAI's pricing page here (UNVERIFIED_PRICES); check it before quoting
    # a cost.
    "gpt-5.2": Price(1.75, 14.00, 0.175),
    "gpt-5.4": Price(2.50, 15.00, 0.25),
    "o3": Price(2.00, 8.00, 0.50),
    "o3-mini": Price(1.10, 4.40, 0.55),
    "o4-mini": Price(1.10, 4.40, 0.275),
    "claude-opus-4": Price(15.00, 75.00, 1.50, 18.75),
    "claude-opus-4-0": Price(15.00, 75.00, 1.50, 18.75),
    "claude-opus-4-1": Price(15.00, 75.00, 1.50, 18.75),
    "claude-opus-4-5": Price(5.00, 25.00, 0.50, 6.25),
    # the paper's driver Claude Opus 4.6: assumed to keep Opus 4.5's list price, NOT checked
    # against Anthropic's pricing page here (UNVERIFIED_PRICES)
    "claude-opus-4-6": Price(5.00, 25.00, 0.50, 6.25),
    "claude-sonnet-4": Price(3.00, 15.00, 0.30, 3.75),
    "claude-sonnet-4-0": Price(3.00, 15.00, 0.30, 3.75),
    "claude-sonnet-4-5": Price(3.00, 15.00, 0.30, 3.75),
    # Claude Sonnet 4.6: the reference's Claude Code default (its start.sh); the paper's
    # driver is Sonnet 4.5 (above). Assumed to keep Sonnet 4.5's list price, NOT checked here
    # (UNVERIFIED_PRICES)
    "claude-sonnet-4-6": Price(3.00, 15.00, 0.30, 3.75),
    "claude-3-7-sonnet": Price(3.00, 15.00, 0.30, 3.75),
    "claude-3-5-sonnet": Price(3.00, 15.00, 0.30, 3.75),
    "claude-haiku-4-5": Price(1.00, 5.00, 0.10, 1.25),
    "claude-3-5-haiku": Price(0.80, 4.00, 0.08, 1.00),
    # Gemini: the rates for prompts up to 200k tokens (2.5 Pro charges more above that).
    "gemini-2.5-pro": Price(1.25, 10.00, 0.125),
    "gemini-2.5-flash": Price(0.30, 2.50, 0.03),
    "gemini-2.5-flash-lite": Price(0.10, 0.40, 0.01),
}

#: Entries above not checked against the provider's pricing page when written (from memory
#: or assumed equal to the previous version's): reports' costs for them are estimates of
#: estimates (docs/paper-fidelity.md, *Prices*).
UNVERIFIED_PRICES: frozenset[str] = frozenset({"gpt-5.4", "claude-opus-4-6", "claude-sonnet-4-6"})

_SNAPSHOT = re.compile(r"-(\d{8}|\d{4}-\d{2}-\d{2}|latest)$")


def price_for(model: str | None) -> Price | None:
    """The price of ``model``, or None when it is unknown.

    A routing prefix (``openai/``, ``anthropic/``, ``models/``) and a snapshot suffix are
    ignored: ``gpt-4o-2024-08-06`` and ``anthropic/claude-sonnet-4-20250514`` are priced,
    ``gpt-4o-x`` is not. Case-insensitive.
    """
    if not model:
        return None
    name = model.rsplit("/", 1)[-1].lower()
    return PRICES.get(name) or PRICES.get(_SNAPSHOT.sub("", name))


def estimate_cost(model: str | None, tokens: TokenCounts) -> float | None:
    """Estimated USD cost of ``tokens`` on ``model``; None for an unknown model. Cache reads
    and writes are charged at their own rates, the rest of the input at the input rate."""
    price = price_for(model)
    if price is None:
        return None
    uncached = max(tokens.input - tokens.cached - tokens.cache_write, 0)
    cached_rate = price.input if price.cached_input is None else price.cached_input
    write_rate = price.input if price.cache_write is None else price.cache_write
    usd = (
        uncached * price.input
        + tokens.cached * cached_rate
        + tokens.cache_write * write_rate
        + tokens.output * price.output
    )
    return round(usd / 1e6, 8)
