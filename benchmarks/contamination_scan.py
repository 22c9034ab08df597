"""How fast the contamination check scans a workspace.

    python benchmarks/contamination_scan.py [--mb 300] [--task arith-lite]

Builds the task's index (private split minus the public one) and a temp workspace of about
``--mb`` MB of text: JSON-lines copies of the public split, prose-like filler drawn from the
public split's vocabulary, a gzip'd and a zipped copy of some of it, and 20 private items
planted in one file. Then times :func:`agent2rl.integrity.contamination.scan_workspace` over
it and prints the index build time, the scan time, MB/s and that all 20 planted items (and no
other) were found. The machine's load average is printed beside the figures: on a shared
machine they are a floor on the speed, not a measurement of it.

Reads the task store under AGENT2RL_HOME (the task is prepared there if it is not yet).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import tempfile
import time
import zipfile
from pathlib import Path

from agent2rl.integrity.contamination import private_texts, public_texts, scan_workspace
from agent2rl.integrity.ngrams import PrivateIndex
from agent2rl.settings import load_settings
from agent2rl.tasks import get_task, prepare_task


def build_workspace(root: Path, mb: int, public_rows: list[str], planted: list[dict]) -> int:
    rng = random.Random(0)
    words = " ".join(public_rows).split()
    (root / "data").mkdir(parents=True)
    (root / "code").mkdir()
    (root / "code" / "stolen.jsonl").write_text("\n".join(json.dumps(r) for r in planted))
    target, written, i = mb * 2**20, 0, 0
    while written < target:
        if i % 3 == 0:
            text = "\n".join(rng.sample(public_rows, min(len(public_rows), 20000)))
        else:
            text = "\n".join(
                " ".join(rng.choices(words, k=rng.randint(8, 40))) for _ in range(60000)
            )
        path = root / "data" / f"part-{i:03d}.txt"
        path.write_text(text)
        if i % 5 == 1:
            (root / "data" / f"part-{i:03d}.txt.gz").write_bytes(gzip.compress(text.encode(), 1))
            written += len(text)
        if i % 7 == 2:
            with zipfile.ZipFile(root / "data" / f"part-{i:03d}.zip", "w") as zf:
                zf.writestr("inner.txt", text)
            written += len(text)
        written += len(text)
        i += 1
    return written


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--mb", type=int, default=300)
    ap.add_argument("--task", default="arith-lite")
    args = ap.parse_args()
    task = get_task(args.task)
    prepared = prepare_task(task, load_settings().task_store)
    t0 = time.time()
    index = PrivateIndex.build(private_texts(task, prepared), public_texts(task, prepared))
    built = time.time() - t0
    samples = task.samples(prepared, "private")
    planted = [{"id": s.id, "input": s.input, "target": s.target} for s in samples[:20]]
    public_rows = [
        json.dumps({"input": s.input, "target": s.target}) for s in task.samples(prepared, "public")
    ]
    with tempfile.TemporaryDirectory() as tmp:
        total = build_workspace(Path(tmp), args.mb, public_rows, planted)
        t0 = time.time()
        report = scan_workspace(Path(tmp), index, task=task.name)
        took = time.time() - t0
    found = sorted(m.item_id for m in report.matches)
    print(f"task {task.name}: {len(index.item_ids)} private items, index built in {built:.1f}s")
    print(
        f"scanned {report.files_scanned} files, {report.bytes_scanned / 2**20:.0f} MB of text"
        f" ({total / 2**20:.0f} MB written) in {took:.1f}s:"
        f" {report.bytes_scanned / 2**20 / took:.0f} MB/s on one core"
    )
    print(
        f"planted items found: {found == sorted(p['id'] for p in planted)} ({len(found)} matched)"
    )
    print(f"load average during the run: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
