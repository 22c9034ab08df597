"""A rejection is untrusted and may be unauthenticated: what one row stores is bounded, and
the service can count rejections cheaply (to rate-limit them). Before the cap, five requests
with a wrong token grew a ledger by 30 MB."""

from __future__ import annotations

import time
from pathlib import Path

from agent2rl.grading.ledger import MAX_REJECTION_FIELD_BYTES, Ledger, cap_text

TEN_MB = 10 * 2**20


def _ledger_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.parent.glob(path.name + "*"))


def test_a_huge_rejection_stores_at_most_the_cap(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    with Ledger(path) as ledger:
        before = _ledger_bytes(path)
        for _ in range(5):
            ledger.add_rejection("p" * TEN_MB, 401, "r" * TEN_MB)
        rows = ledger.rejections()
        grown = _ledger_bytes(path) - before
    assert len(rows) == 5
    for row in rows:
        for value in (row.path, row.reason):
            assert value is not None
            assert len(value.encode()) <= MAX_REJECTION_FIELD_BYTES
            assert value.endswith(f"[truncated: {TEN_MB} bytes]")
    assert grown < 256 * 2**10, f"5 rejections grew the ledger by {grown} bytes"


def test_short_values_are_kept_whole(tmp_path: Path) -> None:
    with Ledger(tmp_path / "ledger.db") as ledger:
        ledger.add_rejection("output/model", 400, "no config.json")
        ledger.add_rejection(None, 401, "bad token")
        a, b = ledger.rejections()
    assert (a.path, a.reason) == ("output/model", "no config.json")
    assert (b.path, b.reason, b.http_status) == (None, "bad token", 401)


def test_cap_text_never_splits_a_character() -> None:
    text = "é" * 2000  # two bytes each
    capped = cap_text(text, 101)
    assert len(capped.encode()) <= 101 and "truncated: 4000 bytes" in capped
    assert capped.split("...[")[0] == "é" * len(capped.split("...[")[0])
    assert cap_text("x" * 100, 100) == "x" * 100


def test_a_lone_surrogate_is_stored_escaped(tmp_path: Path) -> None:
    """JSON may carry a lone surrogate (``"\\ud800"``), which UTF-8 and SQLite refuse."""
    with Ledger(tmp_path / "ledger.db") as ledger:
        ledger.add_rejection("out\ud800put", 400, "bad \udfff")
        (row,) = ledger.rejections()
    assert (row.path, row.reason) == ("out\\ud800put", "bad \\udfff")


def test_rejection_count(tmp_path: Path) -> None:
    with Ledger(tmp_path / "ledger.db") as ledger:
        assert ledger.rejection_count() == 0
        now = time.time()
        for i in range(10):
            ledger.add_rejection(None, 401, "bad token", at=now - 100 + i * 10)
        assert ledger.rejection_count() == 10
        assert ledger.rejection_count(since=now - 55) == 5
        plan = ledger._db.fetchall(
            "EXPLAIN QUERY PLAN SELECT COUNT(*) FROM rejections WHERE at >= ?", (now,)
        )
        assert "rejections_at" in " ".join(str(r["detail"]) for r in plan)
