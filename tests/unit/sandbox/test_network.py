"""The ``services`` network policy, with real bwrap network namespaces, the real forwarder and
bridge, and HTTP/TCP servers on the host's loopback."""

from __future__ import annotations

import http.server
import json
import os
import signal
import socket
import socketserver
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from agent2rl.sandbox.bwrap import SandboxSpec, bwrap_argv, python_ro_binds
from agent2rl.sandbox.network import (
    SANDBOX_NET_DIR,
    SANDBOX_NETBRIDGE,
    ServiceBridge,
    confine,
    forwarder_argv,
    network_isolation_available,
    network_record,
    parse_network_policy,
    proxy_env,
    sandbox_binds,
)

needs_netns = pytest.mark.skipif(
    not network_isolation_available(),
    reason="bwrap is missing or cannot create a network namespace here (--unshare-net refused)",
)

STREAM_GAP_S = 0.3
FORWARDER_ARGS = ["-I", "-S", str(SANDBOX_NETBRIDGE)]
CONCURRENT = 50


class _Service(http.server.BaseHTTPRequestHandler):
    """/ping: pong; /stream: three server-sent events STREAM_GAP_S apart; /hold: headers, then
    silence; /wait: answers once CONCURRENT requests are in flight at once (a barrier)."""

    barrier: threading.Barrier

    def do_GET(self) -> None:
        if self.path == "/stream":
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            try:
                for i in range(3):
                    self.wfile.write(f"data: {i}\n\n".encode())
                    self.wfile.flush()
                    time.sleep(STREAM_GAP_S)
            except OSError:
                pass  # the client left
            return
        if self.path == "/hold":  # headers, then nothing for long: an open connection
            self.send_response(200)
            self.end_headers()
            self.wfile.flush()
            time.sleep(10)
            return
        if self.path == "/wait":
            self.barrier.wait(timeout=20)
        body = b"pong"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


class _Echo(socketserver.BaseRequestHandler):
    """Reads to EOF (the client's half-close), then sends it all back and closes."""

    def handle(self) -> None:
        data = b""
        while chunk := self.request.recv(65536):
            data += chunk
        self.request.sendall(data)


def _serve(server: socketserver.TCPServer) -> Iterator[int]:
    # The default backlog (5) drops bursts of connections, which then wait a SYN retry (1 s).
    server.socket.listen(128)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def service() -> Iterator[int]:
    class Handler(_Service):
        barrier = threading.Barrier(CONCURRENT)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    yield from _serve(server)


@pytest.fixture
def echo() -> Iterator[int]:
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Echo)
    server.daemon_threads = True
    yield from _serve(server)


@pytest.fixture
def unbridged() -> Iterator[int]:
    """A server on all the host's interfaces that the sandbox must not reach."""
    server = http.server.ThreadingHTTPServer(("0.0.0.0", 0), _Service)
    server.daemon_threads = True
    yield from _serve(server)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    return ws


def _spec(workspace: Path) -> SandboxSpec:
    return SandboxSpec(
        workspace=workspace,
        ro_binds=python_ro_binds(),
        env={"PATH": "/usr/bin:/bin", "HOME": str(workspace)},
    )


def _external_ipv4() -> str | None:
    for addrs in psutil.net_if_addrs().values():
        for a in addrs:
            if a.family == socket.AF_INET and not a.address.startswith("127."):
                return a.address
    return None


def _read_all(sock: socket.socket) -> bytes:
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def _cmdline(p: psutil.Process) -> list[str]:
    try:
        return p.cmdline()
    except psutil.Error:
        return []


def _alive(p: psutil.Process) -> bool:
    try:
        return p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _bridge_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("service-bridge")]


def _processes_with(marker: str) -> list[psutil.Process]:
    """Live processes with ``marker`` in their argv (zombies have none)."""
    found = []
    for p in psutil.process_iter(["cmdline"]):
        if any(marker in part for part in (p.info["cmdline"] or [])):
            found.append(p)
    return found


