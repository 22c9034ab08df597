"""Prices not checked against the provider's page are marked (issue #39 item 8): each is a
priced entry and docs/paper-fidelity.md names it."""

from __future__ import annotations

from pathlib import Path

from agent2rl.metering.pricing import PRICES, UNVERIFIED_PRICES

FIDELITY = Path(__file__).resolve().parents[3] / "docs" / "paper-fidelity.md"


def test_unverified_prices_are_priced_and_named_in_the_fidelity_page() -> None:
    assert {"gpt-5.4", "claude-opus-4-6"} <= UNVERIFIED_PRICES <= set(PRICES)
    text = FIDELITY.read_text()
    assert all(f"`{name}`" in text for name in UNVERIFIED_PRICES)
    assert "UNVERIFIED_PRICES" in text
