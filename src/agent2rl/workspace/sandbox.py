"""A bubblewrap sandbox for the agent: its workspace read-write, some paths read-only, no more.

The mount table built by :func:`bwrap_argv`, in order (later mounts shadow earlier ones):

1. the system dirs ``/usr /bin /lib /lib64 /sbin /etc`` read-only (a top-level symlink such as
   ``/bin -> usr/bin`` is recreated as a symlink), fresh ``/proc`` and ``/dev``, a tmpfs ``/tmp``;
2. ``ro_binds`` read-only at their own paths (the model store, the Python prefix, ...);
3. the workspace read-write at its own absolute path;
4. ``ro_inside`` re-bound read-only on top of it (``workspace/data``, ``workspace/models``);
5. ``hide`` masked by an empty read-only tmpfs (or ``/dev/null`` for a file).

Everything else of the host is absent: ``/root``, ``/home``, ``/work``, and the run directory
around the workspace (ledger, grader files) — bwrap only creates the empty parent dirs it needs as
mount points. The network namespace is shared on purpose: the agent talks to the grading service
on 127.0.0.1. When run as root, all capabilities are dropped (``--cap-drop ALL``): otherwise the
sandboxed root could simply remount the read-only binds read-write.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

SYSTEM_DIRS = ("/usr", "/bin", "/lib", "/lib64", "/sbin", "/etc")
_PROBE_TIMEOUT_S = 10.0


@dataclass
class SandboxSpec:
    """What the sandbox shows the agent.

    ``workspace`` is mounted read-write at its own absolute path and is the working directory.
    ``ro_binds`` are mounted read-only at the same paths; each must exist. ``ro_inside`` are paths
    inside the workspace made read-only; each must exist and lie inside ``workspace``. ``hide``
    are paths (typically inside a ``ro_binds`` entry) masked so that they look empty; a missing
    one is skipped, since there is then nothing to hide. ``env`` is the *whole* environment of the
    sandboxed command: nothing of the caller's environment leaks in. ``devices`` are device nodes
    passed through (GPUs); with any, ``/sys`` is mounted read-only too.
    """

    workspace: Path
    ro_binds: list[Path] = field(default_factory=list)
    ro_inside: list[Path] = field(default_factory=list)
    hide: list[Path] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    devices: list[Path] = field(default_factory=list)


def gpu_devices() -> list[Path]:
    """The host's NVIDIA device nodes (``/dev/nvidia*``), empty on a machine without them.

    A sandboxed agent needs them (``--dev-bind``) and ``/sys`` (read-only) to use CUDA.
    """
    return sorted(Path("/dev").glob("nvidia*"))


@functools.cache
def bwrap_available() -> bool:
    """True if ``bwrap`` is on PATH *and* can build the kind of sandbox we use.

    In some containers the binary exists but namespace creation or mounting ``/proc`` is
    refused, so a real probe runs once (with the namespace, /proc and /dev options
    :func:`bwrap_argv` uses) and its answer is cached for the life of the process.
    """
    exe = shutil.which("bwrap")
    if exe is None:
        return False
    probe = [exe, "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev"]
    probe += ["--unshare-pid", "--unshare-ipc", "--unshare-uts", "--die-with-parent", "true"]
    try:
        proc = subprocess.run(probe, capture_output=True, timeout=_PROBE_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError):
        return False
    return proc.returncode == 0


def bwrap_argv(spec: SandboxSpec, command: list[str]) -> list[str]:
    """The full argv running ``command`` inside the sandbox described by ``spec``.

    Raises ``ValueError`` naming the path if the workspace, a ``ro_binds`` or a ``ro_inside``
    path does not exist, or a ``ro_inside`` path is outside the workspace. Relative paths are
    made absolute against the current directory. ``command`` runs with ``--new-session`` in new
    pid/ipc/uts namespaces and is SIGKILLed, with everything it started, when bwrap dies.
    """
    if not command:
        raise ValueError("sandbox command is empty")
    workspace = _existing(spec.workspace, "sandbox workspace")
    argv = [shutil.which("bwrap") or "bwrap"]
    argv += system_mounts()
    for path in spec.ro_binds:
        p = _existing(path, "sandbox read-only bind")
        argv += ["--ro-bind", str(p), str(p)]
    argv += ["--bind", str(workspace), str(workspace)]
    for path in spec.ro_inside:
        p = _existing(path, "sandbox read-only path")
        if not p.is_relative_to(workspace):
            raise ValueError(f"read-only path {p} is not inside the workspace {workspace}")
        argv += ["--ro-bind", str(p), str(p)]
    for path in spec.hide:
        argv += _mask(Path(os.path.abspath(path)))
    for dev in spec.devices:
        argv += ["--dev-bind", str(dev), str(dev)]
    if spec.devices:
        argv += ["--ro-bind", "/sys", "/sys"]  # the CUDA driver reads PCI topology from /sys
    argv += ["--unshare-pid", "--unshare-ipc", "--unshare-uts"]
    argv += ["--die-with-parent", "--new-session", "--cap-drop", "ALL"]
    argv += ["--clearenv"]
    for key, value in spec.env.items():
        argv += ["--setenv", key, value]
    argv += ["--chdir", str(workspace), "--", *command]
    return argv


def python_ro_binds() -> list[Path]:
    """The directories the running interpreter needs inside a sandbox, outermost only.

    ``sys.prefix`` (the venv), ``sys.base_prefix`` and ``sys.exec_prefix`` (the installation),
    the directory of ``sys.executable`` and that of its resolved target (a venv's ``python`` is
    usually a symlink into the base installation). A path nested in another is dropped, since the
    outer bind already shows it; missing paths are dropped.
    """
    exe = Path(sys.executable)
    candidates = [
        Path(sys.prefix),
        Path(sys.base_prefix),
        Path(sys.exec_prefix),
        exe.parent.resolve(),
        exe.resolve().parent,
    ]
    unique = sorted({Path(os.path.abspath(p)) for p in candidates if p.exists()})
    # Sorted order puts a parent before its children, so one pass keeps only the outermost.
    kept: list[Path] = []
    for path in unique:
        if not any(path.is_relative_to(k) for k in kept):
            kept.append(path)
    return kept


def system_mounts(tmp_size_bytes: int | None = None) -> list[str]:
    """bwrap arguments for step 1 of the mount table: the system dirs read-only, fresh
    ``/proc`` and ``/dev``, and an empty tmpfs ``/tmp``.

    ``tmp_size_bytes`` caps that tmpfs (``--size``); it is ignored, leaving the kernel's
    default of half the RAM, when this bwrap is older than 0.8 and lacks the option (see
    :func:`bwrap_supports`).
    """
    args: list[str] = []
    for d in SYSTEM_DIRS:
        if os.path.islink(d):
            # Merged-/usr systems: /bin -> usr/bin. A symlink keeps the same layout as the host.
            args += ["--symlink", os.readlink(d), d]
        elif os.path.isdir(d):
            args += ["--ro-bind", d, d]
    args += ["--proc", "/proc", "--dev", "/dev"]
    if tmp_size_bytes is not None and bwrap_supports("--size"):
        args += ["--size", str(int(tmp_size_bytes))]
    args += ["--tmpfs", "/tmp"]
    return args


@functools.cache
def bwrap_supports(option: str) -> bool:
    """True if the installed ``bwrap`` lists ``option`` (e.g. ``--size``, ``--disable-userns``)
    in its ``--help``; False when bwrap is missing or the help cannot be read. Cached."""
    exe = shutil.which("bwrap")
    if exe is None:
        return False
    try:
        proc = subprocess.run([exe, "--help"], capture_output=True, timeout=_PROBE_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError):
        return False
    return f"{option} " in proc.stdout.decode(errors="replace")


def _mask(path: Path) -> list[str]:
    if path.is_dir():
        # An empty tmpfs, then read-only so the agent cannot plant files at a trusted path.
        return ["--tmpfs", str(path), "--remount-ro", str(path)]
    if path.exists():
        return ["--ro-bind", os.devnull, str(path)]
    return []


def _existing(path: Path, what: str) -> Path:
    p = Path(os.path.abspath(path))
    if not p.exists():
        raise ValueError(f"{what} {p} does not exist")
    return p
