"""The private-split index and the file scan: hits through any formatting, public-shared text
ignored, compressed members read, binaries skipped, short items searched exactly."""

from __future__ import annotations

import bz2
import gzip
import io
import json
import lzma
import tarfile
import zipfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from agent2rl.integrity.ngrams import BLOCK_BYTES, PrivateIndex, normalize, scan_file

TEMPLATE = (
    "There were {a} marbles on the shelf and {b} were sold by the kind old shopkeeper early"
    " this morning before the market opened"
)
PRIVATE = {
    "p1": [
        "Ava keeps 37 purple stickers inside a shoebox under her bed and gives 12 to her cousin"
        " Milo every Sunday. How many stickers are left after three Sundays?",
        "37 - 36 = 1\n#### 1",
    ],
    "p2": [TEMPLATE.format(a=5, b=3) + ". How many marbles are left?", "5 - 3 = 2"],
    "short": ["Name the capital city of Burkina Faso please", "Ouagadougou"],
    "tiny": ["2 + 2?", "4"],
}
PUBLIC = [TEMPLATE.format(a=9, b=4) + ". How many marbles are left?", "some other public text"]


@pytest.fixture(scope="module")
def index() -> PrivateIndex:
    return PrivateIndex.build(PRIVATE, PUBLIC, n=13)


def test_normalisation_ignores_case_punctuation_and_escapes() -> None:
    assert normalize('Hello,  WORLD!\\n"x"\tfoo_bar\\u00e9 (née)') == "hello world x foo bar née"


def test_items_are_found_through_reformatting(index) -> None:
    text = PRIVATE["p1"][0].upper().replace(" ", "  \n ")
    assert index.scan_text("prefix " + text + " suffix") == {"p1"}
    as_json = json.dumps({"messages": [{"content": "\n".join(PRIVATE["p1"])}]})
    assert index.scan_text(as_json) == {"p1"}
    # Twelve words of it are not enough: no 13-gram.
    words = PRIVATE["p1"][0].split()
    assert index.scan_text(" ".join(words[:12])) == set()


def test_text_shared_with_the_public_split_is_no_evidence(index) -> None:
    assert index.public_ngrams_removed > 0
    # The template with other numbers (the public item) matches nothing...
    assert index.scan_text(PUBLIC[0]) == set()
    # ...and p2 is only found by what is its own (its numbers), not by the template.
    assert index.scan_text(TEMPLATE.format(a=7, b=1)) == set()
    assert index.scan_text(PRIVATE["p2"][0]) == {"p2"}


def test_short_items_fall_back_to_exact_strings_and_say_so(index) -> None:
    assert index.short_items == ["short"] and index.unsearchable_items == ["tiny"]
    assert index.scan_text("q: name the CAPITAL city of burkina-faso, please!") == {"short"}
    assert index.scan_text("name the capital city of burkina faso") == set()  # one word short
    assert index.scan_text("2 + 2? 4") == set()