# Runs inside the sandbox: every probe reports what happened instead of raising.
_PROBE = textwrap.dedent(
    """
    import json, os, socket, sys, time, urllib.request
    cfg = json.loads(sys.argv[1])
    out = {}

    def attempt(name, fn):
        try:
            out[name] = ["ok", fn()]
        except Exception as exc:
            out[name] = ["error", type(exc).__name__ + ": " + str(exc)]

    def get(url):
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        return opener.open(url, timeout=10).read().decode()

    def stream():
        s = socket.create_connection(("127.0.0.1", cfg["service"]), timeout=10)
        s.sendall(b"GET /stream HTTP/1.0\\r\\nHost: x\\r\\n\\r\\n")
        seen, buf = {}, b""
        while chunk := s.recv(65536):
            buf += chunk
            for i in range(3):
                if f"data: {i}".encode() in buf and i not in seen:
                    seen[i] = time.monotonic()
        return seen[2] - seen[0]

    def half_close():
        s = socket.create_connection(("127.0.0.1", cfg["echo"]), timeout=10)
        payload = b"x" * 300000
        s.sendall(payload)
        s.shutdown(socket.SHUT_WR)
        back = b""
        while chunk := s.recv(65536):
            back += chunk
        return back == payload

    def connect(host, port):
        socket.create_connection((host, port), timeout=3).close()
        return True

    def udp():
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.sendto(b"x", ("192.0.2.1", 53))
        return True

    attempt("ping", lambda: get(f"http://127.0.0.1:{cfg['service']}/ping"))
    attempt("localhost", lambda: get(f"http://localhost:{cfg['service']}/ping"))
    attempt("stream", stream)
    attempt("half_close", half_close)
    attempt("unbridged", lambda: connect("127.0.0.1", cfg["unbridged"]))
    if cfg["external"]:
        attempt("external", lambda: connect(cfg["external"], cfg["unbridged"]))
    attempt("dns", lambda: socket.getaddrinfo("pypi.org", 443))
    attempt("udp", udp)
    attempt("ifaces", lambda: sorted(n for _, n in socket.if_nameindex()))
    attempt("sockets", lambda: sorted(os.listdir(cfg["net_dir"])))
    print(json.dumps(out))
    """
)


