"""Sandboxes: where untrusted code runs.

::

    bwrap.py     bubblewrap: the mount table (SandboxSpec -> argv), the system dirs, the
                 interpreter's binds, the availability probe
    programs.py  one untrusted Python program (a model's code and its tests) in a fresh,
                 resource-limited process: the HumanEval grader's runner
    agent.py     the agent's sandbox: what a run mounts for it, its uid, how it is launched
    two_process.py  HumanEval's verdict: the model's function and the tests in two sandboxes
    wire.py      the plain-data encoding the two processes exchange
    split_boot.py   the bootstrap that runs inside those two sandboxes
    limits.py    memory / process / disk caps (cgroup v2 or v1, and their fallbacks)
    network.py   the ``host`` / ``services`` network policies and the service bridge
    netbridge.py the bridge's end inside the sandbox (standard library only)
    egress.py    the allowlisted egress proxy, logging every outbound request
    name_proxy.py  the package index and model hub proxies: every project, repo and file
                 fetched logged by name, the task's deny list refused

Nothing here knows a task; tasks, the grader and the orchestrator build on it.
"""

from agent2rl.sandbox.bwrap import (
    SYSTEM_DIRS,
    SandboxSpec,
    bwrap_argv,
    bwrap_available,
    gpu_devices,
    python_ro_binds,
)
from agent2rl.sandbox.programs import ExecLimits, ExecResult, isolation, run_program, run_programs

__all__ = [
    "SYSTEM_DIRS",
    "ExecLimits",
    "ExecResult",
    "SandboxSpec",
    "bwrap_argv",
    "bwrap_available",
    "gpu_devices",
    "isolation",
    "python_ro_binds",
    "run_program",
    "run_programs",
]
