"""Load on the real grading service (loopback only): about 200 requests at once, mixed —
the same weights many times over, distinct valid models, copies of the base model, malformed
files and bodies, wrong and missing tokens, status polls. Nothing answers 5xx; every
acknowledged submission has exactly one ledger row, settled (graded, or failed with a reason);
every refusal has a rejection row; the same weights are evaluated once."""

from __future__ import annotations

import asyncio
import json
import random
import shutil
import time
from collections import Counter

import httpx
import pytest
import torch
from safetensors.torch import load_file, save_file
from support.rundirs import make_run, serve

from agent2rl.grading.ledger import Ledger

#: How many requests of each kind are fired together (203 in all).
MIX = {
    "same-weights": 30,  # one model: 10 times its own directory, 20 times byte-identical copies
    "distinct": 1,  # a second valid model, evaluated too
    "base-copy": 10,  # the base model itself: the baseline, no evaluation
    "malformed": 30,  # pickle weights, no config, auto_map, truncated weights, missing path
    "wrong-token": 40,
    "no-token": 10,
    "bad-body": 12,
    "poll": 70,  # /submissions, /time and /health
}


def _perturbed(paths, tiny, name: str, seed: int) -> str:
    dest = paths.output / name
    shutil.copytree(tiny.path, dest)
    g = torch.Generator().manual_seed(seed)
    tensors = load_file(tiny.path / "model.safetensors")
    tensors = {k: v + 0.01 * torch.randn(v.shape, generator=g) for k, v in tensors.items()}
    save_file(tensors, dest / "model.safetensors", metadata={"format": "pt"})
    return f"output/{name}"


def _malformed(paths, tiny) -> list[str]:
    out = paths.output
    for name in ("pickle", "noconfig", "automap", "truncated"):
        shutil.copytree(tiny.path, out / name)
    (out / "pickle" / "pytorch_model.bin").write_bytes(b"\x80\x04 pickle")
    (out / "noconfig" / "config.json").unlink()
    cfg = json.loads((out / "automap" / "config.json").read_text())
    cfg["auto_map"] = {"AutoModelForCausalLM": "modeling_evil.Evil"}
    (out / "automap" / "config.json").write_text(json.dumps(cfg))
    weights = out / "truncated" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    return [f"output/{n}" for n in ("pickle", "noconfig", "automap", "truncated", "missing")]


@pytest.fixture(scope="module")
def loaded(tmp_path_factory, arith, tiny):
    task, prepared = arith
    paths = make_run(tmp_path_factory.mktemp("load") / "run", task, prepared, tiny)
    same = _perturbed(paths, tiny, "same", seed=31)
    copies = [f"output/same-{i}" for i in range(20)]
    for rel in copies:
        shutil.copytree(paths.workspace / same, paths.workspace / rel)
    distinct = _perturbed(paths, tiny, "distinct", seed=32)
    shutil.copytree(tiny.path, paths.output / "base")
    bad = _malformed(paths, tiny)
    handle, token = serve(paths, tiny.path)
    try:
        yield paths, handle, token, {"same": [same] * 10 + copies, "distinct": distinct, "bad": bad}
    finally:
        handle.stop()


def _requests(token: str, models: dict) -> list[tuple[str, str, str, dict]]:
    """(kind, method, path, httpx keyword arguments) for every request of :data:`MIX`."""
    auth = {"Authorization": f"Bearer {token}"}
    reqs: list[tuple[str, str, str, dict]] = []

    def submit(kind: str, model_path: str, headers: dict | None = None) -> None:
        body = {"json": {"model_path": model_path}, "headers": auth if headers is None else headers}
        reqs.append((kind, "POST", "/submit", body))

    for rel in models["same"]:
        submit("same-weights", rel)
    submit("distinct", models["distinct"])
    for _ in range(MIX["base-copy"]):
        submit("base-copy", "output/base")
    for i in range(MIX["malformed"]):
        submit("malformed", models["bad"][i % len(models["bad"])])
    for i in range(MIX["wrong-token"]):
        submit("wrong-token", "output/same", {"Authorization": f"Bearer wrong-{i}"})
    for _ in range(MIX["no-token"]):
        submit("no-token", "output/same", {})
    for i in range(MIX["bad-body"]):
        raw = b"{not json" if i % 2 else json.dumps({"path": "output/same"}).encode()
        headers = {**auth, "Content-Type": "application/json"}
        reqs.append(("bad-body", "POST", "/submit", {"content": raw, "headers": headers}))
    for i in range(MIX["poll"]):
        path = ("/submissions", "/time", "/health")[i % 3]
        reqs.append(("poll", "GET", path, {"headers": auth}))
    assert Counter(k for k, *_ in reqs) == Counter(MIX)
    random.Random(0).shuffle(reqs)
    return reqs


