"""Shared fixtures: one private AGENT2RL_HOME per test session (task store, tiny model,
baseline cache). Helpers shared by tests live in ``tests/support/``."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from support.cli import LITE_OPTS

# Keep CPU tests predictable on small shared machines.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ["HF_HUB_OFFLINE"] = "1"
# Never try to download task data (alfworld-download) from a test.
os.environ["AGENT2RL_OFFLINE"] = "1"


@pytest.fixture(scope="session", autouse=True)
def a2home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("agent2rl-home")
    old = os.environ.get("AGENT2RL_HOME")
    os.environ["AGENT2RL_HOME"] = str(home)
    yield home
    if old is None:
        os.environ.pop("AGENT2RL_HOME", None)
    else:
        os.environ["AGENT2RL_HOME"] = old


@pytest.fixture(scope="session")
def tiny(a2home: Path):
    """The built-in tiny model, resolved through the real model store."""
    from agent2rl.models import resolve_model
    from agent2rl.settings import load_settings

    return resolve_model("tiny", load_settings().model_store)


@pytest.fixture(scope="session")
def arith(a2home: Path):
    from agent2rl.settings import load_settings
    from agent2rl.tasks import get_task, prepare_task

    task = get_task("arith-lite")
    return task, prepare_task(task, load_settings().task_store)


@pytest.fixture(scope="session")
def alfworld_lite(a2home: Path):
    """alfworld-lite with :data:`LITE_OPTS`, generated into the session's task store."""
    from agent2rl.settings import load_settings
    from agent2rl.tasks import get_task, prepare_task

    task = get_task("alfworld-lite", LITE_OPTS)
    return task, prepare_task(task, load_settings().task_store)
