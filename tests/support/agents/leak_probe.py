"""Test agent: the leak scanner's half inside the agent sandbox (see tests/support/leakscan.py).

It runs as an agent does (same bwrap sandbox, same user), reads its fingerprints from stdin
(a pickle: raw patterns, the hashes of a PrivateIndex, the source of agent2rl's ngrams module,
which the sandbox masks along with the rest of the harness) and prints one JSON report. It
never writes a file: nothing private lands on a disk the agent could read.

Three passes over ``roots`` (``exclude``, e.g. /proc, pruned):

- ``grep -rlIF`` with the raw patterns over every readable text file, everywhere (it runs
  beside the compressed pass);
- compressed files and archives (.gz .tgz .xz .txz .bz2 .tbz2 .zip .whl .egg .tar)
  decompressed, zip and tar members read, a compressed member decompressed once more, and
  the text hashed into word n-grams in large batches: a batch is matched in full only when
  one of its word 6-grams starts one of the index's n-grams or distinctive strings
  (``prefixes``); the files are shared among :data:`WORKERS` forked processes;
- with ``full`` (the workspace), every file through ngrams.scan_file as the end-of-run
  contamination check reads it (none of the limits below apply there).

What the compressed pass does NOT read (so the shared view costs seconds, not minutes: all of
it would be ~1.85 GB of decompressed text here). It looks where a private split could lie in
a form an agent's Python reads as data; a private item hidden in these would be missed:

- :data:`SKIP_DIRS` (/usr/share/man, doc, info, locale): gzipped man and info pages,
  changelogs, message catalogs (most of the gigabyte), no Python package installs data there;
- Java archives and classes (:data:`SKIP_SUFFIXES`: .jar, .class; e.g. the JVM and
  google-cloud-sdk's jars): compiled code and resources, not data a Python agent loads;
- archive members that are not data-like (:data:`DATA_MEMBERS`: .json .jsonl .csv .tsv .txt
  .py .md .yaml .yml, or a compressed member, opened once more): binaries, images, ICU .res,
  compiled modules, Parquet/Arrow inside an archive (binary; a plain .parquet file is read by
  the workspace's full pass only, not in the shared view);
- any one decompressed file or member over :data:`MAX_MEMBER` (50 MB; counted in the report
  as ``compressed_oversize``), and more than :data:`MAX_BYTES` of one archive.

Plain (uncompressed) files everywhere are covered by the grep pass, and, in the workspace,
by the full pass.
"""

import bz2
import gzip
import io
import json
import lzma
import os
import pickle
import re
import subprocess
import sys
import tarfile
import time
import types
import zipfile

COMPRESSED = (".tar", ".gz", ".tgz", ".xz", ".txz", ".bz2", ".tbz2", ".zip", ".whl", ".egg")
ARCHIVES = (".tar", ".zip", ".whl", ".egg", ".tgz", ".txz", ".tbz2")
NESTED = (".gz", ".tgz", ".xz", ".txz", ".bz2", ".tbz2")
#: archive members read (see the module docstring)
DATA_MEMBERS = (".json", ".jsonl", ".csv", ".tsv", ".txt", ".py", ".md", ".yaml", ".yml", *NESTED)
#: not decompressed (see the module docstring); grep still reads every text file there
SKIP_DIRS = ("/usr/share/man", "/usr/share/doc", "/usr/share/info", "/usr/share/locale")
SKIP_SUFFIXES = (".jar", ".class")
MAX_BYTES = 256 * 2**20  # decompressed bytes read from one archive
MAX_MEMBER = 50 * 2**20  # a decompressed file or member larger than this is skipped
BATCH = 8 * 2**20
PREFIX = 6
WORKERS = 2
LETTER_WORD = re.compile(rb"[A-Za-z0-9\x80-\xff]*[A-Za-z\x80-\xff][A-Za-z0-9\x80-\xff]*")


