"""Content hashes of safetensors weights.

The hash covers tensor names, dtypes, shapes and bytes, read from the safetensors header and
data region directly, so it does not depend on the file's free-form metadata, the shard
layout or the order tensors were written in; it needs no torch and reads each byte once.
"""

from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path

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


def _tensor_index(path: Path) -> tuple[int, dict]:
    with path.open("rb") as fh:
        (header_len,) = struct.unpack("<Q", fh.read(8))
        if header_len > 100_000_000:
            raise ValueError(f"{path.name}: safetensors header too large")
        header = json.loads(fh.read(header_len))
    header.pop("__metadata__", None)
    return 8 + header_len, header


def weights_hash(model_dir: Path) -> str:
    """SHA-256 over every tensor in ``model_dir/*.safetensors``, in tensor-name order.

    Raises ``ValueError`` if the directory holds no safetensors file or a file is malformed.
    Two directories get the same hash exactly when they hold the same tensors byte for byte.
    """
    files = sorted(Path(model_dir).glob("*.safetensors"))
    if not files:
        raise ValueError(f"no .safetensors files in {model_dir}")
    entries: list[tuple[str, Path, int, dict]] = []
    for f in files:
        base, header = _tensor_index(f)
        entries += [(name, f, base, meta) for name, meta in header.items()]
    digest = hashlib.sha256()
    for name, f, base, meta in sorted(entries, key=lambda e: e[0]):
        start, end = meta["data_offsets"]
        digest.update(json.dumps([name, meta["dtype"], meta["shape"]]).encode())
        with f.open("rb") as fh:
            fh.seek(base + start)
            left = end - start
            while left > 0:
                chunk = fh.read(min(_CHUNK, left))
                if not chunk:
                    raise ValueError(f"{f.name}: truncated tensor {name}")
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