async def _fire(url: str, reqs: list) -> list[httpx.Response]:
    limits = httpx.Limits(max_connections=len(reqs), max_keepalive_connections=len(reqs))
    async with httpx.AsyncClient(base_url=url, timeout=300, limits=limits) as client:
        calls = [client.request(method, path, **kw) for _, method, path, kw in reqs]
        return await asyncio.wait_for(asyncio.gather(*calls), timeout=400)


def test_two_hundred_mixed_requests_at_once(loaded) -> None:
    paths, handle, token, models = loaded
    reqs = _requests(token, models)
    assert len(reqs) >= 200
    began = time.time()
    answers = asyncio.run(_fire(handle.url, reqs))
    took = time.time() - began

    assert [a.status_code for a in answers if a.status_code >= 500] == []
    by_kind: dict[str, list[httpx.Response]] = {}
    for (kind, *_), a in zip(reqs, answers, strict=True):
        by_kind.setdefault(kind, []).append(a)
        assert a.headers["content-type"].startswith("application/json"), a.text
        if a.status_code != 200:
            assert a.json()["error"], a.text
    assert all(a.status_code == 200 for a in by_kind["poll"])
    for kind in ("same-weights", "distinct", "base-copy"):
        assert [a.status_code for a in by_kind[kind]] == [200] * len(by_kind[kind]), kind
    assert {a.status_code for a in by_kind["wrong-token"] + by_kind["no-token"]} == {401}
    assert {a.status_code for a in by_kind["bad-body"]} == {400}

    submits = [
        (kind, a) for (kind, _, path, _), a in zip(reqs, answers, strict=True) if path == "/submit"
    ]
    acknowledged = [(kind, a.json()) for kind, a in submits if a.status_code == 200]
    refused = [a for _, a in submits if a.status_code != 200]
    assert all(400 <= a.status_code < 500 for a in refused)
    with Ledger(paths.ledger) as ledger:
        rows = {s.id: s for s in ledger.submissions()}
        rejections = ledger.rejections()
    # Exactly one row per acknowledged submission, and no other rows (none withdrawn half-way).
    ids = [body["submission_id"] for _, body in acknowledged]
    assert len(set(ids)) == len(ids) and set(ids) == set(rows)
    for row in rows.values():
        assert row.status in ("graded", "failed"), row
        if row.status == "failed":
            assert row.error and row.failure_kind in ("model", "harness"), row
    assert not [r for r in rows.values() if r.failure_kind == "harness"], "no harness failures"
    # Every refusal has its rejection row (under the default rate limit).
    assert len(rejections) == len(refused)
    assert Counter(r.http_status for r in rejections) == Counter(a.status_code for a in refused)

    # The same weights (10 submissions of one directory, 20 copies) are evaluated once.
    same = [body for kind, body in acknowledged if kind == "same-weights"]
    assert len(same) == MIX["same-weights"]
    assert len({rows[b["submission_id"]].fingerprint for b in same}) == 1
    assert sum(1 for b in same if b["duplicate_of"] is None) == 1
    scores = {b["score"] for b in same}
    assert len(scores) == 1 and None not in scores
    evaluated = Counter(r.fingerprint for r in rows.values() if (r.eval_seconds or 0) > 0)
    assert set(evaluated.values()) == {1}, evaluated
    assert len(evaluated) == 2  # the same weights, and the distinct model
    base = [body for kind, body in acknowledged if kind == "base-copy"]
    assert all(b["is_copy"] and b["eval_seconds"] == 0 for b in base)
    print(f"{len(reqs)} requests in {took:.1f}s")
    assert took < 300
    assert httpx.get(f"{handle.url}/health").status_code == 200
