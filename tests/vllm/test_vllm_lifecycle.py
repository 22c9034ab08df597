"""Nothing of vLLM outlives the harness (issue #37 item 4): the lifecycle tests of
tests/e2e/test_lifecycle.py once with ``--backend vllm``. The harness is killed while its
grader's vLLM engine (the EngineCore process and its worker, spawned by the warm grading
worker) is up; afterwards no process of the run and no vLLM process is left."""

from __future__ import annotations

import os
import signal
import time

import pytest
from support.lifecycle import (
    GONE_TIMEOUT_S,
    kill_leftovers,
    start_run,
    wait_for_agent,
    wait_gone,
)
from support.procs import processes_mentioning

from agent2rl.rundir import RunInfo

pytestmark = pytest.mark.vllm

VLLM = ("--backend", "vllm", "--dtype", "float32")
#: vLLM names its processes VLLM::EngineCore, VLLM::Worker... (setproctitle)
TITLE = "VLLM::"
ENGINE_TIMEOUT_S = 300.0


def _engines_up(before: set[int], timeout: float = ENGINE_TIMEOUT_S) -> set[int]:
    """The vLLM processes started since ``before`` once an engine and its worker are up."""
    end = time.time() + timeout
    while time.time() < end:
        new = {pid for pid, _ in processes_mentioning(TITLE)} - before
        if len(new) >= 2:
            return new
        time.sleep(0.2)
    raise AssertionError("no vLLM engine started for the submission")


def _gone(pids: set[int], timeout: float = GONE_TIMEOUT_S) -> set[int]:
    """``pids`` still alive after up to ``timeout`` seconds (empty: all gone)."""
    end = time.time() + timeout
    while (left := pids & {pid for pid, _ in processes_mentioning(TITLE)}) and time.time() < end:
        time.sleep(0.2)
    return left


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_no_vllm_process_outlives_the_harness(tmp_path, sig) -> None:
    runs, log = tmp_path / "runs", tmp_path / "console.log"
    before = {pid for pid, _ in processes_mentioning(TITLE)}
    proc = start_run(runs, "none", log, extra=VLLM)
    paths = engines = None
    try:
        # the baseline is graded with vLLM first (its own engine), then the agent submits
        paths = wait_for_agent(runs, proc, log, timeout=ENGINE_TIMEOUT_S)
        engines = _engines_up(before)
        proc.send_signal(sig)
        code = proc.wait(timeout=120)
        assert code == (128 + sig if sig != signal.SIGKILL else -sig), log.read_text()
        assert _gone(engines) == set(), "vLLM processes survived the harness"
        assert wait_gone(paths.root) == []
        assert RunInfo.load(paths).backend["kind"] == "vllm"
    finally:
        if proc.poll() is None:
            proc.kill()
        if paths is not None:
            kill_leftovers(paths.root)
        for pid in _gone(engines or set(), 0.0):
            os.kill(pid, signal.SIGKILL)
