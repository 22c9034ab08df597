"""The judgment cache: SQLite under ``AGENT2RL_HOME``, shared by every run on the machine.

A judgment is keyed on the judge's identity (protocol, template, model, endpoint) and the
pair (instruction, reference output, model output), so grading identical outputs again —
the same submission re-graded after a harness failure, a duplicate of the baseline's
outputs, another run of the same model — costs no judge call. It stores the preference and
the judge's top candidates (for audits), never anything an agent can reach: the file lives
outside every workspace, and the task lists it among the paths every agent sandbox masks.

Concurrent evaluations (a study's runs) share the file: WAL mode and a busy timeout let them
read and write at once; a write lost to a crash only costs a judge call later. Within a
process, one connection behind one lock (:class:`~agent2rl.sqlite_store.SQLiteStore`).
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from agent2rl.scoring.judges.base import Pair
from agent2rl.scoring.llm_client import LLMMeter
from agent2rl.sqlite_store import SQLiteStore

#: the cache file under ``AGENT2RL_HOME``
CACHE_RELPATH = Path("cache") / "judge" / "judgments.sqlite3"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS judgments (
    key TEXT PRIMARY KEY,
    judge TEXT NOT NULL,
    preference REAL,
    top TEXT,
    created REAL NOT NULL
)
"""


def judge_key(identity: dict[str, Any]) -> str:
    """A short stable hash of a judge's identity."""
    blob = json.dumps(identity, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:24]


#: a judged pair's preference (None: an answer naming neither) and the judge's top candidates
Judgment = tuple[float | None, list[tuple[str, float]] | None]


def judge_with_cache(
    pairs: Sequence[Pair],
    identity: dict[str, Any],
    cache: JudgmentCache | None,
    meter: LLMMeter,
    chunk_size: int,
    judge_chunk: Callable[[list[int]], list[Judgment]],
) -> list[float]:
    """One preference per pair, in order, asking the judge only what it must: identical
    outputs are 1.5 without a request (AlpacaEval does the same); pairs cached under the
    judge's ``identity`` are answered from ``cache`` (counted as hits on ``meter``); the rest
    go to ``judge_chunk`` in chunks of ``chunk_size`` (at least 1) indices into ``pairs``, and
    each chunk is cached as soon as it is judged, so an outage midway loses only that chunk.
    A preference of None reads as NaN. Whatever ``judge_chunk`` raises propagates."""
    out: list[float | None] = [1.5 if p.output_1 == p.output_2 else None for p in pairs]
    todo = [i for i, v in enumerate(out) if v is None]
    key = judge_key(identity)
    if cache is not None and todo:
        cached = cache.get_many(key, [pairs[i] for i in todo])
        hits = [(i, c) for i, c in zip(todo, cached, strict=True) if c is not None]
        for i, c in hits:
            out[i] = c
        meter.hit(len(hits))
        todo = [i for i in todo if out[i] is None]
    step = max(1, int(chunk_size))
    for start in range(0, len(todo), step):
        chunk = todo[start : start + step]
        judged = judge_chunk(chunk)
        for i, (pref, _) in zip(chunk, judged, strict=True):
            out[i] = pref
        if cache is not None:
            cache.put_many(
                key, [(pairs[i], pref, top) for i, (pref, top) in zip(chunk, judged, strict=True)]
            )
    return [math.nan if v is None else v for v in out]


def pair_key(judge: str, pair: Pair) -> str:
    """The cache key of ``pair`` under judge ``judge`` (a :func:`judge_key`). The fields are
    length-prefixed, so no two different pairs share a key."""
    h = hashlib.sha256(judge.encode())
    for text in (pair.instruction, pair.output_1, pair.output_2):
        data = text.encode("utf-8", "surrogatepass")
        h.update(len(data).to_bytes(8, "big") + data)
    return h.hexdigest()


class JudgmentCache:
    """Preferences by (judge, pair). Thread-safe (one connection behind one lock)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        # Opened on first use: a judge built only for its identity touches no file.
        self._store = SQLiteStore(self.path, schema=_SCHEMA, timeout=60.0, lazy=True)

    def get_many(self, judge: str, pairs: Sequence[Pair]) -> list[float | None]:
        """The cached preference of each pair (NaN for a cached unusable answer), None where
        there is none."""
        keys = [pair_key(judge, p) for p in pairs]
        found: dict[str, float] = {}
        with self._store.read() as db:
            for start in range(0, len(keys), 500):  # SQLite's host-parameter limit
                chunk = keys[start : start + 500]
                marks = ",".join("?" * len(chunk))
                rows = db.execute(
                    f"SELECT key, preference FROM judgments WHERE key IN ({marks})", chunk
                ).fetchall()
                found.update({k: math.nan if v is None else float(v) for k, v in rows})
        return [found.get(k) for k in keys]

    def put_many(
        self, judge: str, items: Sequence[tuple[Pair, float, list[tuple[str, float]] | None]]
    ) -> None:
        """Store ``(pair, preference, top candidates)`` triples (NaN is stored as NULL)."""
        now = time.time()
        rows = [
            (
                pair_key(judge, pair),
                judge,
                None if math.isnan(pref) else pref,
                None if top is None else json.dumps(top),
                now,
            )
            for pair, pref, top in items
        ]
        with self._store.transaction() as db:
            db.executemany("INSERT OR REPLACE INTO judgments VALUES (?, ?, ?, ?, ?)", rows)

    def close(self) -> None:
        """Close the file; a later use opens it again."""
        self._store.close()
