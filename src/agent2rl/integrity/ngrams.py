"""Fingerprints of a private split, and a fast scan of text and files for them.

**Normalisation.** Text is read as UTF-8 bytes. ASCII letters are lowercased; every byte that
is not an ASCII letter or digit is a separator, except bytes >= 0x80 (the bytes of non-ASCII
UTF-8 characters), which belong to words, so accented words and other scripts stay words
(uppercase non-ASCII letters are not folded). JSON/Python string escapes (``\\n``, ``\\t``,
``\\"``, ``\\\\``, ``\\uXXXX``...) are separators too, so an item copied into a JSON-lines
file or a Python string literal reads as the same words as the item itself. A text is then
its sequence of words: punctuation, case and whitespace do not matter.

**Hashing.** A word's hash is a polynomial hash of its bytes modulo 2^64 passed through the
splitmix64 finaliser (so that the linear structure of polynomial hashes cannot make distinct
words collide systematically); an n-gram's hash is the same construction over its words'
hashes. Everything is vectorised with numpy over whole byte buffers (no Python object per
word). The hashes are stable across processes and machines.

**The index.** :meth:`PrivateIndex.build` keeps, for each private item, the hashes of its
word n-grams (``n`` = 13 by default, as in the GPT-3 and PaLM contamination studies), each
field separately, minus

- every n-gram that also occurs anywhere in the public texts: a template shared with the
  training data is no evidence that the private item was seen;
- every n-gram of more than one private item: it identifies neither (the split's own
  boilerplate, such as the game grammar every ALFWorld game of a room type repeats).

It also keeps each item's *distinctive strings*: up to three of its longest lines of at least
``min_words`` and fewer than ``n`` words that occur in no public text and in no other private
item, matched exactly (as word sequences, after normalisation). Lines of ``n`` words or more
are covered by the n-grams. An item with no n-gram left (shorter than ``n`` words, or all of
its n-grams are public) is searched by its distinctive strings only: such items are listed
in ``short_items``; an item with neither is listed in ``unsearchable_items`` and can never
match. Both lists are reported, never hidden.

An item *matches* a text when one of its n-grams or distinctive strings occurs in it.
"""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import re
import tarfile
import zipfile
import zlib
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import numpy as np

DEFAULT_N = 13
#: distinctive strings need at least this many words (shorter lines are too generic)
MIN_WORDS = 6
#: distinctive strings kept per item
STRINGS_PER_ITEM = 3
#: bytes of (decompressed) text read from one file or archive member; the rest is skipped and
#: the file marked truncated (a decompression bomb stops here)
MAX_FILE_BYTES = 512 * 2**20
#: text is hashed in blocks of this many bytes (bounds memory: ~40 bytes per byte of block)
BLOCK_BYTES = 8 * 2**20
#: bytes carried from one block into the next, so a match across a block edge is still seen
_OVERLAP = 4096

_U64 = np.uint64
_P_BYTE = _U64(0x100000001B3)  # FNV prime: odd, so invertible modulo 2^64
_P_WORD = _U64(0x9E3779B97F4A7C15)

