"""The search tasks' data in the task store: deepsearch-lite's generated set, and
DeepSearchQA's questions (from the hub, or imported with ``agent2rl data import
deepsearchqa DIR``).

Layout under a set's root (written into a temporary sibling and swapped in whole)::

    corpus/corpus.jsonl         the BM25 corpus (id, title, text[, url]); optional for
                                deepsearchqa (an imported local corpus)
    private/questions.jsonl     graded questions (game_id, question, answer, answer_type,
                                category, ...)
    private/corpus.sha256       the corpus's digest (the private split's digest, which keys
                                comparable scores, changes with the corpus)
    validation/questions.jsonl  the harness's own tuning questions
    public/questions.jsonl      the agent's questions, with their answers
    public/walkthroughs.jsonl   the expert's walkthroughs (deepsearch-lite)
    manifest.json

DeepSearchQA's split is the reference's (RD-Agent's autorl_bench): the eval split's rows in
file order, shuffled as the ``datasets`` library's ``Dataset.shuffle(seed=42)`` shuffles,
which is ``numpy.random.default_rng(42).permutation(n)`` (:func:`dsqa_order`; a test pins
the two equal, and the first indices for n = 900); the first 100 are public (the
reference's train split, shown with answers), the next 200 graded. The validation split is
the harness's own: the next 100, outside the reference's 300 (the other 500 are unused). An
import of fewer than 400 rows (a subset, a test fixture) is split in thirds in the same
order (public, graded, validation) and the manifest says it is not the official setting.
(Task version 1 shuffled with ``random.Random(42)`` and took the graded split first: other
questions in every split.)
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import random
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

from agent2rl.errors import UserError
from agent2rl.files import write_json_atomic, write_jsonl
from agent2rl.tasks.deepsearch.games import expert_walkthrough
from agent2rl.tasks.deepsearch.generate_lite import World, generate_world
from agent2rl.tasks.deepsearch.protocol import SET, SINGLE, EpisodeFormat
from agent2rl.tasks.deepsearch.search import BM25Backend
from agent2rl.tasks.shared.store import MANIFEST, building, read_rows

QUESTIONS = "questions.jsonl"
WALKTHROUGHS = "walkthroughs.jsonl"
CORPUS = "corpus.jsonl"

DSQA_REPO = "google/deepsearchqa"
DSQA_SPLIT = "eval"
#: the seed of DeepSearchQA's split shuffle (the reference's ``Dataset.shuffle(seed=42)``)
DSQA_SPLIT_SEED = 42
#: how the rows are shuffled (in the manifest: a store split another way is rebuilt)
DSQA_SPLIT_METHOD = "numpy-default_rng-permutation"
DSQA_PUBLIC = 100
DSQA_GRADED = 200
DSQA_VALIDATION = 100
DSQA_SIZE = 900
#: the columns of google/deepsearchqa
DSQA_COLUMNS = ("problem", "problem_category", "answer", "answer_type")


def corpus_file(root: Path) -> Path:
    """The corpus file of a store rooted at ``root`` (it may not exist for deepsearchqa)."""
    return root / "corpus" / CORPUS


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else "none"


# -- deepsearch-lite -----------------------------------------------------------------------
def lite_splits(
    seed: int, n_regions: int, n_eval_regions: int, n_validation_regions: int
) -> tuple[list[str], list[str], list[str]]:
    """The region ids of the graded, validation and public splits: the regions shuffled
    with ``seed``, then taken in that order."""
    if n_eval_regions + n_validation_regions >= n_regions:
        raise ValueError("the graded and validation regions leave no public region")
    regions = [f"r{r:02d}" for r in range(n_regions)]
    random.Random(f"deepsearch-lite-splits:{seed}").shuffle(regions)
    a, b = n_eval_regions, n_eval_regions + n_validation_regions
    return regions[:a], regions[a:b], regions[b:]


def solved_questions(
    world: World, fmt: EpisodeFormat, top_k: int
) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(question row, walkthrough) of every question of ``world`` the expert solves within
    ``fmt`` searching ``top_k`` results (:func:`~.games.expert_walkthrough`), in order; a
    row's ``game_id`` is ``qNNNN``, its position among all of the world's questions."""
    backend = BM25Backend(world.documents)
    rows = [{"game_id": f"q{i:04d}", **q} for i, q in enumerate(world.questions)]
    walks = [(row, expert_walkthrough(backend, row, fmt, top_k)) for row in rows]
    return [(row, walk) for row, walk in walks if walk is not None]


