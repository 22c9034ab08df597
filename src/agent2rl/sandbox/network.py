"""The agent's network policy: ``host`` (the host's network, as before) or ``services``.

Under ``services`` the agent's sandbox gets a network namespace of its own (bwrap
``--unshare-net``: nothing but its own loopback) and reaches exactly the run's own services,
each still at ``http://127.0.0.1:PORT``:

::

    agent --TCP--> sandbox 127.0.0.1:PORT            (netbridge.py, the in-sandbox forwarder)
          --UNIX-> /run/agent2rl/net/PORT.sock       (a host directory bound read-only)
          --UNIX-> ServiceBridge on the host         (this module, a thread of the harness)
          --TCP--> host 127.0.0.1:PORT               (grading, rollout, metering, egress proxy)

The egress proxy (:mod:`agent2rl.sandbox.egress`) is one of them; :func:`proxy_env` points the
agent at it.

Threat model (an agent that wants to reach the outside, e.g. to download a test set):

- enforced: no route out of the namespace. There is no interface but ``lo``, so every TCP
  connection, every UDP datagram and every DNS lookup fails at once (``/etc/resolv.conf`` names
  a server the namespace cannot reach). The host's other loopback services and its external
  interfaces are unreachable; only the ports given to :class:`ServiceBridge` are forwarded, each
  to one fixed host port. Abstract UNIX sockets of the host are out of reach too (they belong to
  the network namespace).
- not enforced here: what a bridged service does with a request (the services authenticate the
  agent with their own tokens), nor what an allowlisted host serves (see the egress proxy).
- the agent may kill its own forwarder: that cuts only itself off from its services. It may
  open many connections: each bridge caps them (``max_connections``), so the harness's file
  descriptors are not exhausted.
- the bridge adds no authentication: any process in the sandbox reaches every bridged port, as
  any process on the host's loopback could before.
- filesystem paths are the other way out: a UNIX socket bound into the sandbox is a channel.
  Only the bridge's own directory is bound; keep others (``/run``, ``/var/run``, X11, a Docker
  socket) out of the sandbox's binds.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import os
import shutil
import socket
import sys
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

from agent2rl.sandbox import netbridge
from agent2rl.sandbox.bwrap import SandboxSpec, bwrap_available, succeeds, system_mounts
from agent2rl.sandbox.egress import summarize_egress

NetworkPolicy = Literal["host", "services"]
NETWORK_POLICIES: tuple[NetworkPolicy, ...] = ("host", "services")

#: where the bridge's socket directory and the forwarder appear inside the sandbox
SANDBOX_RUN_DIR = Path("/run/agent2rl")
SANDBOX_NET_DIR = SANDBOX_RUN_DIR / "net"
SANDBOX_NETBRIDGE = SANDBOX_RUN_DIR / "netbridge.py"
#: the forwarder's source on the host (standard library only; bound read-only at the above)
NETBRIDGE_SOURCE = Path(netbridge.__file__).resolve()

_MAX_UNIX_PATH = 107  # sun_path is 108 bytes with its NUL
_START_TIMEOUT_S = 10.0


def parse_network_policy(value: str) -> NetworkPolicy:
    """``value`` as a policy; raises ValueError naming the choices for anything else."""
    if value not in NETWORK_POLICIES:
        raise ValueError(f"unknown network policy {value!r}; choose one of: host, services")
    return value  # type: ignore[return-value]


class ServiceBridge:
    """The host's end of the bridge: ``sock_dir/PORT.sock`` for each of ``ports``, each
    connection to it forwarded to the host's ``127.0.0.1:PORT``.

    Runs an asyncio loop in one daemon thread; usable as a context manager. ``sock_dir`` is
    created (mode 0755) and the sockets are made connectable by any user (0666), since the
    agent may run as an unprivileged user. A connection beyond ``max_connections`` open at
    once, or to a port where nothing listens, is closed at once: the agent sees its connection
    reset, as it would from a dead service. Socket paths longer than ``sun_path`` allows are
    bound through ``/proc/self/fd``; the path inside the sandbox is always short.
    """

    def __init__(
        self,
        sock_dir: Path,
        ports: Iterable[int],
        *,
        max_connections: int = 256,
    ) -> None:
        self.sock_dir = Path(os.path.abspath(sock_dir))
        self.ports = sorted(set(int(p) for p in ports))
        for port in self.ports:
            if not 0 < port < 65536:
                raise ValueError(f"bad service port {port}")
        self.max_connections = max_connections
        self.connections_served = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._servers: list[asyncio.AbstractServer] = []
        self._tasks: set[asyncio.Task] = set()

    def socket_path(self, port: int) -> Path:
        """The host path of ``port``'s socket."""
        return self.sock_dir / f"{port}.sock"

    @property
    def active_connections(self) -> int:
        """Connections open right now (0 after :meth:`stop`)."""
        return len(self._tasks)

    def start(self) -> None:
        """Listen on every port's socket; raises RuntimeError if already started, OSError if
        a socket cannot be bound (nothing is left running then)."""
        if self._thread is not None:
            raise RuntimeError("service bridge already started")
        self.sock_dir.mkdir(parents=True, exist_ok=True)
        self.sock_dir.chmod(0o755)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name=f"service-bridge-{self.sock_dir.name}", daemon=True
        )
        self._thread.start()
        try:
            asyncio.run_coroutine_threadsafe(self._open(), self._loop).result(_START_TIMEOUT_S)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Close the listeners and every open connection, join the thread and remove the
        socket files; idempotent."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        if thread.is_alive():
            try:
                asyncio.run_coroutine_threadsafe(self._close(), loop).result(_START_TIMEOUT_S)
            finally:
                loop.call_soon_threadsafe(loop.stop)
                thread.join()
        loop.close()
        self._loop = self._thread = None
        for port in self.ports:
            self.socket_path(port).unlink(missing_ok=True)

    def __enter__(self) -> ServiceBridge:
        self.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    async def _open(self) -> None:
        for port in self.ports:
            path = self.socket_path(port)
            path.unlink(missing_ok=True)
            sock = _unix_listener(path)
            server = await asyncio.start_unix_server(
                functools.partial(self._forward, port), sock=sock, limit=netbridge.CHUNK
            )
            self._servers.append(server)
            path.chmod(0o666)

    async def _close(self) -> None:
        for server in self._servers:
            server.close()
        self._servers.clear()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _forward(
        self, port: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        async def connect() -> netbridge.Stream:
            upstream = await asyncio.open_connection("127.0.0.1", port, limit=netbridge.CHUNK)
            self.connections_served += 1
            return upstream

        client = (reader, writer)
        await netbridge.forward(
            client, connect, self._tasks, self.max_connections, netbridge.CONNECT_TIMEOUT_S
        )


def _unix_listener(path: Path) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        if len(os.fsencode(path)) <= _MAX_UNIX_PATH:
            sock.bind(str(path))
        else:
            # Through the directory's fd: the kernel resolves the long path, sun_path stays short.
            dfd = os.open(path.parent, os.O_PATH | os.O_DIRECTORY)
            try:
                sock.bind(f"/proc/self/fd/{dfd}/{path.name}")
            finally:
                os.close(dfd)
        sock.listen(socket.SOMAXCONN)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock


def sandbox_binds(sock_dir: Path) -> list[tuple[Path, Path]]:
    """(host path, path inside) read-only binds the ``services`` policy needs: the bridge's
    socket directory at :data:`SANDBOX_NET_DIR` and the forwarder at
    :data:`SANDBOX_NETBRIDGE`. Connecting to a socket needs no write access to its mount."""
    return [
        (Path(os.path.abspath(sock_dir)), SANDBOX_NET_DIR),
        (NETBRIDGE_SOURCE, SANDBOX_NETBRIDGE),
    ]


def forwarder_argv(ports: Iterable[int], *, python: str = sys.executable) -> list[str]:
    """The argv prefix that runs a command behind the in-sandbox forwarder: append the
    agent's command to it. ``python`` must exist inside the sandbox (the harness's interpreter
    is bound there by :func:`~agent2rl.sandbox.bwrap.python_ro_binds`; any Python >= 3.9
    works, the forwarder uses the standard library only, run isolated with ``-I -S``)."""
    argv = [python, "-I", "-S", str(SANDBOX_NETBRIDGE)]
    for port in sorted(set(int(p) for p in ports)):
        argv += ["--map", f"{port}={SANDBOX_NET_DIR / f'{port}.sock'}"]
    return [*argv, "--"]


def proxy_env(proxy_port: int) -> dict[str, str]:
    """The environment that sends the agent's HTTP(S) clients (pip, huggingface_hub, npm,
    curl, requests, urllib) through the egress proxy at the sandbox's ``127.0.0.1:proxy_port``,
    and the run's own services around it. Both spellings: tools disagree on the case."""
    url = f"http://127.0.0.1:{proxy_port}"
    env: dict[str, str] = {}
    for name in ("HTTP_PROXY", "HTTPS_PROXY"):
        env[name] = env[name.lower()] = url
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost,::1"
    # Node's built-in fetch ignores the variables above unless told (Node >= 22.21 / 24).
    env["NODE_USE_ENV_PROXY"] = "1"
    return env


def network_record(
    policy: NetworkPolicy,
    services: dict[str, int],
    *,
    allowlist: Iterable[str] = (),
    egress_log: Path | None = None,
) -> dict[str, Any]:
    """What the run record says about the agent's network, for the report: the policy, the
    services it could reach (name -> host port), and under ``services`` the egress allowlist
    and :func:`~agent2rl.sandbox.egress.summarize_egress` of the proxy's log (None when the
    run had no egress proxy)."""
    record: dict[str, Any] = {"policy": policy, "services": dict(sorted(services.items()))}
    if policy == "services":
        record["egress_allowlist"] = list(allowlist)
        record["egress"] = summarize_egress(egress_log) if egress_log is not None else None
    return record


def confine(
    spec: SandboxSpec,
    bridge: ServiceBridge,
    command: list[str],
    *,
    egress_port: int | None = None,
    python: str = sys.executable,
) -> tuple[SandboxSpec, list[str]]:
    """``spec`` and ``command`` under the ``services`` policy: a copy of ``spec`` with its own
    network namespace, the bridge's binds and (with ``egress_port``, one of the bridge's ports)
    the proxy environment; and ``command`` behind the forwarder. ``spec`` is not modified.
    Raises ValueError if ``egress_port`` is not bridged, or if the bridge's socket directory
    lies inside the workspace (the agent could then replace the sockets at their host path)."""
    if egress_port is not None and egress_port not in bridge.ports:
        raise ValueError(f"egress proxy port {egress_port} is not one of the bridged ports")
    if bridge.sock_dir.is_relative_to(os.path.abspath(spec.workspace)):
        raise ValueError(f"the bridge's sockets {bridge.sock_dir} must be outside the workspace")
    env = dict(spec.env)
    if egress_port is not None:
        env.update(proxy_env(egress_port))
    confined = dataclasses.replace(
        spec,
        unshare_net=True,
        ro_binds_at=[*spec.ro_binds_at, *sandbox_binds(bridge.sock_dir)],
        env=env,
    )
    return confined, [*forwarder_argv(bridge.ports, python=python), *command]


@functools.cache
def network_isolation_available() -> bool:
    """True if bwrap can give a sandbox its own network namespace here (``--unshare-net``
    needs namespace rights some containers refuse). Probed once, cached."""
    if not bwrap_available():
        return False
    probe = [shutil.which("bwrap") or "bwrap", *system_mounts(), "--unshare-net"]
    return succeeds([*probe, "--unshare-pid", "--die-with-parent", "true"])