def load(payload):
    mod = types.ModuleType("leak_ngrams")
    sys.modules["leak_ngrams"] = mod
    exec(compile(payload["ngrams_src"], "ngrams.py", "exec"), mod.__dict__)  # noqa: S102
    t = mod._Table.of
    index = mod.PrivateIndex(
        n=payload["n"],
        item_ids=payload["item_ids"],
        ngrams=t(*payload["ngrams"]),
        strings={m: t(*hs) for m, hs in payload["strings"].items()},
    )
    return mod, index, t(*payload["prefixes"])


def split_roots(roots, exclude):
    """``roots`` less ``exclude``: a root holding an excluded path is replaced by its
    entries (grep's --exclude-dir matches base names, not paths). Symlinks are dropped (grep
    follows those given on its command line; their targets are scanned where they lie)."""
    out = []
    for root in roots:
        if root in exclude or (root != "/" and os.path.islink(root)):
            continue
        if any(e.startswith(root.rstrip("/") + "/") for e in exclude):
            try:
                names = sorted(os.listdir(root))
            except OSError:
                continue
            out += split_roots([os.path.join(root, n) for n in names], exclude)
        else:
            out.append(root)
    return out


def walk(roots, exclude):
    for root in roots:
        for dirpath, dirs, files in os.walk(root, followlinks=False):
            dirs[:] = [d for d in dirs if os.path.join(dirpath, d) not in exclude]
            for name in files:
                yield os.path.join(dirpath, name)