def build_lite_store(
    root: Path,
    seed: int,
    n_regions: int,
    n_eval_regions: int,
    n_validation_regions: int,
    fmt: EpisodeFormat,
    top_k: int,
) -> dict[str, Any]:
    """Generate the world of ``seed`` and write the store of the module docstring under
    ``root``: every question the expert solves within ``fmt`` (the others are dropped), split
    by region, with the walkthroughs of the public ones. Returns the manifest."""
    world = generate_world(seed, n_regions)
    private_r, validation_r, _ = lite_splits(seed, n_regions, n_eval_regions, n_validation_regions)
    region_split = {r: "private" for r in private_r} | {r: "validation" for r in validation_r}
    splits: dict[str, list[dict[str, Any]]] = {"private": [], "validation": [], "public": []}
    walkthroughs = []
    solved = solved_questions(world, fmt, top_k)
    for row, walk in solved:
        split = region_split.get(row["region"], "public")
        splits[split].append(row)
        if split == "public":
            walkthroughs.append(walk)
    with building(root) as tmp:
        write_jsonl(corpus_file(tmp), world.documents)
        for split, rows in splits.items():
            write_jsonl(tmp / split / QUESTIONS, rows)
        write_jsonl(tmp / "public" / WALKTHROUGHS, walkthroughs)
        (tmp / "private" / "corpus.sha256").write_text(_digest(corpus_file(tmp)) + "\n")
        manifest = {
            "seed": seed,
            "regions": n_regions,
            "documents": len(world.documents),
            **{s: len(r) for s, r in splits.items()},
            "walkthroughs": len(walkthroughs),
            "dropped_unsolvable": len(world.questions) - len(solved),
            "answer_types": dict(Counter(q["answer_type"] for q in world.questions)),
        }
        write_json_atomic(tmp / MANIFEST, manifest)
    return manifest


# -- deepsearchqa --------------------------------------------------------------------------
def convert_dsqa(rows: list[dict[str, Any]], source: str) -> list[dict[str, Any]]:
    """DeepSearchQA rows -> question rows (``game_id`` ``dsqa-NNN`` by file position,
    ``index``, ``question``, ``answer``, ``answer_type``, ``category``). :class:`UserError`
    naming the first row without a problem or an answer."""
    out = []
    for i, row in enumerate(rows):
        problem, answer = row.get("problem"), row.get("answer")
        if not isinstance(problem, str) or not problem.strip() or answer is None:
            raise UserError(
                f"{source}: row {i} is not in DeepSearchQA's schema ({', '.join(DSQA_COLUMNS)})"
                f": {json.dumps(row, default=str)[:200]}"
            )
        out.append(
            {
                "game_id": f"dsqa-{i:03d}",
                "index": i,
                "question": problem.strip(),
                "answer": str(answer).strip(),
                # DeepSearchQA's ``Single Answer`` / ``Set Answer``
                "answer_type": SET if "set" in str(row.get("answer_type")).lower() else SINGLE,
                "category": str(row.get("problem_category") or "uncategorized"),
            }
        )
    return out


def dsqa_order(n: int, seed: int = DSQA_SPLIT_SEED) -> list[int]:
    """The row order of ``datasets.Dataset.shuffle(seed=seed)`` on ``n`` rows:
    ``numpy.random.default_rng(seed).permutation(n)`` (what ``datasets`` draws when given a
    seed and no generator), without needing ``datasets`` to split."""
    import numpy as np

    return [int(i) for i in np.random.default_rng(seed).permutation(n)]


def split_dsqa(
    rows: list[dict[str, Any]],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]], bool]:
    """(graded, public, validation, official) as in the module docstring: public first,
    then graded, then validation, in :func:`dsqa_order`."""
    shuffled = [rows[i] for i in dsqa_order(len(rows))]
    n = len(rows)
    if n >= DSQA_GRADED + DSQA_PUBLIC + DSQA_VALIDATION:
        a, b, c = DSQA_PUBLIC, DSQA_GRADED, DSQA_VALIDATION
    else:
        a = c = n // 3
        b = n - a - c
    public, graded, validation = shuffled[:a], shuffled[a : a + b], shuffled[a + b : a + b + c]
    return graded, public, validation, n == DSQA_SIZE


def read_table(path: Path) -> list[dict[str, Any]]:
    """Rows of a CSV file, or of a parquet, JSON list or JSON-lines one (:func:`read_rows`);
    :class:`UserError` naming a file that does not read."""
    if path.suffix != ".csv":
        return read_rows(path)
    try:
        with open(path, newline="", encoding="utf-8") as fh:
            return list(csv.DictReader(fh))
    except Exception as err:  # csv raises several kinds for a corrupt file
        raise UserError(f"could not read {path}: {type(err).__name__}: {err}") from None


