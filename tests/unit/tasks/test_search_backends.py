"""DeepSearchQA's search backends are a registry (agent2rl.tasks.deepsearch.search
.SEARCH_BACKENDS): an installed distribution adds one through the
``agent2rl.search_backends`` entry-point group (a real ``*.dist-info`` on ``sys.path``) and
a task can then name it (``--task-opt search=NAME``); a second engine under a taken name is
refused; an unknown name lists the registered ones."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from agent2rl.dataset import PreparedTask
from agent2rl.errors import UserError
from agent2rl.registry import RegistryConflict
from agent2rl.tasks import get_task
from agent2rl.tasks.deepsearch.search import SEARCH_BACKENDS, SearchEngine, open_corpus

PLUGIN = """
from agent2rl.tasks.deepsearch.search import Hit, SearchEngine


class EchoSearch:
    name = "echo"

    def identity(self):
        return {"backend": "echo", "engine": "plugin"}

    def search(self, query, k):
        return [Hit(f"echo {i}", query) for i in range(k)]


ENGINE = SearchEngine(
    "echo", lambda corpus: EchoSearch(), lambda corpus: {"backend": "echo", "engine": "plugin"}
)
"""


def _install(root: Path) -> None:
    """A minimal installed distribution under ``root``: its module and its dist-info."""
    (root / "a2r_plugin_search.py").write_text(PLUGIN)
    info = root / "a2r-plugin-search-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: a2r-plugin-search\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        textwrap.dedent(
            """
            [agent2rl.search_backends]
            echo = a2r_plugin_search:ENGINE
            """
        )
    )


def _store(root: Path) -> PreparedTask:
    return PreparedTask(root / "public", root / "private", root / "validation")


def test_an_entry_point_adds_a_search_backend_a_task_can_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))
    _install(tmp_path)
    try:
        SEARCH_BACKENDS.reload_entry_points()
        assert list(SEARCH_BACKENDS)[:3] == ["serpapi", "bm25", "wikipedia"]
        assert "echo" in SEARCH_BACKENDS
        task = get_task("deepsearchqa", {"search": "echo", "judge": "exact"})
        prepared = _store(tmp_path / "store")
        assert task.search_mode(prepared) == "echo"
        assert task.search_identity(prepared) == {"backend": "echo", "engine": "plugin"}
        hits = task.search_backend(prepared).search("amber loom", 2)
        assert [h.title for h in hits] == ["echo 0", "echo 1"]
        # the engine is part of the evaluation settings: another engine, another hash
        settings = task.solver_settings(prepared)
        assert settings["search"] == {"backend": "echo", "engine": "plugin"}
    finally:
        SEARCH_BACKENDS.unregister("echo")


def test_a_second_engine_under_a_taken_name_is_refused() -> None:
    impostor = SearchEngine("bm25", open_corpus, lambda corpus: {"backend": "bm25"})
    with pytest.raises(RegistryConflict, match="search backend 'bm25' is already registered"):
        SEARCH_BACKENDS.register("bm25", impostor)
    assert SEARCH_BACKENDS["bm25"] is not impostor


def test_an_unknown_engine_lists_the_registered_ones(tmp_path: Path) -> None:
    task = get_task("deepsearchqa", {"search": "bingo", "judge": "exact"})
    with pytest.raises(UserError, match=r"search=bingo: use auto, serpapi, bm25, wikipedia"):
        task.search_identity(_store(tmp_path))
