"""Sandboxes: where untrusted code runs.

::

    bwrap.py     bubblewrap: the mount table (SandboxSpec -> argv), the system dirs, the
                 interpreter's binds, the availability probe
    programs.py  one untrusted Python program (a model's code and its tests) in a fresh,
                 resource-limited process: the HumanEval grader's runner
    agent.py     the agent's sandbox: what a run mounts for it, its uid, how it is launched
    two_process.py  HumanEval's verdict: the model's function and the tests in two sandboxes
    wire.py      the plain-data encoding the two processes exchange
    split_boot.py   the bootstrap that runs inside those sandboxes (both runners)
    limits.py    memory / process / disk caps (cgroup v2 or v1, and their fallbacks)
    network.py   the ``host`` / ``services`` network policies and the service bridge
    netbridge.py the bridge's end inside the sandbox (standard library only)
    egress.py    the allowlisted egress proxy, logging every outbound request
    name_proxy.py  the package index and model hub proxies: every project, repo and file
                 fetched logged by name, the task's deny list refused

Nothing here knows a task; tasks, the grader and the orchestrator build on it, through the
names this package exports (the agent's network parts load on first use).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from agent2rl.sandbox.agent import AgentUser, agent_sandbox, agent_user, hand_over, identity_files
from agent2rl.sandbox.bwrap import (
    SYSTEM_DIRS,
    SandboxSpec,
    bwrap_argv,
    bwrap_available,
    gpu_devices,
    python_ro_binds,
)
from agent2rl.sandbox.limits import Cgroup, ResourceCaps, machine_caps, probe, set_nproc_limit
from agent2rl.sandbox.programs import ExecLimits, ExecResult, isolation, run_program, run_programs

if TYPE_CHECKING:
    from agent2rl.sandbox.egress import DEFAULT_ALLOWLIST, Allowlist, start_egress_proxy
    from agent2rl.sandbox.name_proxy import (
        DenyList,
        NameProxies,
        file_digests,
        start_name_proxies,
    )
    from agent2rl.sandbox.network import (
        ServiceBridge,
        confine,
        network_isolation_available,
        network_record,
    )

# The agent's network parts are imported on first use: egress.py and name_proxy.py run as
# `python -m` programs, which must not find themselves imported by their package first.
_LAZY = {
    name: module
    for module, names in {
        "egress": ("DEFAULT_ALLOWLIST", "Allowlist", "start_egress_proxy"),
        "name_proxy": ("DenyList", "NameProxies", "file_digests", "start_name_proxies"),
        "network": ("ServiceBridge", "confine", "network_isolation_available", "network_record"),
    }.items()
    for name in names
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "DEFAULT_ALLOWLIST",
    "SYSTEM_DIRS",
    "AgentUser",
    "Allowlist",
    "Cgroup",
    "DenyList",
    "ExecLimits",
    "ExecResult",
    "NameProxies",
    "ResourceCaps",
    "SandboxSpec",
    "ServiceBridge",
    "agent_sandbox",
    "agent_user",
    "bwrap_argv",
    "bwrap_available",
    "confine",
    "file_digests",
    "gpu_devices",
    "hand_over",
    "identity_files",
    "isolation",
    "machine_caps",
    "network_isolation_available",
    "network_record",
    "probe",
    "python_ro_binds",
    "run_program",
    "run_programs",
    "set_nproc_limit",
    "start_egress_proxy",
    "start_name_proxies",
]