@needs_netns
def test_agent_reaches_its_bridged_services_and_nothing_else(
    workspace: Path, service: int, echo: int, unbridged: int
) -> None:
    external = _external_ipv4()
    cfg = {
        "service": service,
        "echo": echo,
        "unbridged": unbridged,
        "external": external,
        "net_dir": str(SANDBOX_NET_DIR),
    }
    with ServiceBridge(workspace.parent / "net", [service, echo]) as bridge:
        spec, command = confine(
            _spec(workspace), bridge, ["python3", "-c", _PROBE, json.dumps(cfg)]
        )
        proc = subprocess.run(bwrap_argv(spec, command), capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        out = json.loads(proc.stdout)
        assert bridge.connections_served >= 4

    assert out["ping"] == ["ok", "pong"]
    assert out["localhost"] == ["ok", "pong"]
    # The stream's events arrive as they are sent, not all at the end.
    assert out["stream"][0] == "ok" and out["stream"][1] >= 1.5 * STREAM_GAP_S
    assert out["half_close"] == ["ok", True]
    assert out["unbridged"][0] == "error"  # another host loopback server: not bridged
    if external:
        assert out["external"][0] == "error"  # the host's external interface: no route
    assert out["dns"][0] == "error"
    assert out["udp"][0] == "error"
    assert out["ifaces"] == ["ok", ["lo"]]
    assert out["sockets"] == ["ok", sorted([f"{service}.sock", f"{echo}.sock"])]


@needs_netns
def test_fifty_concurrent_connections_through_the_bridge(workspace: Path, service: int) -> None:
    # /wait answers only once all CONCURRENT requests are open at once.
    probe = textwrap.dedent(
        f"""
        import concurrent.futures, urllib.request
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({{}}))
        def get(_):
            return opener.open("http://127.0.0.1:{service}/wait", timeout=30).read()
        with concurrent.futures.ThreadPoolExecutor({CONCURRENT}) as pool:
            got = list(pool.map(get, range({CONCURRENT})))
        print(sum(g == b"pong" for g in got))
        """
    )
    with ServiceBridge(workspace.parent / "net", [service]) as bridge:
        spec, command = confine(_spec(workspace), bridge, ["python3", "-c", probe])
        proc = subprocess.run(bwrap_argv(spec, command), capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.strip() == str(CONCURRENT)
        assert bridge.connections_served == CONCURRENT
    assert bridge.active_connections == 0


@needs_netns
def test_exit_status_and_signal_dispositions_pass_through(workspace: Path, service: int) -> None:
    with ServiceBridge(workspace.parent / "net", [service]) as bridge:

        def run(cmd: list[str], wrap: bool = True) -> subprocess.CompletedProcess:
            spec = _spec(workspace)
            if wrap:
                spec, cmd = confine(spec, bridge, cmd)
            return subprocess.run(bwrap_argv(spec, cmd), capture_output=True, text=True, timeout=30)

        assert run(["sh", "-c", "exit 7"]).returncode == 7
        assert run(["sh", "-c", "kill -TERM $$"]).returncode == 128 + signal.SIGTERM
        missing = run(["no-such-command-agent2rl"])
        assert missing.returncode == 127 and "command not found" in missing.stderr
        # The command is bwrap's first process, as without the bridge, and inherits no
        # ignored or blocked signal from the Python forwarder (SIGPIPE, SIGXFSZ, SIGTERM).
        status = "grep -E '^(SigIgn|SigBlk|PPid)' /proc/self/status; echo pid $$"
        wrapped = run(["sh", "-c", status])
        plain = run(["sh", "-c", status], wrap=False)
        assert wrapped.returncode == 0, wrapped.stderr
        assert wrapped.stdout == plain.stdout


@needs_netns
def test_sigterm_ends_the_command_and_the_forwarder_goes_with_it(
    workspace: Path, service: int
) -> None:
    marker = f"300.{uuid.uuid4().int % 10**9}"  # a unique, valid sleep duration
    with ServiceBridge(workspace.parent / "net", [service]) as bridge:
        for target in ("command", "bwrap"):
            spec, command = confine(_spec(workspace), bridge, ["sleep", marker])
            sandbox = subprocess.Popen(bwrap_argv(spec, command), start_new_session=True)
            try:
                deadline = time.monotonic() + 10
                while time.monotonic() < deadline:
                    # bwrap and its init (bwrap's argv), the sleep, the forwarder
                    found = _processes_with(marker)
                    sleep = [p for p in found if _cmdline(p) == ["sleep", marker]]
                    forwarder = [p for p in found if _cmdline(p)[1:4] == FORWARDER_ARGS]
                    if len(sleep) == 1 and len(forwarder) == 1:
                        break
                    time.sleep(0.05)
                assert len(sleep) == 1 and len(forwarder) == 1, [_cmdline(p) for p in found]
                # The harness SIGTERMs every process of the agent: the forwarder stays up for
                # the grace period, so a final request still reaches the services.
                forwarder[0].send_signal(signal.SIGTERM)
                time.sleep(0.2)
                assert forwarder[0].is_running() and sleep[0].is_running()
                if target == "command":
                    sleep[0].send_signal(signal.SIGTERM)
                    assert sandbox.wait(timeout=10) == 128 + signal.SIGTERM
                else:
                    sandbox.send_signal(signal.SIGTERM)
                    sandbox.wait(timeout=10)
                deadline = time.monotonic() + 5
                while _processes_with(marker) and time.monotonic() < deadline:
                    time.sleep(0.05)
                assert _processes_with(marker) == []
            finally:
                for p in _processes_with(marker):
                    p.kill()
                if sandbox.poll() is None:
                    sandbox.kill()


def test_stop_closes_every_connection_and_the_thread(tmp_path: Path, service: int) -> None:
    assert _bridge_threads() == []
    bridge = ServiceBridge(tmp_path / "net", [service])
    bridge.start()
    assert len(_bridge_threads()) == 1
    path = bridge.socket_path(service)
    assert oct(path.stat().st_mode & 0o777) == oct(0o666)
    clients = []
    for _ in range(3):
        c = socket.socket(socket.AF_UNIX)
        c.connect(str(path))
        c.sendall(b"GET /hold HTTP/1.0\r\nHost: x\r\n\r\n")
        clients.append(c)
    for c in clients:
        c.settimeout(5)
        assert c.recv(12) == b"HTTP/1.0 200"  # the response has begun and is held open
    assert bridge.active_connections == 3
    bridge.stop()
    assert _bridge_threads() == []
    assert bridge.active_connections == 0
    assert not path.exists()
    for c in clients:
        c.settimeout(2)  # /hold would keep it open 10 s: an EOF now is stop()'s doing
        try:
            while c.recv(65536):
                pass
        except ConnectionResetError:
            pass
        c.close()
    bridge.stop()  # idempotent


def test_unreachable_port_and_connection_cap(tmp_path: Path, service: int) -> None:
    dead = socket.socket()
    dead.bind(("127.0.0.1", 0))
    dead_port = dead.getsockname()[1]
    dead.close()  # nothing listens there now
    with ServiceBridge(tmp_path / "net", [service, dead_port], max_connections=2) as bridge:
        c = socket.socket(socket.AF_UNIX)
        c.settimeout(5)
        c.connect(str(bridge.socket_path(dead_port)))
        try:
            assert c.recv(10) == b""
        except ConnectionResetError:
            pass
        c.close()
        held = []
        for _ in range(3):
            s = socket.socket(socket.AF_UNIX)
            s.settimeout(5)
            s.connect(str(bridge.socket_path(service)))
            held.append(s)
        try:
            closed = held[2].recv(10)
        except ConnectionResetError:
            closed = b""
        assert closed == b""  # the third is over the cap
        held[0].sendall(b"GET /ping HTTP/1.0\r\n\r\n")
        assert _read_all(held[0]).endswith(b"pong")
        for s in held:
            s.close()


def test_long_socket_directory(tmp_path: Path, service: int) -> None:
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    with ServiceBridge(deep, [service]) as bridge:
        path = bridge.socket_path(service)
        assert len(str(path)) > 108 and path.exists()
        dfd = os.open(deep, os.O_PATH)
        try:
            c = socket.socket(socket.AF_UNIX)
            c.settimeout(5)
            c.connect(f"/proc/self/fd/{dfd}/{path.name}")
        finally:
            os.close(dfd)
        c.sendall(b"GET /ping HTTP/1.0\r\n\r\n")
        assert _read_all(c).endswith(b"pong")
        c.close()


def test_confine_builds_the_policy_without_touching_the_spec(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    spec = SandboxSpec(workspace=ws, env={"PATH": "/usr/bin"})
    bridge = ServiceBridge(tmp_path / "net", [9001, 9000])
    (tmp_path / "net").mkdir()
    confined, command = confine(spec, bridge, ["agent", "--go"], egress_port=9001, python="py")
    assert spec.unshare_net is False and spec.ro_binds_at == [] and "HTTP_PROXY" not in spec.env
    assert confined.unshare_net is True
    assert confined.ro_binds_at == sandbox_binds(tmp_path / "net")
    assert (tmp_path / "net", SANDBOX_NET_DIR) in confined.ro_binds_at
    assert confined.env["HTTPS_PROXY"] == confined.env["http_proxy"] == "http://127.0.0.1:9001"
    assert "127.0.0.1" in confined.env["NO_PROXY"].split(",")
    assert command == [
        *forwarder_argv([9000, 9001], python="py"),
        "agent",
        "--go",
    ]
    assert command[:4] == ["py", "-I", "-S", str(SANDBOX_NETBRIDGE)]
    assert command[command.index("--") + 1 :] == ["agent", "--go"]
    assert "9000=/run/agent2rl/net/9000.sock" in command
    argv = bwrap_argv(confined, command)
    assert "--unshare-net" in argv and "--unshare-net" not in bwrap_argv(spec, ["true"])
    i = argv.index(str(SANDBOX_NET_DIR))
    assert argv[i - 2 : i + 1] == ["--ro-bind", str(tmp_path / "net"), str(SANDBOX_NET_DIR)]
    with pytest.raises(ValueError, match="not one of the bridged ports"):
        confine(spec, bridge, ["agent"], egress_port=1234)
    with pytest.raises(ValueError, match="outside the workspace"):
        confine(spec, ServiceBridge(ws / "net", [9000]), ["agent"])
    assert proxy_env(5)["no_proxy"] == proxy_env(5)["NO_PROXY"]
    assert parse_network_policy("services") == "services"
    with pytest.raises(ValueError, match="host, services"):
        parse_network_policy("none")


def test_forwarder_rejects_bad_arguments() -> None:
    from agent2rl.sandbox import netbridge

    script = netbridge.__file__
    for args in (["true"], ["--map", "x=1", "--", "true"], ["--bogus", "--", "true"], ["--"]):
        proc = subprocess.run(
            [sys.executable, "-I", "-S", script, *args], capture_output=True, text=True, timeout=10
        )
        assert proc.returncode == netbridge.EXIT_BRIDGE_FAILED, (args, proc.stderr)
        assert proc.stderr.startswith("netbridge: ")


@needs_netns
@pytest.mark.skipif(os.geteuid() != 0, reason="running the agent as another user needs root")
def test_an_unprivileged_agent_reaches_its_services(tmp_path: Path, service: int) -> None:
    if "run_as" not in SandboxSpec.__dataclass_fields__:
        pytest.skip("SandboxSpec has no run_as here")
    ws = tmp_path / "ws"
    ws.mkdir()
    ws.chmod(0o777)
    uid = 61000 + os.getpid() % 1000
    spec = SandboxSpec(workspace=ws, ro_binds=python_ro_binds(), env={"PATH": "/usr/bin:/bin"})
    spec.run_as = (uid, uid)  # type: ignore[attr-defined]
    probe = (
        "import os, urllib.request;"
        "o = urllib.request.build_opener(urllib.request.ProxyHandler({}));"
        f"print(os.getuid(), o.open('http://127.0.0.1:{service}/ping', timeout=10).read().decode())"
    )
    with ServiceBridge(tmp_path / "net", [service]) as bridge:
        confined, command = confine(spec, bridge, ["python3", "-c", probe])
        proc = subprocess.run(
            bwrap_argv(confined, command), capture_output=True, text=True, timeout=30
        )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [str(uid), "pong"]


def test_forwarder_lives_exactly_as_long_as_its_command(tmp_path: Path, service: int) -> None:
    """Without bwrap's pid namespace to tear it down, the forwarder still ends with the
    command (it watches the command's pidfd), and the command still sees the bridged port."""
    from agent2rl.sandbox import netbridge

    gate = tmp_path / f"go-{uuid.uuid4().hex}"  # the command waits for it; also a marker
    with ServiceBridge(tmp_path / "net", [service]) as bridge:
        # Nothing in this test's namespace may take the service's port: use another one.
        free = socket.socket()
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
        free.close()
        script = (
            "import os, sys, time, urllib.request\n"
            "while not os.path.exists(sys.argv[2]): time.sleep(0.01)\n"
            "o = urllib.request.build_opener(urllib.request.ProxyHandler({}))\n"
            "print(o.open(sys.argv[1], timeout=10).read().decode())\n"
        )
        argv = [sys.executable, "-I", "-S", netbridge.__file__]
        argv += ["--map", f"{port}={bridge.socket_path(service)}", "--"]
        argv += [sys.executable, "-c", script, f"http://127.0.0.1:{port}/ping", str(gate)]
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, start_new_session=True)
        try:
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                found = _processes_with(str(gate))  # the command, the forwarder
                command = [p for p in found if p.pid == proc.pid and "-c" in _cmdline(p)]
                forwarder = [p for p in found if p.pid != proc.pid and _alive(p)]
                # Exec'd, and the short-lived intermediate child is gone: the forwarder is
                # double-forked, not a child the command could wait for.
                if command and len(forwarder) == 1 and forwarder[0].ppid() != proc.pid:
                    break
                time.sleep(0.02)
            assert command and len(forwarder) == 1, [_cmdline(p) for p in found]
            gate.touch()
            out, _ = proc.communicate(timeout=20)
            assert proc.returncode == 0 and out.strip() == "pong"
            forwarder[0].wait(timeout=5)  # raises if it outlives the command
        finally:
            for p in _processes_with(str(gate)):
                p.kill()


def test_network_record(tmp_path: Path) -> None:
    assert network_record("host", {"grading": 1}) == {"policy": "host", "services": {"grading": 1}}
    log = tmp_path / "egress.jsonl"
    log.write_text(
        json.dumps({"method": "CONNECT", "host": "pypi.org", "port": 443, "allowed": True,
                    "status": 200, "bytes_up": 1, "bytes_down": 2}) + "\n"
    )  # fmt: skip
    record = network_record(
        "services", {"rollout": 2, "grading": 1}, allowlist=["pypi.org"], egress_log=log
    )
    assert list(record["services"]) == ["grading", "rollout"]
    assert record["egress_allowlist"] == ["pypi.org"]
    assert record["egress"]["requests"] == 1 and record["egress"]["hosts"][0]["host"] == "pypi.org"
    assert network_record("services", {}, egress_log=None)["egress"] is None
