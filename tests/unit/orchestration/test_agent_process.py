"""Killing an agent kills all of it: its group, escaped daemons, SIGTERM-ignoring children."""

from __future__ import annotations

import contextlib
import os
import signal
import time
import uuid

from support.procs import processes_mentioning

from agent2rl.orchestration.agent_process import AgentProcess
from agent2rl.recording import ResourceSampler


def _script(marker: str) -> str:
    return f"""
trap '' TERM                          # the agent itself ignores SIGTERM
setsid sleep 1000.{marker}1 &          # a daemon in a new session (leaves the group)
( trap '' TERM; exec -a stubborn-{marker} sleep 1000 ) &   # ignores SIGTERM too
bash -c 'sleep 1000.{marker}2 & disown; exit 0' &            # an orphan
sleep 1000.{marker}3
"""


def _start_tree(tmp_path, marker: str) -> tuple[AgentProcess, ResourceSampler, bool]:
    """The agent of :func:`_script` with a sampler; whether all four sleepers showed within
    60 s (a loaded machine, two test workers, starts them slowly)."""
    agent = AgentProcess(
        ["bash", "-c", _script(marker)],
        {"PATH": os.environ["PATH"]},
        tmp_path,
        tmp_path / "agent.log",
    )
    agent.start()
    sampler = ResourceSampler(agent.pid, tmp_path / "res.jsonl", interval_s=0.2)
    sampler.start()
    deadline = time.time() + 60
    while len(processes_mentioning(marker)) < 4 and time.time() < deadline:
        time.sleep(0.1)
    return agent, sampler, len(processes_mentioning(marker)) >= 4


def test_terminate_tree_kills_everything(tmp_path) -> None:
    marker = str(uuid.uuid4().int)[:8]
    sampler = None
    try:
        agent, sampler, started = _start_tree(tmp_path, marker)
        if not started:
            # The orphan's sleeper was once missing after 60 s in a full suite run (not
            # reproduced alone): start the tree afresh once, saying what was there.
            seen = processes_mentioning(marker)
            print(f"not all four sleepers started ({seen}); starting the tree again")
            agent.terminate_tree(sampler.alive_seen(), grace_s=1.0)
            sampler.stop()
            agent, sampler, started = _start_tree(tmp_path, marker)
        assert started, processes_mentioning(marker)
        killed = agent.terminate_tree(sampler.alive_seen(), grace_s=1.0)
        sampler.stop()
        assert killed >= 1  # the SIGTERM-ignoring ones needed SIGKILL
        time.sleep(0.2)
        assert processes_mentioning(marker) == []
        assert agent.poll() is not None
    finally:
        # Whatever failed above, leave no sleeper behind: a leak would fail later tests
        # that check for stray agent processes (it once did, after a failure here).
        if sampler is not None:
            sampler.stop()
        for pid, _ in processes_mentioning(marker):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def test_terminate_tree_after_normal_exit_is_safe(tmp_path) -> None:
    agent = AgentProcess(["true"], {"PATH": os.environ["PATH"]}, tmp_path, tmp_path / "log")
    agent.start()
    agent.proc.wait()
    assert agent.terminate_tree([], grace_s=0.5) == 0