def _columns(path: Path) -> set[str]:
    """The column names of a table file (cheaply: the header or the first row)."""
    try:
        if path.suffix == ".parquet":
            import pyarrow.parquet as pq

            return set(pq.read_schema(path).names)
        with open(path, encoding="utf-8") as fh:
            if path.suffix == ".csv":
                return set(next(csv.reader(fh), []))
            if path.suffix == ".jsonl":
                return set(json.loads(fh.readline() or "{}"))
        rows = read_table(path)
        return set(rows[0]) if rows else set()
    except (OSError, ValueError, UnicodeDecodeError, UserError):
        return set()


def find_dsqa_files(source: Path) -> tuple[Path, Path | None]:
    """The question file under ``source`` (recursively: the one CSV, parquet, JSON or
    JSON-lines file with ``problem`` and ``answer`` columns) and the optional local corpus
    (a ``corpus.jsonl`` of ``title`` / ``text`` rows). :class:`UserError` naming what is
    missing or ambiguous."""
    source = Path(source).expanduser()
    if not source.is_dir():
        raise UserError(f"{source} is not a directory: pass the folder holding the files")
    files = sorted(p for p in source.rglob("*") if p.is_file())
    tables = [
        p
        for p in files
        if p.suffix in (".csv", ".parquet", ".json", ".jsonl")
        and p.name != CORPUS
        and {"problem", "answer"} <= _columns(p)
    ]
    if not tables:
        raise UserError(
            f"no DeepSearchQA questions under {source}: add the {DSQA_REPO} dataset's file "
            f"(split {DSQA_SPLIT}, columns {', '.join(DSQA_COLUMNS)}) as CSV, parquet or JSON"
        )
    if len(tables) > 1:
        raise UserError(
            f"several question files under {source}: {', '.join(map(str, tables))}; keep one"
        )
    corpora = [p for p in files if p.name == CORPUS]
    return tables[0], corpora[0] if corpora else None


def write_dsqa_store(
    root: Path, rows: list[dict[str, Any]], corpus: Path | None, source: str
) -> str:
    """Write DeepSearchQA's splits (and the local corpus, when given) under ``root``,
    replacing earlier data whole; returns a summary line."""
    questions = convert_dsqa(rows, source)
    graded, public, validation, official = split_dsqa(questions)
    with building(root) as tmp:
        write_jsonl(tmp / "private" / QUESTIONS, graded)
        write_jsonl(tmp / "public" / QUESTIONS, public)
        write_jsonl(tmp / "validation" / QUESTIONS, validation)
        if corpus is not None:
            corpus_file(tmp).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(corpus, corpus_file(tmp))
        (tmp / "private" / "corpus.sha256").write_text(_digest(corpus_file(tmp)) + "\n")
        manifest = {
            "source": source,
            "rows": len(questions),
            "private": len(graded),
            "public": len(public),
            "validation": len(validation),
            "split_seed": DSQA_SPLIT_SEED,
            "split_method": DSQA_SPLIT_METHOD,
            "official_sizes": official,
            "local_corpus": corpus is not None,
            "answer_types": dict(Counter(q["answer_type"] for q in questions)),
        }
        write_json_atomic(tmp / MANIFEST, manifest)
    note = "" if official else f" (not the official {DSQA_SIZE} rows: a subset?)"
    where = "with a local BM25 corpus" if corpus is not None else "without a local corpus"
    return (
        f"deepsearchqa: {len(graded)} graded / {len(public)} public / {len(validation)} "
        f"validation questions from {source}{note}, {where}"
    )


def download_dsqa(root: Path) -> str:
    """Fetch DeepSearchQA from the hub through ``datasets`` into ``root``;
    :class:`UserError` naming the offline import when the hub cannot be reached."""
    fix = (
        "On a machine without network, fetch the dataset elsewhere and run: agent2rl data "
        f"import deepsearchqa DIR (DIR holding the {DSQA_REPO} file, optionally a corpus.jsonl)"
    )
    if os.environ.get("AGENT2RL_OFFLINE"):
        raise UserError(f"deepsearchqa's data is not in the task store (offline). {fix}")
    try:
        from datasets import load_dataset

        data = load_dataset(DSQA_REPO, split=DSQA_SPLIT)
    except Exception as err:
        raise UserError(
            f"deepsearchqa's data is not in the task store and the hub could not be reached "
            f"({type(err).__name__}). {fix}"
        ) from None
    return write_dsqa_store(root, [dict(r) for r in data], None, f"{DSQA_REPO}:{DSQA_SPLIT}")