def test_a_match_across_a_block_edge_is_found(index) -> None:
    filler = b"lorem ipsum " * (BLOCK_BYTES // 12)
    text = filler[: BLOCK_BYTES - 40] + b" " + PRIVATE["p1"][0].encode() + b" " + filler[:1000]
    assert len(text) > BLOCK_BYTES
    assert index.scan_text(text) == {"p1"}


def _write_all(root: Path, payload: bytes) -> dict[str, Path]:
    files = {
        "plain": root / "train.jsonl",
        "gz": root / "train.jsonl.gz",
        "bz2": root / "data.txt.bz2",
        "xz": root / "data.txt.xz",
        "zip": root / "bundle.zip",
        "targz": root / "bundle.tar.gz",
        "parquet": root / "test-00000.parquet",
        "elf": root / "a.out",
        "weights": root / "model.safetensors",
        "png": root / "plot.png",
    }
    files["plain"].write_bytes(payload)
    files["gz"].write_bytes(gzip.compress(payload))
    files["bz2"].write_bytes(bz2.compress(payload))
    files["xz"].write_bytes(lzma.compress(payload))
    with zipfile.ZipFile(files["zip"], "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("readme.txt", "nothing here")
        zf.writestr("inner/items.jsonl", payload)
    with tarfile.open(files["targz"], "w:gz") as tf:
        info = tarfile.TarInfo("dump/items.txt")
        info.size = len(payload)
        tf.addfile(info, io.BytesIO(payload))
    pq.write_table(pa.table({"question": [payload.decode()], "n": [1]}), files["parquet"])
    files["elf"].write_bytes(b"\x7fELF\x02\x01\x01" + payload)
    files["weights"].write_bytes(payload)
    files["png"].write_bytes(b"\x89PNG\r\n\x1a\n" + payload)
    return files


def test_compressed_members_and_binaries_are_read(index, tmp_path) -> None:
    payload = json.dumps({"q": PRIVATE["p1"][0], "a": PRIVATE["p1"][1]}).encode() + b"\n"
    files = _write_all(tmp_path, payload)
    for kind in ("plain", "gz", "bz2", "xz", "zip", "targz", "parquet"):
        scan = scan_file(files[kind], index)
        assert scan.skipped is None and set(scan.hits) == {"p1"}, kind
    assert scan_file(files["zip"], index).hits["p1"][0] == "inner/items.jsonl"
    assert scan_file(files["targz"], index).hits["p1"][0] == "dump/items.txt"
    assert "purple stickers" in scan_file(files["gz"], index).hits["p1"][1].lower()
    # Issue 38, item 6: no file is skipped for its suffix or magic bytes any more.
    for kind in ("elf", "weights", "png"):
        scan = scan_file(files[kind], index)
        assert scan.skipped is None and set(scan.hits) == {"p1"}, kind


def test_printable_runs_of_unknown_binaries_are_read(index, tmp_path) -> None:
    path = tmp_path / "cache.arrow-ish"
    path.write_bytes(b"\x00\x01\x02\x00" * 100 + PRIVATE["p1"][0].encode() + b"\x00\x00")
    assert set(scan_file(path, index).hits) == {"p1"}


def test_size_bound_and_unreadable_files(index, tmp_path) -> None:
    path = tmp_path / "big.txt"
    path.write_bytes(b"x " * 5000 + PRIVATE["p1"][0].encode())
    scan = scan_file(path, index, max_bytes=4096)
    assert scan.truncated and scan.hits == {} and scan.bytes_read == 4096
    bomb = tmp_path / "bomb.gz"
    bomb.write_bytes(gzip.compress(b"a " * 10_000_000))
    scan = scan_file(bomb, index, max_bytes=1 << 20)
    assert scan.truncated and scan.bytes_read == 1 << 20
    # A corrupt archive is read as raw bytes, with a note: what it holds is still found.
    broken = tmp_path / "broken.gz"
    broken.write_bytes(b"\x1f\x8b\x08garbage " + PRIVATE["p1"][0].encode())
    scan = scan_file(broken, index)
    assert scan.skipped is None and set(scan.hits) == {"p1"} and scan.notes
    folder = tmp_path / "folder"
    folder.mkdir()
    assert scan_file(folder, index).skipped == "not a regular file"
    link = tmp_path / "link.txt"
    link.symlink_to(path)
    assert scan_file(link, index).skipped == "not a regular file"


def test_build_rejects_bad_parameters() -> None:
    with pytest.raises(ValueError):
        PrivateIndex.build({"a": "x"}, [], n=5, min_words=5)


def test_text_in_other_encodings_and_containers_is_found(index, tmp_path) -> None:
    """Issue 38, item 6: a private item saved as a NumPy string array (UTF-32), a pickle, a
    UTF-16 text file (with its BOM, and big-endian), a zlib stream, and a UTF-16 payload
    after a text header, under any suffix."""
    import pickle
    import zlib

    import numpy as np

    question = PRIVATE["p1"][0]
    np.save(tmp_path / "arr.npy", np.array([question, "other"]))
    files = {
        "arr.npy": None,
        "notes.pkl": pickle.dumps({"q": [question]}),
        "utf16.txt": question.encode("utf-16"),
        "utf16be.dat": question.encode("utf-16-be"),
        "blob.z": zlib.compress(question.encode()),
        "mixed.log": b"plain header line\n" * 600 + b"\x00\x00" + question.encode("utf-16-le"),
    }
    for name, data in files.items():
        if data is not None:
            (tmp_path / name).write_bytes(data)
        scan = scan_file(tmp_path / name, index)
        assert scan.skipped is None and set(scan.hits) == {"p1"}, name
