"""No user namespaces inside the agent's sandbox (bubblewrap's ``--disable-userns``): an agent
that could make one (``unshare -Ur``) would be root there, with capabilities that reach
kernel code an unprivileged user cannot. Real bwrap, real ``unshare``."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from agent2rl.sandbox.bwrap import (
    SandboxSpec,
    bwrap_argv,
    bwrap_available,
    bwrap_supports,
    python_ro_binds,
)

pytestmark = pytest.mark.skipif(
    not bwrap_available() or not bwrap_supports("--disable-userns"),
    reason="needs bwrap 0.8+ (--disable-userns) able to create namespaces here",
)
# Inside the sandbox: the user, whether a user namespace can be made, and a file written.
_SCRIPT = (
    "id -u; unshare -Ur true && echo userns=made || echo userns=refused; "
    "echo x > written && echo write=ok"
)


def _run(ws: Path, run_as: tuple[int, int] | None) -> subprocess.CompletedProcess[str]:
    spec = SandboxSpec(
        workspace=ws, ro_binds=python_ro_binds(), env={"PATH": "/usr/bin:/bin"}, run_as=run_as
    )
    argv = bwrap_argv(spec, ["sh", "-c", _SCRIPT])
    return subprocess.run(argv, capture_output=True, text=True, timeout=60)


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs util-linux's unshare")
def test_the_sandbox_user_cannot_make_a_user_namespace(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    proc = _run(ws, None)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [str(os.geteuid()), "userns=refused", "write=ok"], proc


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs util-linux's unshare")
@pytest.mark.skipif(os.geteuid() != 0, reason="running the agent as another user needs root")
def test_an_agent_of_its_own_uid_cannot_make_a_user_namespace(tmp_path: Path) -> None:
    """A root harness runs the agent as a uid of its own; that uid may make user namespaces
    on the host (the kernel allows it unprivileged users), but not in the sandbox."""
    ws = tmp_path / "ws"
    ws.mkdir()
    uid = 61000 + os.getpid() % 1000
    os.chown(ws, uid, uid)
    proc = _run(ws, (uid, uid))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [str(uid), "userns=refused", "write=ok"], proc
    assert (ws / "written").stat().st_uid == uid  # its own uid on the host, not root's
