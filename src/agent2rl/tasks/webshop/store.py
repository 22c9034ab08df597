"""A WebShop task's data in the task store, built from a catalog folder, and the import of
the official files (``agent2rl data import webshop DIR``).

Layout under a set's root (written into a temporary sibling and swapped in whole)::

    catalog/            the three catalog files, in WebShop's formats
    private/goals.jsonl       graded goals (game_id, goal fields)
    private/catalog.sha256    the catalog's digest: the private split's digest (which keys
                              comparable scores) changes with the catalog
    validation/goals.jsonl    the harness's own tuning goals
    public/goals.jsonl        the agent's goals
    public/walkthroughs.jsonl the expert's walkthroughs of public goals
    manifest.json

The grader, the validation runs and the rollout service all open their split's goals in the
shop of ``catalog/`` (:func:`catalog_dir`).
"""

from __future__ import annotations

import hashlib
import itertools
import shutil
from pathlib import Path
from typing import Any

from agent2rl.dataset import PreparedTask
from agent2rl.errors import UserError
from agent2rl.files import write_json_atomic, write_jsonl
from agent2rl.tasks.shared.store import MANIFEST, building
from agent2rl.tasks.webshop.catalog import (
    ATTRIBUTES_FILE,
    CATALOG_FILES,
    HUMAN_FILE,
    PRODUCTS_FILE,
    load_catalog,
)
from agent2rl.tasks.webshop.engine import Shop
from agent2rl.tasks.webshop.splits import expert_walkthrough, split_goals


def catalog_dir(prepared: PreparedTask) -> Path:
    """The catalog folder of a prepared WebShop task (beside its splits)."""
    return prepared.private.parent / "catalog"


def catalog_digest(folder: Path) -> str:
    """sha256 over the catalog files' names and bytes."""
    h = hashlib.sha256()
    for name in CATALOG_FILES:
        path = folder / name
        h.update(name.encode() + b"\0")
        if path.exists():
            h.update(path.read_bytes())
        h.update(b"\0")
    return h.hexdigest()


def build_store(
    source: Path,
    root: Path,
    n_eval: int,
    n_validation: int,
    n_walkthroughs: int,
    max_steps: int,
    with_human: bool = True,
) -> dict[str, Any]:
    """Copy the catalog in ``source`` into ``root/catalog`` and write the splits and up to
    ``n_walkthroughs`` expert walkthroughs (of the first public goals that have one, each at
    most ``max_steps`` actions) as in the module docstring; returns the manifest. ``root``
    is replaced whole once everything is written."""
    with building(root) as tmp:
        cat = tmp / "catalog"
        cat.mkdir()
        for name in CATALOG_FILES:
            if (source / name).exists():
                shutil.copyfile(source / name, cat / name)
        shop = Shop(load_catalog(cat))
        splits = split_goals(shop.catalog, n_eval, n_validation, with_human=with_human)
        played = (expert_walkthrough(shop, goal, max_steps) for goal in splits.public)
        walkthroughs = list(itertools.islice((w for w in played if w is not None), n_walkthroughs))
        for split, rows in vars(splits).items():  # private, validation, public
            write_jsonl(tmp / split / "goals.jsonl", rows)
        write_jsonl(tmp / "public" / "walkthroughs.jsonl", walkthroughs)
        (tmp / "private" / "catalog.sha256").write_text(catalog_digest(cat) + "\n")
        manifest = {
            "products": len(shop.catalog.products),
            **{split: len(rows) for split, rows in vars(splits).items()},
            "walkthroughs": len(walkthroughs),
        }
        write_json_atomic(tmp / MANIFEST, manifest)
    return manifest


def find_webshop_files(source: Path) -> Path:
    """The folder under ``source`` (itself included) holding WebShop's
    ``items_shuffle_1000.json`` and ``items_ins_v2_1000.json`` (``items_human_ins.json``
    beside them is optional); :class:`UserError` naming the files if none does."""
    source = Path(source).expanduser()
    if not source.is_dir():
        raise UserError(f"{source} is not a directory: pass the folder holding WebShop's data")
    for d in [source, *sorted(p for p in source.rglob("*") if p.is_dir())]:
        if (d / PRODUCTS_FILE).is_file() and (d / ATTRIBUTES_FILE).is_file():
            return d
    raise UserError(
        f"no WebShop data under {source}: expected {PRODUCTS_FILE} and {ATTRIBUTES_FILE} (and "
        f"{HUMAN_FILE}) as WebShop's setup.sh downloads them into its data/ folder"
    )
