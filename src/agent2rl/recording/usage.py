"""The LLM usage file of a run (``record/llm_usage.jsonl``): one JSON line per request the
metering proxy (:mod:`agent2rl.agents.metering`) relayed, and its summary for the report."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

USAGE_FILE_NAME = "llm_usage.jsonl"


def read_usage(path: Path) -> list[dict[str, Any]]:
    """All records in a usage file, oldest first. A missing file is empty; a torn last line
    (the writer was killed mid-write) is skipped."""
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        return []
    out = []
    for line in text.splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


def summarize_usage(path: Path) -> dict[str, Any]:
    """Totals of a usage file for the run report.

    Returns ``requests`` (every line), ``refused`` (budget or key refusals), ``errors``
    (status >= 400 or an error, refusals included), ``input_tokens``, ``output_tokens``,
    ``cached_tokens``, ``cache_write_tokens``, ``total_tokens`` (input + output),
    ``cost_usd`` (sum of the known estimates), ``unpriced_requests`` (requests that used
    tokens on a model missing from the metering proxy's price table, so ``cost_usd`` is a
    lower bound when it is non-zero) and ``by_model`` (the same token and cost fields per
    model name). A missing file gives all zeros.
    """
    keys = ("input_tokens", "output_tokens", "cached_tokens", "cache_write_tokens")

    def empty() -> dict[str, Any]:
        return {"requests": 0, **dict.fromkeys(keys, 0), "cost_usd": 0.0}

    total = {**empty(), "refused": 0, "errors": 0, "unpriced_requests": 0}
    by_model: dict[str, dict[str, Any]] = {}
    for rec in read_usage(path):
        model = rec.get("model") or "(none)"
        rows = (total, by_model.setdefault(model, empty()))
        for row in rows:
            row["requests"] += 1
            for k in keys:
                row[k] += rec.get(k) or 0
            row["cost_usd"] += rec.get("cost_usd") or 0.0
        total["refused"] += bool(rec.get("refused"))
        total["errors"] += bool(rec.get("error")) or (rec.get("status") or 0) >= 400
        used = (rec.get("input_tokens") or 0) + (rec.get("output_tokens") or 0)
        total["unpriced_requests"] += used > 0 and rec.get("cost_usd") is None
    for row in (total, *by_model.values()):
        row["cost_usd"] = round(row["cost_usd"], 6)
    total["total_tokens"] = total["input_tokens"] + total["output_tokens"]
    total["by_model"] = by_model
    return total
