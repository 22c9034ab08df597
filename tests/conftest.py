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


#: Tests that train a model for a time budget, then assert on what happened in it (graded
#: submissions, a GRPO round, a gain). On two workers (``make test-slow``) two of them at once get
#: about one core each, and a plan made for the budget can then miss its GRPO round or its
#: last grading; they run one after the other on one worker, while the other takes the rest.
TRAINING_TESTS = frozenset(
    {
        "test_reference_sft_run_end_to_end",
        "test_reference_grpo_run_on_alfworld_lite",
        "test_reference_grpo_run_on_webshop_lite",
        "test_gsm8k_run_end_to_end",
        "test_humaneval_run_end_to_end",
    }
)


def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """pytest-xdist's scheduler for ``-n N``: one test file at a time per worker (as
    ``--dist loadfile``: module fixtures are set up once), except that the
    :data:`TRAINING_TESTS` form one unit, the first to start. (xdist's own ``loadgroup``
    does not work with pytest 9: it renames ``item._nodeid``, which pytest 9 no longer
    reads.) The controller sees only node ids, not markers, hence a list of names."""
    from xdist.scheduler import LoadScopeScheduling

    class Scheduler(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path, _, name = nodeid.partition("::")
            return "training" if name.split("[", 1)[0] in TRAINING_TESTS else path

        def _assign_work_unit(self, node) -> None:
            # xdist queues the units by their number of tests, largest first: the training
            # unit (few tests, the longest unit by far) would start last and run alone
            if "training" in self.workqueue:
                self.workqueue.move_to_end("training", last=False)
            super()._assign_work_unit(node)

    return Scheduler(config, log)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """In CI, a skip of a test that docs/security.md's tables name is a failure: a skipped
    test proves nothing its row claims (support.security_tables; a row may say why CI cannot
    run it)."""
    outcome = yield
    report = outcome.get_result()
    if not report.skipped or hasattr(report, "wasxfail"):
        return
    from support.security_tables import ci_skip_failure

    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    if message := ci_skip_failure(item.nodeid, reason):
        report.outcome = "failed"
        report.longrepr = message


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