def grep_start(roots, patterns):
    """A ``grep -rlIFZ`` for the raw patterns over ``roots``, started (it runs beside the
    compressed pass); :func:`grep_result` waits for it. Its output, the few file names it
    matches and its error lines, fits the pipes."""
    if not roots or not patterns:
        return None
    proc = subprocess.Popen(
        ["grep", "-rlIFZ", "-f", "-", "--", *roots],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    with proc.stdin:
        proc.stdin.write("\n".join(patterns).encode())
    proc.stdin = None  # closed: communicate() only reads
    return proc


def grep_result(proc):
    """Files holding a raw pattern, and how many paths grep could not read."""
    if proc is None:
        return [], 0
    out, err = proc.communicate()
    errors = err.decode(errors="replace").splitlines()
    files = [f.decode(errors="surrogateescape") for f in out.split(b"\0") if f]
    return files, len(errors)


#: decompressed files or members skipped for their size (in this process)
OVERSIZE = [0]


def bounded(fh, limit=MAX_MEMBER):
    """At most ``limit`` bytes of ``fh``; None (counted) when it holds more."""
    data = fh.read(limit + 1)
    if len(data) > limit:
        OVERSIZE[0] += 1
        return None
    return data


def data_like(name):
    return name.lower().endswith(DATA_MEMBERS)


def contents(path):
    """(member, bytes) of a compressed file or archive: its data-like members
    (:data:`DATA_MEMBERS`); a compressed member is opened once more (a .jsonl.gz inside a
    wheel)."""
    low = path.lower()
    if low.endswith(ARCHIVES):
        with open(path, "rb") as fh:
            head = fh.read(4)
        if head.startswith(b"PK\x03\x04"):
            with zipfile.ZipFile(path) as zf:
                left = MAX_BYTES
                for info in zf.infolist():
                    if info.is_dir() or left <= 0 or not data_like(info.filename):
                        continue
                    if info.file_size > MAX_MEMBER:
                        OVERSIZE[0] += 1
                        continue
                    with zf.open(info) as fh:
                        data = fh.read(min(left, MAX_MEMBER))
                    left -= len(data)
                    yield from inner(info.filename, data)
            return
        with tarfile.open(path, "r:*") as tf:
            yield from tar_members(tf, "")
        return
    yield from inner("", None, path)


def tar_members(tf, prefix):
    for info in tf:
        if not info.isfile() or not data_like(info.name):
            continue
        if info.size > MAX_MEMBER:
            OVERSIZE[0] += 1
            continue
        f = tf.extractfile(info)
        data = bounded(f) if f is not None else None
        if data is not None:
            yield from inner(f"{prefix}!{info.name}" if prefix else info.name, data)


def inner(member, data, path=None):
    name = (member or path).lower()
    opener = None
    if name.endswith((".gz", ".tgz")):
        opener = lambda f: gzip.GzipFile(fileobj=f)  # noqa: E731
    elif name.endswith((".xz", ".txz")):
        opener = lzma.LZMAFile
    elif name.endswith((".bz2", ".tbz2")):
        opener = bz2.BZ2File
    if opener is None:
        if data is not None:
            yield member, data
        return
    src = io.BytesIO(data) if data is not None else open(path, "rb")  # noqa: SIM115
    with src, opener(src) as fh:
        out = bounded(fh)
    if out is None:
        return
    if out[257:262] == b"ustar":  # a .tar.gz: its members
        with tarfile.open(fileobj=io.BytesIO(out)) as tf:
            yield from tar_members(tf, member)
        return
    yield member, out


def matches(mod, index, block, letters):
    """Item id -> snippet of its first match in ``block`` holding at least ``letters``
    words with a letter (a run of numbers identifies nothing)."""
    w = mod.words(block)
    found = {}
    for m, table in [(index.n, index.ngrams), *index.strings.items()]:
        pos, owners = table.lookup(mod.ngram_hashes(w.hashes, m))
        for p, o in zip(pos.tolist(), owners.tolist(), strict=True):
            item = index.item_ids[o]
            if item in found:
                continue
            start, end = int(w.starts[p]), int(w.ends[p + m - 1])
            if len(LETTER_WORD.findall(block[start:end])) >= letters:
                found[item] = mod.snippet(block, (start, end))
    return found


def scan_path(mod, index, path, letters):
    """ngrams.scan_file's reading of one file (ngrams.file_texts: itself, decompressed, an
    archive's members, Parquet/Arrow columns, a binary's printable runs, whatever its name),
    matched with :func:`matches`."""
    if os.path.islink(path) or not os.path.isfile(path):
        return {}
    try:
        hits = {}
        for _member, data, _cut in mod.file_texts(mod.Path(path), MAX_BYTES):
            text = None
            if data.startswith(b"PAR1"):
                text = mod._columnar_text(data, "parquet")
            elif data.startswith((b"ARROW1", b"\xff\xff\xff\xff")):
                text = mod._columnar_text(data, "arrow")
            for block in mod._blocks_of(text if text is not None else mod._text_of(data)):
                for item, snippet in matches(mod, index, block, letters).items():
                    hits.setdefault(item, snippet)
        return hits
    except Exception:  # noqa: BLE001 - unreadable: nothing found, as scan_file skips it
        return {}


class Batcher:
    """Hash many small texts at once; match in full only the batches a prefix hits."""

    def __init__(self, mod, index, prefixes, letters):
        self.mod, self.index, self.prefixes, self.letters = mod, index, prefixes, letters
        self.parts, self.size, self.hits, self.bytes = [], 0, {}, 0

    def add(self, where, data):
        self.bytes += len(data)
        if len(data) > BATCH:
            for block in self.mod._blocks_of(data):
                self._check([(where, block)])
            return
        self.parts.append((where, data))
        self.size += len(data) + 2
        if self.size >= BATCH:
            self.flush()

    def flush(self):
        if self.parts:
            self._check(self.parts)
        self.parts, self.size = [], 0

    def _check(self, parts):
        mod = self.mod
        blob = b"\n\n".join(d for _, d in parts)
        w = mod.words(blob)
        pos, _ = self.prefixes.lookup(mod.ngram_hashes(w.hashes, PREFIX))
        if not len(pos):
            return
        for where, data in parts:  # a prefix hit: match each text on its own, exactly
            for block in mod._blocks_of(data):
                for item, snippet in matches(mod, self.index, block, self.letters).items():
                    self.hits.setdefault(where, {}).setdefault(item, snippet)


def decompress_all(mod, index, prefixes, letters, paths):
    """(hits, unreadable, decompressed bytes, oversize) of the compressed ``paths``."""
    batcher = Batcher(mod, index, prefixes, letters)
    failed = 0
    for path in paths:
        try:
            for member, data in contents(path):
                batcher.add(f"{path}!{member}" if member else path, data)
        except Exception:  # noqa: BLE001 - unreadable or corrupt: counted
            failed += 1
    batcher.flush()
    return batcher.hits, failed, batcher.bytes, OVERSIZE[0]


def in_parallel(fn, parts):
    """``[fn(part) for part in parts]``, the parts after the first in forked children that
    send their results back through pipes (no file, no semaphore)."""
    children = []
    for part in parts[1:]:
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child
            code = 1
            try:
                os.close(r)
                with os.fdopen(w, "wb") as fh:
                    fh.write(pickle.dumps(fn(part)))
                code = 0
            finally:
                os._exit(code)
        os.close(w)
        children.append((pid, r))
    results = [fn(parts[0])] if parts else []
    for pid, r in children:
        with os.fdopen(r, "rb") as fh:
            data = fh.read()
        _, status = os.waitpid(pid, 0)
        if status != 0 or not data:
            raise RuntimeError(f"a decompressing worker failed (wait status {status})")
        results.append(pickle.loads(data))
    return results


def main():
    payload = pickle.load(sys.stdin.buffer)
    mod, index, prefixes = load(payload)
    exclude = set(payload["exclude"])
    roots = split_roots(payload["roots"], exclude)
    report = {"uid": os.getuid(), "hits": [], "timings": {}}
    patterns = payload["patterns"]  # pattern -> item id

    t = time.time()
    grepping = grep_start(roots, list(patterns))
    letters = payload["letter_words"]
    skip = exclude | {d for d in SKIP_DIRS if os.path.isdir(d)}
    jobs = []
    for path in walk(roots, skip):
        low = path.lower()
        if low.endswith(COMPRESSED) and not low.endswith(SKIP_SUFFIXES):
            try:
                if not os.path.islink(path):
                    jobs.append((os.path.getsize(path), path))
            except OSError:
                continue
    jobs.sort(reverse=True)  # dealt out largest first: the workers' shares even out
    workers = max(1, min(WORKERS, len(os.sched_getaffinity(0)), len(jobs)))
    parts = [[p for _, p in jobs[i::workers]] for i in range(workers)]
    results = in_parallel(lambda part: decompress_all(mod, index, prefixes, letters, part), parts)
    hits = {}
    for part_hits, *_ in results:
        for where, items in part_hits.items():
            hits.setdefault(where, {}).update(items)
    for where, items in sorted(hits.items()):
        found = [{"item": i, "snippet": s} for i, s in sorted(items.items())]
        report["hits"].append({"file": where, "how": "decompressed n-grams", "items": found})
    report["compressed_files"] = len(jobs)
    report["compressed_unreadable"] = sum(r[1] for r in results)
    report["decompressed_bytes"] = sum(r[2] for r in results)
    report["compressed_oversize"] = sum(r[3] for r in results)
    report["compressed_workers"] = workers
    report["compressed_skipped_dirs"] = sorted(skip - exclude)
    report["timings"]["compressed"] = round(time.time() - t, 2)

    files, unreadable = grep_result(grepping)
    report["grep_unreadable"] = unreadable
    for path in files:
        if any(path == e or path.startswith(e + "/") for e in exclude):
            continue
        with open(path, "rb") as fh:
            text = fh.read(MAX_BYTES).decode("utf-8", "replace")
        items = sorted({patterns[p] for p in patterns if p in text})
        report["hits"].append({"file": path, "how": "raw text", "items": items[:20]})
    report["grep_files"] = len(files)
    report["timings"]["grep and compressed"] = round(time.time() - t, 2)

    t = time.time()
    scanned = 0
    for root in payload["full"]:
        for path in walk([root], exclude):
            scanned += 1
            hits = scan_path(mod, index, path, letters)
            if hits:
                found = [{"item": i, "snippet": s} for i, s in sorted(hits.items())]
                report["hits"].append({"file": path, "how": "n-grams", "items": found})
    report["full_files"] = scanned
    report["timings"]["full"] = round(time.time() - t, 2)

    # what the agent sees at each masked path (it must be empty)
    report["masked"] = {
        p: sorted(os.listdir(p)) if os.path.isdir(p) else os.path.getsize(p)
        for p in payload["masked"]
        if os.path.exists(p)
    }
    print(json.dumps(report))


if __name__ == "__main__":
    main()
