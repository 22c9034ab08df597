"""The paper's driver LLMs are priced, so a run's cost is an estimate rather than unknown:
Claude Opus 4.6, Claude Sonnet 4.5 / 4.6, GPT-5.4, GPT-5.2, GPT-4o, Gemini 2.5 Flash."""

from __future__ import annotations

import pytest

from agent2rl.metering.pricing import estimate_cost, price_for
from agent2rl.metering.usage import TokenCounts

PAPER_DRIVERS = [
    "claude-opus-4-6",
    "claude-sonnet-4-5",
    "claude-sonnet-4-6",
    "gpt-5.4",
    "gpt-5.2",
    "gpt-4o",
    "gemini-2.5-flash",
]


@pytest.mark.parametrize("model", PAPER_DRIVERS)
def test_every_paper_driver_has_a_price(model: str) -> None:
    assert price_for(model) is not None
    assert estimate_cost(model, TokenCounts(input=1_000_000, output=0)) == price_for(model).input


def test_new_entries_and_their_spellings() -> None:
    sonnet = price_for("anthropic/claude-sonnet-4-6-20260217")  # a routing prefix, a snapshot
    assert sonnet is not None and (sonnet.input, sonnet.output) == (3.00, 15.00)
    gpt52 = price_for("openai/gpt-5.2")
    assert gpt52 is not None and (gpt52.input, gpt52.output, gpt52.cached_input) == (
        1.75,
        14.00,
        0.175,
    )
    assert price_for("gpt-5.3") is None  # an unlisted version stays unknown, never guessed
