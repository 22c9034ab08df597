"""Content hashes of safetensors weights, and a strict reader of safetensors headers.

The hash covers tensor names, dtypes, shapes and bytes, read from the safetensors header and
data region directly, so it does not depend on the file's free-form metadata, the shard
layout or the order tensors were written in; it needs no torch and reads each byte once.

Weights come from untrusted submissions, so :func:`read_safetensors_header` checks every
field the safetensors format defines before anything trusts it, and every defect comes out
as :class:`MalformedWeights` (a ``ValueError``) with a message naming it: never a
``struct.error``, ``KeyError``, ``TypeError`` or ``RecursionError``.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_CHUNK = 1 << 20

#: The files that make up a model besides its weights: they change what it generates.
MODEL_FILE_PATTERNS = (
    "*.safetensors.index.json",
    "config.json",
    "generation_config.json",
    "tokenizer*",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.*",
    "merges.txt",
    "*.model",
    "*.tiktoken",
    "chat_template.*",
)

#: Bytes per element of each safetensors dtype a model can be loaded with (safetensors'
#: ``Dtype``; the sub-byte float formats are left out: no causal LM here is saved in them).
DTYPE_SIZES: dict[str, int] = {
    dtype: size
    for size, names in (
        (1, "BOOL U8 I8 F8_E5M2 F8_E4M3 F8_E5M2FNUZ F8_E4M3FNUZ F8_E8M0"),
        (2, "I16 U16 F16 BF16"),
        (4, "I32 U32 F32"),
        (8, "I64 U64 F64 C64"),
    )
    for dtype in names.split()
}
#: The header size safetensors itself refuses above (``MAX_HEADER_SIZE``).
MAX_HEADER_BYTES = 100_000_000
#: Deeper JSON than this is refused before parsing: Python's parser recurses once per level
#: and would raise ``RecursionError`` near 1000. Real configs and tokenizers nest < 10 deep.
MAX_JSON_DEPTH = 64
#: More dimensions than any tensor a model holds.
MAX_TENSOR_RANK = 16


class MalformedWeights(ValueError):
    """A safetensors file (or a weights directory) that does not follow the format."""


@dataclass(frozen=True)
class TensorInfo:
    """One tensor of a safetensors header; ``start``/``end`` are offsets into the data
    region (after the 8-byte length and the header), ``end - start`` its byte length."""

    dtype: str
    shape: tuple[int, ...]
    start: int
    end: int

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


_ESCAPE = re.compile(rb"\\.", re.S)
_STRING = re.compile(rb'"[^"]*"')
_NOT_BRACKET = bytes(b for b in range(256) if b not in b"[]{}")


def json_depth(data: bytes) -> int:
    """The deepest nesting of arrays and objects in JSON text ``data``, found without
    parsing (no recursion). Brackets inside strings do not count; for text that is not
    valid JSON the figure is approximate (the parser refuses such text anyway)."""
    brackets = _STRING.sub(b"", _ESCAPE.sub(b"", data)).translate(None, _NOT_BRACKET)
    depth = deepest = 0
    for byte in brackets:
        if byte in b"[{":
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth -= 1
    return deepest


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        dup = next(k for k, _ in pairs if k in seen or seen.add(k))  # type: ignore[func-returns-value]
        raise ValueError(f"duplicate key {dup!r}")
    return out


def loads_json(
    data: bytes, what: str, *, max_depth: int = MAX_JSON_DEPTH, unique_keys=False
) -> Any:
    """Parse JSON text from an untrusted file, refusing what would break the parser.

    Raises ``ValueError`` naming ``what`` for text that is not UTF-8, not JSON, nests deeper
    than ``max_depth`` (checked first, so ``RecursionError`` cannot happen), holds an
    integer too long for Python to read, or, with ``unique_keys``, repeats a key in an
    object (readers disagree on which copy wins).
    """
    depth = json_depth(data)
    if depth > max_depth:
        raise ValueError(f"{what} nests deeper than {max_depth} levels ({depth})")
    try:
        text = data.decode("utf-8")
        return json.loads(text, object_pairs_hook=_no_duplicates if unique_keys else None)
    except RecursionError:  # unreachable after the depth check; kept as a last guard
        raise ValueError(f"{what} nests too deeply") from None
    except ValueError as err:  # JSONDecodeError, UnicodeDecodeError, long ints, duplicates
        raise ValueError(f"{what} is not valid JSON ({err})") from None


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _tensor_info(file: str, name: str, entry: Any) -> TensorInfo:
    where = f"{file}: tensor {name!r}"
    if not isinstance(entry, dict):
        raise MalformedWeights(f"{where} is not an object")
    if set(entry) != {"dtype", "shape", "data_offsets"}:
        raise MalformedWeights(
            f"{where} must have exactly dtype, shape and data_offsets (has {sorted(entry)})"
        )
    dtype, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
    if not isinstance(dtype, str) or dtype not in DTYPE_SIZES:
        raise MalformedWeights(f"{where} has unknown dtype {str(dtype)[:40]!r}")
    if (
        not isinstance(shape, list)
        or len(shape) > MAX_TENSOR_RANK
        or not all(_is_int(d) and d >= 0 for d in shape)
    ):
        raise MalformedWeights(f"{where}: shape must be a list of non-negative integers")
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(map(_is_int, offsets))):
        raise MalformedWeights(f"{where}: data_offsets must be a pair of integers")
    start, end = offsets
    if not 0 <= start <= end:
        raise MalformedWeights(f"{where}: data_offsets {offsets} are not 0 <= start <= end")
    info = TensorInfo(dtype, tuple(shape), start, end)
    if info.numel * DTYPE_SIZES[dtype] != end - start:
        raise MalformedWeights(
            f"{where}: shape {shape} of {dtype} needs {info.numel * DTYPE_SIZES[dtype]} bytes,"
            f" data_offsets give {end - start}"
        )
    return info


def read_safetensors_header(path: Path) -> tuple[int, dict[str, TensorInfo]]:
    """The offset of the data region and the tensors of safetensors file ``path``, checked.

    Checks what the safetensors loader checks and a little more: an 8-byte header length
    present and within the file and :data:`MAX_HEADER_BYTES`; a header that is a JSON object
    (starting with ``{``, UTF-8, at most :data:`MAX_JSON_DEPTH` deep, no repeated names);
    ``__metadata__``, if present, a string-to-string object; every other entry an object with
    a known ``dtype``, a ``shape`` of non-negative integers and ``data_offsets``
    ``[start, end]`` with ``end - start`` equal to the shape's byte size; and the tensors
    tiling the data region exactly (no overlap, no gap, nothing after the last). A file
    with no tensors is valid (an empty data region). Raises :class:`MalformedWeights`, or
    ``OSError`` if the file cannot be read.
    """
    path = Path(path)
    with path.open("rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        prefix = fh.read(8)
        if len(prefix) < 8:
            raise MalformedWeights(f"{path.name}: only {len(prefix)} bytes, not a safetensors file")
        (header_len,) = struct.unpack("<Q", prefix)
        if header_len > MAX_HEADER_BYTES:
            raise MalformedWeights(
                f"{path.name}: safetensors header too large ({header_len} bytes)"
            )
        if 8 + header_len > size:
            raise MalformedWeights(
                f"{path.name}: header length {header_len} runs past the end of the file"
                f" ({size} bytes): the file is truncated or not safetensors"
            )
        raw = fh.read(header_len)
    if len(raw) != header_len:
        raise MalformedWeights(f"{path.name}: truncated while reading its header")
    if not raw.startswith(b"{"):
        raise MalformedWeights(f"{path.name}: the safetensors header must be a JSON object")
    try:
        header = loads_json(raw, f"{path.name}: the safetensors header", unique_keys=True)
    except ValueError as err:
        raise MalformedWeights(str(err)) from None
    if not isinstance(header, dict):
        raise MalformedWeights(f"{path.name}: the safetensors header must be a JSON object")
    metadata = header.pop("__metadata__", None)
    if metadata is not None and not (
        isinstance(metadata, dict) and all(isinstance(v, str) for v in metadata.values())
    ):
        raise MalformedWeights(f"{path.name}: __metadata__ must map strings to strings")
    tensors = {name: _tensor_info(path.name, name, entry) for name, entry in header.items()}
    data_len = size - 8 - header_len
    at = 0
    for name, info in sorted(tensors.items(), key=lambda t: (t[1].start, t[1].end)):
        if info.start != at:
            what = "overlaps the tensor before it" if info.start < at else "leaves a gap before it"
            raise MalformedWeights(f"{path.name}: tensor {name!r} {what} (offset {info.start})")
        at = info.end
    if at != data_len:
        raise MalformedWeights(
            f"{path.name}: the tensors cover {at} bytes of a {data_len}-byte data region:"
            " the file is truncated or has trailing bytes"
        )
    return 8 + header_len, tensors


def weights_hash(model_dir: Path) -> str:
    """SHA-256 over every tensor in ``model_dir/*.safetensors``, in tensor-name order.

    Raises ``ValueError`` (:class:`MalformedWeights`) if the directory holds no safetensors
    file or a file is malformed in any way :func:`read_safetensors_header` checks (truncated,
    bad header, bad offsets, ...), and ``OSError`` only for an I/O failure. Two directories get
    the same hash exactly when they hold the same tensors byte for byte.
    """
    files = sorted(Path(model_dir).glob("*.safetensors"))
    if not files:
        raise MalformedWeights(f"no .safetensors files in {model_dir}")
    entries: list[tuple[str, Path, int, TensorInfo]] = []
    for f in files:
        base, header = read_safetensors_header(f)
        entries += [(name, f, base, info) for name, info in header.items()]
    digest = hashlib.sha256()
    for name, f, base, info in sorted(entries, key=lambda e: e[0]):
        # the same bytes as before TensorInfo existed: hashes in old ledgers stay comparable
        digest.update(json.dumps([name, info.dtype, list(info.shape)]).encode())
        with f.open("rb") as fh:
            fh.seek(base + info.start)
            left = info.end - info.start
            while left > 0:
                chunk = fh.read(min(_CHUNK, left))
                if not chunk:  # the file shrank after its header was read
                    raise MalformedWeights(f"{f.name}: truncated tensor {name}")
                digest.update(chunk)
                left -= len(chunk)
    return digest.hexdigest()


def model_files(model_dir: Path) -> list[Path]:
    """The top-level non-weight files of ``model_dir`` matching :data:`MODEL_FILE_PATTERNS`."""
    found: set[Path] = set()
    for pattern in MODEL_FILE_PATTERNS:
        found.update(p for p in Path(model_dir).glob(pattern) if p.is_file())
    return sorted(found)


def model_fingerprint(model_dir: Path, weights_digest: str | None = None) -> str:
    """SHA-256 over the weights hash and the bytes of config, generation config and tokenizer
    files: two directories with equal fingerprints generate the same text. Pass
    ``weights_digest`` when :func:`weights_hash` was already computed."""
    digest = hashlib.sha256((weights_digest or weights_hash(model_dir)).encode())
    for f in model_files(model_dir):
        digest.update(f.name.encode() + b"\0" + f.read_bytes() + b"\0")
    return digest.hexdigest()
