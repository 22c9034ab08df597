"""A bubblewrap sandbox for the agent: its workspace read-write, some paths read-only, no more.

The mount table built by :func:`bwrap_argv`, in order (later mounts shadow earlier ones):

1. the system dirs ``/usr /bin /lib /lib64 /sbin /etc`` read-only (a top-level symlink such as
   ``/bin -> usr/bin`` is recreated as a symlink), fresh ``/proc`` and ``/dev``, a tmpfs ``/tmp``
   (or, with ``tmp_dir``, that host directory read-write at ``/tmp``: it outlives the sandbox);
2. ``ro_binds`` read-only at their own paths (the model store, the Python prefix, ...), then
   ``ro_binds_at`` read-only at another path (``/etc/passwd``, the network bridge's sockets);
3. the workspace read-write at its own absolute path;
4. ``ro_inside`` re-bound read-only on top of it (``workspace/data``, ``workspace/models``);
5. ``hide`` masked by an empty read-only tmpfs (or ``/dev/null`` for a file).

Everything else of the host is absent: ``/root``, ``/home``, ``/work``, and the run directory
around the workspace (ledger, grader files) — bwrap only creates the empty parent dirs it needs as
mount points. By default the network namespace is shared: the agent talks to the grading service
on 127.0.0.1. With ``unshare_net`` it gets a namespace of its own, holding only a loopback, and
reaches the run's services through :mod:`agent2rl.sandbox.network`'s bridge. When run as
root, all capabilities are dropped (``--cap-drop ALL``): otherwise the sandboxed root could simply
remount the read-only binds read-write.

No user namespaces inside: an unprivileged user may create one (``unshare -Ur``) and be "root"
there, with the capabilities to mount, make network namespaces and reach kernel code that
is otherwise out of its reach, a common step in a privilege escalation. Where bubblewrap has
``--disable-userns`` (0.8 and later) the sandbox uses it (:func:`userns_lock_args`): the
command runs in a user namespace of its own in which no further one can be made. Older
bubblewrap leaves nested user namespaces possible (the kernel's own
``user.max_user_namespaces`` then decides).
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
#: what every availability probe's sandbox has: the host's root read-only, /proc, /dev, a pid
#: namespace
_PROBE = "--ro-bind / / --proc /proc --dev /dev --unshare-pid --die-with-parent".split()


@dataclass
class SandboxSpec:
    """What the sandbox shows the agent (the module docstring says where each part goes).

    Every path must exist, except a ``hide`` entry (skipped: nothing to hide); ``ro_inside``
    entries must lie inside ``workspace``, which is also the working directory. ``env`` is the
    *whole* environment of the command: nothing of the caller's leaks in. ``devices`` (GPUs)
    are passed through, and with any, ``/sys`` is mounted read-only too. ``tmp_size_bytes``
    caps the tmpfs ``/tmp`` (it is memory). ``run_as``: the (uid, gid) of the command for a
    root caller (:func:`bwrap_argv`). ``tmp_dir`` replaces the tmpfs ``/tmp`` so that what the
    command leaves there outlives it (the run's contamination check scans it); the caller's
    disk quota, not ``tmp_size_bytes``, caps it.
    """

    workspace: Path
    ro_binds: list[Path] = field(default_factory=list)
    ro_inside: list[Path] = field(default_factory=list)
    hide: list[Path] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    devices: list[Path] = field(default_factory=list)
    ro_binds_at: list[tuple[Path, Path]] = field(default_factory=list)
    tmp_size_bytes: int | None = None
    run_as: tuple[int, int] | None = None
    unshare_net: bool = False
    tmp_dir: Path | None = None


def gpu_devices() -> list[Path]:
    """The host's NVIDIA device nodes (``/dev/nvidia*``), empty on a machine without them.

    A sandboxed agent needs them (``--dev-bind``) and ``/sys`` (read-only) to use CUDA.
    """
    return sorted(Path("/dev").glob("nvidia*"))


@functools.cache
def bwrap_available() -> bool:
    """True if ``bwrap`` is on PATH *and* can build the kind of sandbox we use: in some
    containers the binary exists but namespace creation or mounting ``/proc`` is refused, so
    a real probe (with :func:`bwrap_argv`'s namespace, /proc and /dev options) runs once."""
    exe = shutil.which("bwrap")
    return exe is not None and succeeds([exe, *_PROBE, "--unshare-ipc", "--unshare-uts", "true"])


def succeeds(probe: list[str]) -> bool:
    """Whether the command ``probe`` exits 0 within the probe timeout (False if it cannot run)."""
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

    With ``spec.run_as`` (a root caller), the command runs as that uid/gid on the host: bwrap
    keeps only ``CAP_SETUID``/``CAP_SETGID`` and starts :data:`DROP_PRIVILEGES`, which sets
    the groups, gid and uid and then executes the command; after the switch the kernel clears
    every capability, and bwrap's ``no_new_privs`` keeps setuid binaries from regaining any.
    A user namespace is not used for this on purpose: its ids map back to the caller's, so a
    "uid 1000" inside would be root on the host's files.
    """
    if not command:
        raise ValueError("sandbox command is empty")
    workspace = _existing(spec.workspace, "sandbox workspace")
    argv = [shutil.which("bwrap") or "bwrap"]
    argv += system_mounts(spec.tmp_size_bytes)
    if spec.tmp_dir is not None:
        # Over the tmpfs, before any other mount: mount points bwrap creates under /tmp (a
        # workspace below /tmp) are then made inside this directory, and shadow nothing.
        argv += ["--bind", str(_existing(spec.tmp_dir, "sandbox /tmp directory")), "/tmp"]
    if spec.run_as is not None:
        # Parents bwrap makes implicitly may copy the host's modes (/root is 0700), and then
        # an unprivileged agent could not reach its own workspace or interpreter below them.
        targets = [*spec.ro_binds, workspace, *(inside for _, inside in spec.ro_binds_at)]
        for parent in mount_parents([Path(os.path.abspath(p)) for p in targets]):
            argv += ["--dir", str(parent)]
    for host, inside in [*((p, p) for p in spec.ro_binds), *spec.ro_binds_at]:
        p = _existing(host, "sandbox read-only bind")
        argv += ["--ro-bind", str(p), os.path.abspath(inside)]
    argv += ["--bind", str(workspace), str(workspace)]
    for path in spec.ro_inside:
        p = _existing(path, "sandbox read-only path")
        if not p.is_relative_to(workspace):
            raise ValueError(f"read-only path {p} is not inside the workspace {workspace}")
        argv += ["--ro-bind", str(p), str(p)]
    for path in spec.hide:
        argv += mask_args(Path(os.path.abspath(path)))
    for dev in spec.devices:
        argv += ["--dev-bind", str(dev), str(dev)]
    if spec.devices:
        argv += ["--ro-bind", "/sys", "/sys"]  # the CUDA driver reads PCI topology from /sys
    argv += ["--unshare-pid", "--unshare-ipc", "--unshare-uts"]
    if spec.unshare_net:
        argv += ["--unshare-net"]
    outer, nested = userns_lock_args(spec.run_as is not None)
    argv += outer
    argv += ["--die-with-parent", "--new-session", "--cap-drop", "ALL"]
    if spec.run_as is not None:
        argv += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    argv += ["--clearenv"]
    for key, value in spec.env.items():
        argv += ["--setenv", key, value]
    argv += ["--chdir", str(workspace), "--"]
    if spec.run_as is not None:
        uid, gid = spec.run_as
        argv += [sys.executable, "-I", "-c", DROP_PRIVILEGES, str(uid), str(gid)]
    return argv + nested + list(command)


def userns_lock_args(run_as: bool) -> tuple[list[str], list[str]]:
    """How a sandbox keeps its command from creating user namespaces: (arguments for the
    sandbox's own bwrap, a command prefix run inside it). Both empty where this bwrap lacks
    ``--disable-userns`` or the probe (:func:`_userns_lockable`) fails here.

    A sandbox of an ordinary caller gets ``--unshare-user --disable-userns`` itself. A root
    caller's sandbox must not get a user namespace (its ids would map back to root's, see
    :func:`bwrap_argv`), so its command, once it is the agent's user, runs behind a second,
    unprivileged bwrap that makes the user namespace (the agent's uid mapped to itself, no
    capability) and disables further ones; it binds the sandbox's whole root as it is, so
    everything else stays as the outer sandbox made it."""
    if not _userns_lockable(run_as):
        return [], []
    lock = ["--unshare-user", "--disable-userns"]
    if not run_as:
        return lock, []
    exe = shutil.which("bwrap") or "bwrap"
    return [], [exe, "--dev-bind", "/", "/", *lock, "--die-with-parent", "--"]


@functools.cache
def _userns_lockable(run_as: bool) -> bool:
    """Whether :func:`userns_lock_args`'s form of ``--disable-userns`` works here (probed
    once per form): bwrap 0.8+, and a kernel that lets the caller (or, for ``run_as``, an
    unprivileged user) make a user namespace. Where it cannot, neither can the agent."""
    exe = shutil.which("bwrap")
    if exe is None or not bwrap_supports("--disable-userns"):
        return False
    probe = [exe, *_PROBE]
    if run_as:  # as nobody, behind a second bwrap (see userns_lock_args)
        probe += ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--"]
        probe += [sys.executable, "-I", "-c", DROP_PRIVILEGES, "65534", "65534"]
        probe += [exe, "--dev-bind", "/", "/"]
    return succeeds([*probe, "--unshare-user", "--disable-userns", "--", "true"])


#: ``python -I -c DROP_PRIVILEGES UID GID CMD...``: become UID/GID (no supplementary
#: groups) and execute CMD. It runs first inside the sandbox, as root without any capability
#: but the two it needs, so nothing the agent controls ever runs with them.
DROP_PRIVILEGES = (
    "import os, sys\n"
    "uid, gid = int(sys.argv[1]), int(sys.argv[2])\n"
    "os.setgroups([])\n"
    "os.setresgid(gid, gid, gid)\n"
    "os.setresuid(uid, uid, uid)\n"
    "try:\n"
    "    os.execvp(sys.argv[3], sys.argv[3:])\n"
    "except OSError as err:\n"
    # 127, as a shell answers a command it cannot run (and without a traceback)
    "    print(f'agent2rl sandbox: cannot execute {sys.argv[3]}: {err.strerror}',"
    " file=sys.stderr)\n"
    "    sys.exit(127)\n"
)


def python_ro_binds() -> list[Path]:
    """The directories the running interpreter needs inside a sandbox, outermost only.

    ``sys.prefix`` (the venv), ``sys.base_prefix`` and ``sys.exec_prefix`` (the installation),
    the directory of ``sys.executable`` and that of its resolved target (a venv's ``python`` is
    usually a symlink into the base installation). A path nested in another is dropped, since the
    outer bind already shows it; missing paths are dropped.
    """
    exe = Path(sys.executable)
    prefixes = [Path(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)]
    candidates = [*prefixes, exe.parent.resolve(), exe.resolve().parent]
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
    # Sticky and world-writable like a host's /tmp: an agent running as its own user must be
    # able to use it (tmux and others ignore TMPDIR).
    if bwrap_supports("--perms"):
        args += ["--perms", "1777"]
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


def mount_parents(targets: list[Path]) -> list[Path]:
    """The directories above ``targets`` that a sandbox must create itself, top-down: those
    not provided by a system mount (``/tmp`` is its tmpfs) and not a target themselves."""
    provided = [Path(d) for d in SYSTEM_DIRS]
    out: list[Path] = []
    for path in targets:
        for parent in reversed(path.parents[:-1]):  # [:-1]: not "/"
            if parent in out or parent == Path("/tmp") or parent in targets:
                continue
            if not any(parent.is_relative_to(p) for p in provided):
                out.append(parent)
    return out


def mask_args(path: Path) -> list[str]:
    """bwrap arguments that make ``path`` look empty (a directory: an empty read-only
    tmpfs; a file: ``/dev/null``); none for a path that does not exist."""
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