# A byte's class: 0 separator, 1 word byte. ASCII letters and digits, and bytes >= 0x80.
_WORD_BYTE = np.zeros(256, dtype=bool)
_WORD_BYTE[list(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")] = True
_WORD_BYTE[0x80:] = True
# A byte's value in a word's hash: its lowercase, plus one (so that no byte is worth zero).
_VALUE = np.arange(1, 257, dtype=np.uint64)
_VALUE[ord("A") : ord("Z") + 1] += 32
_ESCAPED = np.zeros(256, dtype=bool)
_ESCAPED[list(b"nrtbf\"/\\'")] = True


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser, elementwise (uint64 in, uint64 out)."""
    with np.errstate(over="ignore"):
        x = x ^ (x >> _U64(30))
        x = x * _U64(0xBF58476D1CE4E5B9)
        x = x ^ (x >> _U64(27))
        x = x * _U64(0x94D049BB133111EB)
        return x ^ (x >> _U64(31))


_POWERS: list[np.ndarray] = []


def _powers(size: int) -> tuple[np.ndarray, np.ndarray]:
    """``P^j`` and ``P^-j`` modulo 2^64 for j < ``size`` (cached, grown to the largest block)."""
    if not _POWERS or len(_POWERS[0]) < size:
        size = max(size, BLOCK_BYTES + 2 * _OVERLAP)
        with np.errstate(over="ignore"):
            up = np.full(size, _P_BYTE, dtype=_U64)
            down = np.full(size, _U64(pow(int(_P_BYTE), -1, 1 << 64)), dtype=_U64)
            up[0] = down[0] = 1
            _POWERS[:] = [np.cumprod(up, dtype=_U64), np.cumprod(down, dtype=_U64)]
    return _POWERS[0], _POWERS[1]


@dataclass(frozen=True)
class Words:
    """A text's words: their hashes and the byte span of each in the text."""

    hashes: np.ndarray
    starts: np.ndarray
    ends: np.ndarray


def _as_bytes(text: str | bytes) -> bytes:
    return text.encode("utf-8", "replace") if isinstance(text, str) else text


def words(text: str | bytes) -> Words:
    """The normalised words of ``text`` (see the module docstring), hashed."""
    raw = np.frombuffer(_as_bytes(text), dtype=np.uint8)
    is_word = _WORD_BYTE[raw]
    # Escapes: a backslash and the escaped letter separate words; \uXXXX drops 6 bytes.
    slash = np.flatnonzero(raw[:-1] == ord("\\"))
    if slash.size:
        nxt = raw[slash + 1]
        is_word[slash[_ESCAPED[nxt]] + 1] = False
        uni = slash[nxt == ord("u")]
        for k in range(1, 6):
            is_word[np.minimum(uni + k, raw.size - 1)] = False
    padded = np.concatenate(([False], is_word, [False]))
    starts = np.flatnonzero(padded[1:] & ~padded[:-1])
    ends = np.flatnonzero(padded[:-1] & ~padded[1:])
    if starts.size == 0:
        return Words(np.zeros(0, dtype=_U64), starts, ends)
    # Polynomial hash of each word through prefix sums: sum_j c_j P^j over [start, end),
    # divided by P^start (P is odd, so its inverse modulo 2^64 exists).
    powers, inverses = _powers(raw.size)
    with np.errstate(over="ignore"):
        weighted = _VALUE[raw] * powers[: raw.size]
        prefix = np.concatenate(([_U64(0)], np.cumsum(weighted, dtype=_U64)))
        h = (prefix[ends] - prefix[starts]) * inverses[starts]
        h = h + (ends - starts).astype(_U64) * _U64(0x2545F4914F6CDD1D)
    return Words(_mix(h), starts, ends)


def ngram_hashes(word_hashes: np.ndarray, n: int) -> np.ndarray:
    """The hash of every run of ``n`` consecutive words (empty when there are fewer)."""
    count = len(word_hashes) - n + 1
    if count <= 0:
        return np.zeros(0, dtype=_U64)
    acc = np.zeros(count, dtype=_U64)
    with np.errstate(over="ignore"):
        for k in range(n):
            acc = acc * _P_WORD + word_hashes[k : k + count]
        acc = acc + _U64(n)
    return _mix(acc)


def normalize(text: str) -> str:
    """The normalised form of ``text`` as a string: its words, lowercased, one space apart.
    (For display and tests; matching works on hashes.)"""
    raw = _as_bytes(text)
    w = words(raw)
    return " ".join(
        raw[s:e].decode("utf-8", "replace").lower() for s, e in zip(w.starts, w.ends, strict=True)
    )


# -- the index ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Table:
    """Sorted hashes with the item index owning each, and a 2^20-bit prefilter."""

    hashes: np.ndarray
    owners: np.ndarray
    bits: np.ndarray

    @classmethod
    def of(cls, hashes: np.ndarray, owners: np.ndarray) -> _Table:
        order = np.argsort(hashes, kind="stable")
        hashes, owners = hashes[order], owners[order]
        bits = np.zeros(1 << 20, dtype=bool)
        bits[(hashes >> _U64(44)).astype(np.int64)] = True
        return cls(hashes, owners, bits)

    def lookup(self, probe: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Positions in ``probe`` that hit, and the owning item of each hit (one row per
        (position, owner) pair)."""
        cand = np.flatnonzero(self.bits[(probe >> _U64(44)).astype(np.int64)])
        values = probe[cand]
        lo = np.searchsorted(self.hashes, values, side="left")
        hi = np.searchsorted(self.hashes, values, side="right")
        found = hi > lo
        cand, lo, hi = cand[found], lo[found], hi[found]
        reps = hi - lo
        pos = np.repeat(cand, reps)
        offsets = np.arange(reps.sum()) - np.repeat(np.cumsum(reps) - reps, reps)
        return pos, self.owners[np.repeat(lo, reps) + offsets]


def _fields(value: str | Sequence[str]) -> list[str]:
    return [value] if isinstance(value, str) else [v for v in value if isinstance(v, str)]


@dataclass
class PrivateIndex:
    """The fingerprints of a private split; build it with :meth:`build`."""

    n: int
    item_ids: list[str]
    ngrams: _Table
    strings: dict[int, _Table]
    """Distinctive strings by length in words."""
    short_items: list[str] = field(default_factory=list)
    """Items searched by their distinctive strings only (no n-gram left)."""
    unsearchable_items: list[str] = field(default_factory=list)
    """Items with neither n-grams nor distinctive strings: they can never match."""
    public_ngrams_removed: int = 0

    @classmethod
    def build(
        cls,
        private_texts: Mapping[str, str | Sequence[str]],
        public_texts: Iterable[str | bytes],
        n: int = DEFAULT_N,
        min_words: int = MIN_WORDS,
    ) -> PrivateIndex:
        """Index ``private_texts`` (item id -> its text, or its fields' texts, hashed
        separately so that no n-gram spans two fields) against ``public_texts`` (any number
        of texts, e.g. the public split's files, read once in blocks).

        ``n`` must be at least 2 and ``min_words`` at least 2 and below ``n``.
        """
        if n < 2 or not 2 <= min_words < n:
            raise ValueError(f"need n >= 2 and 2 <= min_words < n, got n={n}, min={min_words}")
        ids = list(private_texts)
        gram_h: list[np.ndarray] = []
        gram_o: list[np.ndarray] = []
        lines: dict[int, list[tuple[int, int, np.uint64]]] = {}  # m -> (item, m, hash)
        for idx, item in enumerate(ids):
            candidates: list[tuple[int, np.uint64]] = []
            for text in _fields(private_texts[item]):
                raw = _as_bytes(text)
                hashes = ngram_hashes(words(raw).hashes, n)
                gram_h.append(hashes)
                gram_o.append(np.full(len(hashes), idx, dtype=np.int64))
                for line in raw.splitlines():
                    w = words(line).hashes
                    if min_words <= len(w) < n:
                        candidates.append((len(w), ngram_hashes(w, len(w))[0]))
            for m, h in sorted(set(candidates), key=lambda c: -c[0])[: 4 * STRINGS_PER_ITEM]:
                lines.setdefault(m, []).append((idx, m, h))
        hashes = np.concatenate(gram_h) if gram_h else np.zeros(0, dtype=_U64)
        owners = np.concatenate(gram_o) if gram_o else np.zeros(0, dtype=np.int64)
        # One row per (n-gram, item).
        if len(hashes):
            pairs = np.unique(np.stack([hashes, owners.astype(_U64)], axis=1), axis=0)
            hashes, owners = pairs[:, 0], pairs[:, 1].astype(np.int64)

        # What the public texts share with the private items, one pass for every length.
        lengths = sorted({n, *lines})
        wanted = {m: _Table.of(*_line_arrays(lines[m])) for m in lines}
        wanted[n] = _Table.of(hashes, owners)
        public_hits: dict[int, set[int]] = {m: set() for m in lengths}
        for text in public_texts:
            for block in _blocks_of(_as_bytes(text)):
                wh = words(block).hashes
                for m in lengths:
                    probe = ngram_hashes(wh, m)
                    pos, _ = wanted[m].lookup(probe)
                    public_hits[m].update(np.unique(probe[pos]).tolist())

        keep = ~np.isin(hashes, np.fromiter(public_hits[n], dtype=_U64))
        removed_public = int((~keep).sum())
        hashes, owners = hashes[keep], owners[keep]
        uniq, counts = np.unique(hashes, return_counts=True)
        keep = ~np.isin(hashes, uniq[counts > 1])
        hashes, owners = hashes[keep], owners[keep]

        # Distinctive strings: not public, in one item only, the longest few per item.
        per_item: dict[int, list[tuple[int, np.uint64]]] = {}
        all_lines = [row for m in lines for row in lines[m]]
        # an item lists a line once (its candidates are a set): a count is a count of items
        line_counts = Counter((m, int(h)) for _, m, h in all_lines)
        for idx, m, h in all_lines:
            if int(h) in public_hits[m] or line_counts[(m, int(h))] > 1:
                continue
            per_item.setdefault(idx, []).append((m, h))
        string_rows: dict[int, list[tuple[int, int, np.uint64]]] = {}
        for idx, found in per_item.items():
            for m, h in sorted(found, key=lambda c: -c[0])[:STRINGS_PER_ITEM]:
                string_rows.setdefault(m, []).append((idx, m, h))
        strings = {m: _Table.of(*_line_arrays(rows)) for m, rows in string_rows.items()}

        with_grams = set(np.unique(owners).tolist())
        short = [ids[i] for i in range(len(ids)) if i not in with_grams and i in per_item]
        none = [ids[i] for i in range(len(ids)) if i not in with_grams and i not in per_item]
        return cls(
            n=n,
            item_ids=ids,
            ngrams=_Table.of(hashes, owners),
            strings=strings,
            short_items=short,
            unsearchable_items=none,
            public_ngrams_removed=removed_public,
        )

    # -- scanning ------------------------------------------------------------------------------
    def match_block(self, block: bytes) -> dict[str, tuple[int, int]]:
        """Item id -> the byte span ``(start, end)`` in ``block`` of its first match."""
        w = words(block)
        found: dict[int, tuple[int, int]] = {}
        for m, table in [(self.n, self.ngrams), *self.strings.items()]:
            pos, owners = table.lookup(ngram_hashes(w.hashes, m))
            for p, o in zip(pos.tolist(), owners.tolist(), strict=True):
                span = (int(w.starts[p]), int(w.ends[p + m - 1]))
                if o not in found or span < found[o]:
                    found[o] = span
        return {self.item_ids[o]: span for o, span in found.items()}

    def scan_text(self, text: str | bytes) -> set[str]:
        """The ids of the private items that ``text`` contains (see the module docstring)."""
        hits: set[str] = set()
        for block in _blocks_of(_as_bytes(text)):
            hits.update(self.match_block(block))
        return hits


def _line_arrays(rows: list[tuple[int, int, np.uint64]]) -> tuple[np.ndarray, np.ndarray]:
    return (
        np.array([h for _, _, h in rows], dtype=_U64),
        np.array([i for i, _, _ in rows], dtype=np.int64),
    )


def _blocks_of(data: bytes, size: int = BLOCK_BYTES) -> Iterator[bytes]:
    """``data`` in blocks of about ``size`` bytes cut at whitespace, each starting with the
    last :data:`_OVERLAP` bytes of the one before (cut at a separator too)."""
    if len(data) <= size:
        yield data
        return
    start = 0
    while start < len(data):
        end = min(len(data), start + size)
        if end < len(data):
            cut = _last_space(data, start + size // 2, end)
            end = cut + 1 if cut > start else end
        yield data[start:end]
        if end >= len(data):
            return
        back = _last_space(data, end - _OVERLAP, end - 1)
        start = back + 1 if back > start else end


def _last_space(data: bytes, lo: int, hi: int) -> int:
    """The position of the last space or newline in ``data[lo:hi]``; -1 without one."""
    return max(data.rfind(b" ", lo, hi), data.rfind(b"\n", lo, hi))


# -- files -------------------------------------------------------------------------------------
#: the bytes a binary's text may be made of (ASCII: in weights and other binary data a text
#: of non-ASCII bytes cannot be told from noise; such words lose their non-ASCII letters)
_PRINTABLE = np.zeros(256, dtype=bool)
_PRINTABLE[0x20:0x7F] = True
_PRINTABLE[[0x09, 0x0A, 0x0D]] = True
#: a binary's printable runs shorter than this are noise (as for ``strings``)
MIN_RUN = 8
#: git's loose object header: type, size, NUL
_GIT_OBJECT = re.compile(rb"^(blob|commit|tag|tree) (\d+)\x00")
#: format errors: the file is read as far as it decodes, then as raw bytes (never fatal)
_FORMAT_ERRORS = (
    EOFError,
    ValueError,
    zipfile.BadZipFile,
    tarfile.TarError,
    lzma.LZMAError,
    zlib.error,
    gzip.BadGzipFile,
)


@dataclass
class FileScan:
    """What :func:`scan_file` found in one file: each matched item's first match, as
    ``(member, snippet)`` (member: the archive member, or "" for the file itself)."""

    path: Path
    bytes_read: int = 0
    skipped: str | None = None
    """Why the file was not read (``not a regular file``: a symlink, a pipe...;
    ``unreadable: <error>``: the system refused to read it); None when it was."""
    truncated: bool = False
    members: int = 0
    hits: dict[str, tuple[str, str]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    """What was read otherwise than its format says (a corrupt archive read as raw bytes)."""
    errors: list[str] = field(default_factory=list)
    """Parts that could not be read at all (a git repository's corrupt objects): what was
    read is matched, and the scan is incomplete."""


def snippet(block: bytes, span: tuple[int, int], limit: int = 160) -> str:
    """The matched text at ``span`` in ``block`` (its first ``limit`` bytes), whitespace folded."""
    start, end = span
    text = block[start : min(end, start + limit)].decode("utf-8", "replace")
    return " ".join(text.split())


def _read_bounded(fh: IO[bytes], limit: int) -> tuple[bytes, bool]:
    """At most ``limit`` bytes of ``fh`` and whether there was more. A stream that stops
    decoding (a truncated or corrupt compressed file) raises :class:`_Partial` holding what
    decoded before."""
    chunks: list[bytes] = []
    got = 0
    try:
        while got <= limit:
            chunk = fh.read(min(CHUNK_BYTES, limit + 1 - got))
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
    except _FORMAT_ERRORS as err:
        raise _Partial(b"".join(chunks)[:limit], err) from err
    data = b"".join(chunks)
    return data[:limit], len(data) > limit


class _Partial(Exception):
    """A stream that stopped decoding after ``data``."""

    def __init__(self, data: bytes, err: BaseException) -> None:
        super().__init__(f"{type(err).__name__}: {err}")
        self.data = data


#: bytes read at a time (what a corrupt compressed stream loses of what it decoded)
CHUNK_BYTES = 256 * 2**10


def _runs(values: np.ndarray, ok: np.ndarray, min_run: int) -> bytes:
    """The ``values`` at the positions of ``ok`` in runs of at least ``min_run`` True
    values, each run followed by a newline (one pass, output as long as the runs)."""
    padded = np.concatenate(([False], ok, [False])).astype(np.int8)
    edges = np.diff(padded)
    starts, ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
    long = (ends - starts) >= min_run
    if not long.any():
        return b""
    starts, ends = starts[long], ends[long]
    marks = np.zeros(ok.size + 1, dtype=np.int8)
    marks[starts] += 1
    marks[ends] -= 1  # a run's end is never another's start: a False lies between
    keep = np.cumsum(marks[:-1], dtype=np.int8).astype(bool)
    out = np.where(keep, values, np.uint8(10))
    keep[np.minimum(ends, ok.size - 1)] = True  # the newline after each run
    return out[keep].tobytes() + b"\n"


def _text_of(data: bytes) -> bytes:
    """The bytes to scan of a file's content: as is for text (no NUL byte); for anything
    else (weights, pickles, NumPy arrays, SQLite pages, executables, images...) its runs of
    at least :data:`MIN_RUN` printable ASCII bytes, as ``strings`` would (a file whose first
    8 KiB hold no NUL: as is), and in both cases the same runs in UTF-16 and UTF-32 (little-
    and big-endian: a NumPy string array is UTF-32), each run on a line of its own. Text
    stored encrypted or encoded otherwise is not found."""
    if b"\x00" not in data:
        return data
    raw = np.frombuffer(data, dtype=np.uint8)
    # A text head (no NUL in its first 8 KiB) is read as it is, a binary by its runs; the
    # wide runs are read in both (a text header cannot hide a UTF-16 payload after it).
    text_head = b"\x00" not in data[:8192]
    out = [data + b"\n" if text_head else _runs(raw, _PRINTABLE[raw], MIN_RUN)]
    zero = raw == 0
    printable = _PRINTABLE[raw]
    for width in (2, 4):
        for offset in range(width):
            usable = (raw.size - offset) // width * width
            if usable < width * MIN_RUN:
                continue
            cols = [slice(offset + k, offset + usable, width) for k in range(width)]
            for pos in (0, width - 1):  # little-endian: the letter first; big-endian: last
                # One printable byte and width - 1 NULs, as strided views (no copies).
                ok = printable[cols[pos]].copy()
                for k in range(width):
                    if k != pos:
                        ok &= zero[cols[k]]
                if ok.any():
                    out.append(_runs(raw[cols[pos]], ok, MIN_RUN))
    return b"".join(out)


def _columnar_text(data: bytes, kind: str) -> bytes | None:
    """The string columns of a Parquet or Arrow file (as downloaded datasets are), or None
    without pyarrow."""
    try:
        import pyarrow as pa
        import pyarrow.ipc as ipc
        import pyarrow.parquet as pq
    except ImportError:
        return None
    try:
        if kind == "parquet":
            table = pq.read_table(io.BytesIO(data))
        else:
            try:
                table = ipc.open_file(pa.BufferReader(data)).read_all()
            except pa.ArrowInvalid:
                table = ipc.open_stream(pa.BufferReader(data)).read_all()
    except Exception:  # a truncated or odd file: fall back to its printable runs
        return None
    out = []
    for column in table.columns:
        if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
            out.extend(str(v) for v in column.to_pylist() if v is not None)
        else:
            out.append(str(column.to_pylist())[:10_000_000])
    return "\n".join(out).encode("utf-8", "replace")


_TAR_SUFFIXES = (".tar", ".tgz", ".tar.gz", ".tar.bz2", ".tbz2", ".tar.xz", ".txz")
_DECOMPRESS = ((b"\x1f\x8b", gzip.open), (b"BZh", bz2.open), (b"\xfd7zXZ", lzma.open))


def _is_zlib(head: bytes) -> bool:
    """A zlib stream's header (deflate, a window of at most 32 KiB, the check bits right):
    git's loose objects, ``zlib.compress`` output."""
    return (
        len(head) >= 2
        and head[0] & 0x0F == 8
        and head[0] >> 4 <= 7
        and ((head[0] << 8 | head[1]) % 31 == 0)
    )


class _Inflate:
    """A file-like reader of a zlib stream, its output bounded by the caller's reads."""

    def __init__(self, fh: IO[bytes]) -> None:
        self.fh = fh
        self.z = zlib.decompressobj()
        self.ended = False

    def read(self, size: int) -> bytes:
        out = b""
        while len(out) < size and not self.ended:
            data = self.z.unconsumed_tail or self.fh.read(CHUNK_BYTES)
            if not data:
                self.z.flush()
                self.ended = True
                break
            out += self.z.decompress(data, size - len(out))
            self.ended = self.z.eof
        return out


def is_container(head: bytes) -> bool:
    """Whether content starting with ``head`` (its first 512 bytes) is compressed or an
    archive, read member by member by :func:`file_texts` (rather than as it is)."""
    return (
        head.startswith((b"PK\x03\x04", *(magic for magic, _ in _DECOMPRESS)))
        or head[257:262] == b"ustar"
        or _is_zlib(head)
    )


def _members(path: Path, head: bytes, limit: int) -> Iterator[tuple[str, bytes, bool]]:
    """``(member name, content, truncated)`` of a file as :func:`scan_file` reads it, at most
    ``limit`` bytes in all (a git loose object: its content after its header). Archives inside
    archives are not opened. A member that stops decoding raises :class:`_Partial`."""
    if head.startswith(b"PK\x03\x04"):
        with zipfile.ZipFile(path) as zf:
            left = limit
            for info in zf.infolist():
                if info.is_dir() or left <= 0:
                    continue
                with zf.open(info) as fh:
                    data, cut = _read_bounded(fh, left)
                left -= len(data)
                yield info.filename, data, cut
        return
    if path.name.lower().endswith(_TAR_SUFFIXES) or head[257:262] == b"ustar":
        left = limit
        with tarfile.open(path, "r:*") as tf:
            for info in tf:
                member = tf.extractfile(info) if info.isfile() and left > 0 else None
                if member is None:
                    continue
                data, cut = _read_bounded(member, left)
                left -= len(data)
                yield info.name, data, cut
        return
    opener = next((op for magic, op in _DECOMPRESS if head.startswith(magic)), None)
    with path.open("rb") as raw:
        if _is_zlib(head):
            data, cut = _read_bounded(_Inflate(raw), limit)
            if m := _GIT_OBJECT.match(data[:64]):
                yield m.group(1).decode(), data[m.end() :], cut
                return
            yield "", data, cut
            return
        with opener(raw, "rb") if opener else raw as fh:
            data, cut = _read_bounded(fh, limit)
    yield "", data, cut


def match_content(scan: FileScan, member: str, data: bytes, index: PrivateIndex) -> None:
    """Match one member's ``data`` (Parquet and Arrow by their string columns, text as it
    is, anything else by :func:`_text_of`) against ``index`` into ``scan.hits``."""
    text = None
    if data.startswith(b"PAR1"):
        text = _columnar_text(data, "parquet")
    elif data.startswith((b"ARROW1", b"\xff\xff\xff\xff")):
        text = _columnar_text(data, "arrow")
    for block in _blocks_of(text if text is not None else _text_of(data)):
        for item, span in index.match_block(block).items():
            scan.hits.setdefault(item, (member, snippet(block, span)))


def file_texts(path: Path, max_bytes: int = MAX_FILE_BYTES) -> Iterator[tuple[str, bytes, bool]]:
    """``(member, content, truncated)`` of every part of a regular file that
    :func:`scan_file` reads (see there). A corrupt compressed file or archive yields what
    decoded, then the file's raw bytes as the member ``(raw)``. Raises ``OSError`` when the
    system refuses to read the file."""
    with path.open("rb") as fh:
        head = fh.read(512)
    try:
        yield from _members(path, head, max_bytes)
        return
    except _Partial as err:
        yield f"(decoded until {err})", err.data, False
    except _FORMAT_ERRORS as err:  # the archive's own structure is corrupt
        yield f"(not decoded: {type(err).__name__})", b"", False
    with path.open("rb") as fh:
        data, cut = _read_bounded(fh, max_bytes)
    yield "(raw)", data, cut


def scan_file(path: Path, index: PrivateIndex, max_bytes: int = MAX_FILE_BYTES) -> FileScan:
    """Scan one file for ``index``'s items, by its content whatever its name.

    Text files are read as they are; ``.gz``/``.bz2``/``.xz`` and zlib streams (git's loose
    objects) decompressed; zip and tar archives (``.jsonl.gz``, ``.tar.gz``, a PyTorch
    checkpoint ...) member by member; Parquet and Arrow files by their string columns (with
    pyarrow); any other file holding NUL bytes by its printable runs (:func:`_text_of`). At
    most ``max_bytes`` of (decompressed) content are read, the rest skipped and ``truncated``
    set; a corrupt compressed file or archive is read as far as it decodes, then as raw bytes
    (a note says so). Skipped, with the reason in ``skipped``: what is not a regular file
    (symlinks), and a file the system refuses to read (``unreadable: ...``). Never raises.
    """
    path = Path(path)
    scan = FileScan(path)
    try:
        if path.is_symlink() or not path.is_file():
            scan.skipped = "not a regular file"
            return scan
        for member, data, cut in file_texts(path, max_bytes):
            if member.startswith("("):  # a corrupt file, read as raw bytes
                scan.notes.append(member)
                member = ""
            scan.members += 1
            scan.bytes_read += len(data)
            scan.truncated |= cut
            match_content(scan, member, data, index)
    except (OSError, *_FORMAT_ERRORS) as err:
        scan.skipped = f"unreadable: {type(err).__name__}: {err}"[:300]
    return scan
