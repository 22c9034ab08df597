"""The egress proxy: a real proxy process, a fake upstream on the host's loopback, and (for the
last test) a real bwrap sandbox without a network of its own."""

from __future__ import annotations

import http.server
import json
import socket
import subprocess
import textwrap
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent2rl.child_process import ServiceHandle
from agent2rl.files import read_jsonl
from agent2rl.sandbox.bwrap import SandboxSpec, bwrap_argv, python_ro_binds
from agent2rl.sandbox.egress import (
    DEFAULT_ALLOWLIST,
    Allowlist,
    AllowRule,
    parse_head,
    parse_rule,
    start_egress_proxy,
    summarize_egress,
)
from agent2rl.sandbox.network import ServiceBridge, confine, network_isolation_available


class _Upstream(http.server.BaseHTTPRequestHandler):
    """A stand-in for a package index: records what it was sent, answers ``payload``."""

    seen: list[dict]

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        self.seen.append({"path": self.path, "headers": dict(self.headers), "body": body})
        if self.path.startswith("/hold"):  # an open tunnel: headers, then silence
            self.send_response(200)
            self.end_headers()
            self.wfile.flush()
            time.sleep(5)
            return
        out = b"payload"
        self.send_response(200)
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    do_GET = do_POST = _answer

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def upstream() -> Iterator[tuple[int, list[dict]]]:
    class Handler(_Upstream):
        seen: list[dict] = []

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield server.server_address[1], Handler.seen
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def proxy(tmp_path: Path, upstream: tuple[int, list[dict]]) -> Iterator[ServiceHandle]:
    port = upstream[0]
    handle = start_egress_proxy(
        [f"127.0.0.1:{port}", f"localhost:{port}", "*.agent2rl.invalid"],
        tmp_path / "egress.jsonl",
        ready_file=tmp_path / "egress.ready.json",
        stdout_log=tmp_path / "egress.out",
    )
    try:
        yield handle
    finally:
        handle.stop()


def _log(tmp_path: Path) -> list[dict]:
    # A row is written when its connection ends, just after the client saw the end.
    deadline = time.monotonic() + 5
    rows: list[dict] = []
    while time.monotonic() < deadline:
        path = tmp_path / "egress.jsonl"
        rows = read_jsonl(path) if path.exists() else []
        if rows and all(r.get("duration_s") is not None for r in rows):
            return rows
        time.sleep(0.05)
    return rows


def _wait_rows(tmp_path: Path, n: int) -> list[dict]:
    deadline = time.monotonic() + 5
    while len(rows := _log(tmp_path)) < n and time.monotonic() < deadline:
        time.sleep(0.05)
    return rows


def _via(proxy: ServiceHandle) -> urllib.request.OpenerDirector:
    return urllib.request.build_opener(urllib.request.ProxyHandler({"http": proxy.url}))


def _raw(proxy: ServiceHandle, data: bytes, read: bool = True) -> bytes:
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as s:
        s.sendall(data)
        if not read:
            return b""
        s.shutdown(socket.SHUT_WR)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
        return out


def _status(response: bytes) -> int:
    return int(response.split(b" ", 2)[1])


def test_allowed_plain_http_is_fetched_and_logged(
    proxy: ServiceHandle, upstream: tuple[int, list[dict]], tmp_path: Path
) -> None:
    port, seen = upstream
    url = f"http://127.0.0.1:{port}/simple/torch/?token=QUERYSECRET"
    request = urllib.request.Request(
        url,
        data=b"BODYSECRET",
        headers={
            "Authorization": "Bearer AUTHSECRET",
            "Proxy-Authorization": "Basic PROXYSECRET",
            "Host": "evil.example",
        },
    )
    with _via(proxy).open(request, timeout=10) as response:
        assert response.read() == b"payload"
    [got] = seen
    assert got["path"] == "/simple/torch/?token=QUERYSECRET"  # origin form, query kept
    assert got["body"] == b"BODYSECRET"
    assert got["headers"]["Authorization"] == "Bearer AUTHSECRET"  # end to end
    assert "Proxy-Authorization" not in got["headers"]  # the proxy's own: dropped
    assert got["headers"]["Host"] == f"127.0.0.1:{port}"  # from the URL, never the client's
    assert got["headers"]["Connection"] == "close"
    [row] = _log(tmp_path)
    assert row["method"] == "POST" and row["host"] == "127.0.0.1" and row["port"] == port
    assert row["allowed"] is True and row["status"] == 200
    assert row["path"] == "/simple/torch/"  # no query string: it may carry a token
    assert row["bytes_up"] > len(b"BODYSECRET") and row["bytes_down"] > len(b"payload")
    assert row["duration_s"] >= 0
    text = (tmp_path / "egress.jsonl").read_text()
    for secret in ("QUERYSECRET", "BODYSECRET", "AUTHSECRET", "PROXYSECRET"):
        assert secret not in text


def test_allowed_connect_is_tunnelled_and_logged(
    proxy: ServiceHandle, upstream: tuple[int, list[dict]], tmp_path: Path
) -> None:
    port, seen = upstream
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as s:
        s.sendall(f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
        assert s.recv(1000) == b"HTTP/1.1 200 Connection established\r\n\r\n"
        # The tunnel is byte-transparent: speak HTTP through it as TLS would be spoken.
        s.sendall(b"GET /inside HTTP/1.0\r\nHost: x\r\n\r\n")
        s.shutdown(socket.SHUT_WR)  # half-close: the answer still comes back
        out = b""
        while chunk := s.recv(65536):
            out += chunk
    assert out.startswith(b"HTTP/1.0 200") and out.endswith(b"payload")
    assert seen[0]["path"] == "/inside"
    [row] = _log(tmp_path)
    assert (row["method"], row["host"], row["port"], row["status"]) == (
        "CONNECT",
        "127.0.0.1",
        port,
        200,
    )
    assert row["allowed"] is True and "path" not in row
    assert row["bytes_up"] > 0 and row["bytes_down"] > len(b"payload")


def test_denied_hosts_and_ports_get_403_naming_the_policy(
    proxy: ServiceHandle, upstream: tuple[int, list[dict]], tmp_path: Path
) -> None:
    port, seen = upstream
    with pytest.raises(urllib.error.HTTPError) as err:
        _via(proxy).open("http://example.com/gsm8k/test.jsonl", timeout=10)
    assert err.value.code == 403
    body = json.loads(err.value.read())
    assert "network=services" in body["policy"] and "example.com" in body["error"]
    assert f"127.0.0.1:{port}" in body["allowed"]
    connect = _raw(proxy, b"CONNECT github.com:443 HTTP/1.1\r\n\r\n")
    assert _status(connect) == 403 and b"network policy" in connect.split(b"\r\n")[0]
    wrong_port = _raw(proxy, b"CONNECT 127.0.0.1:22 HTTP/1.1\r\n\r\n")
    assert _status(wrong_port) == 403 and b"port 22 is not allowed" in wrong_port
    # An allowlisted *name* that resolves to loopback would reach the harness's services.
    loopback = _raw(proxy, f"CONNECT localhost:{port} HTTP/1.1\r\n\r\n".encode())
    assert _status(loopback) == 403 and b"loopback" in loopback
    unresolvable = _raw(proxy, b"CONNECT nothing.agent2rl.invalid:443 HTTP/1.1\r\n\r\n")
    assert _status(unresolvable) == 403 and b"does not resolve" in unresolvable
    assert seen == []
    rows = _wait_rows(tmp_path, 5)
    assert [(r["host"], r["port"], r["allowed"], r["status"]) for r in rows] == [
        ("example.com", 80, False, 403),
        ("github.com", 443, False, 403),
        ("127.0.0.1", 22, False, 403),
        ("localhost", port, False, 403),
        ("nothing.agent2rl.invalid", 443, False, 403),
    ]
    assert all(r["bytes_down"] == 0 and r["reason"] for r in rows)


def test_an_allowed_host_that_is_down_gets_502(tmp_path: Path) -> None:
    dead = socket.socket()
    dead.bind(("127.0.0.1", 0))
    port = dead.getsockname()[1]
    dead.close()  # nothing listens there now
    handle = start_egress_proxy(
        [f"127.0.0.1:{port}"],
        tmp_path / "egress.jsonl",
        ready_file=tmp_path / "ready.json",
        stdout_log=tmp_path / "egress.out",
    )
    try:
        response = _raw(handle, f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n".encode())
    finally:
        handle.stop()
    assert _status(response) == 502
    [row] = _log(tmp_path)
    assert row["allowed"] is True and row["status"] == 502 and "unreachable" in row["reason"]


MALFORMED = [
    b"garbage\r\n\r\n",
    b"GET /relative HTTP/1.1\r\nHost: x\r\n\r\n",
    b"GET https://pypi.org/ HTTP/1.1\r\n\r\n",
    b"CONNECT nohostport HTTP/1.1\r\n\r\n",
    b"CONNECT pypi.org:99999 HTTP/1.1\r\n\r\n",
    b"CONNECT [::1 HTTP/1.1\r\n\r\n",
    b"GET http://pypi.org/ HTTP/1.1\r\nno colon here\r\n\r\n",
    b"get http://pypi.org/ HTTP/1.1\r\n\r\n",
    b"GET http://pypi.org/ SPDY/3\r\n\r\n",
    b"\xff\xfe\x00 junk\r\n\r\n",
    b"GET http://pypi.org/ HTTP/1.1\r\nX: " + b"a" * 70_000 + b"\r\n\r\n",
    b"GET http://pypi.org/ HTT",  # then EOF
]


def test_malformed_requests_get_400_and_the_proxy_keeps_serving(
    proxy: ServiceHandle, upstream: tuple[int, list[dict]], tmp_path: Path
) -> None:
    for data in MALFORMED:
        response = _raw(proxy, data)
        assert _status(response) == 400, (data[:40], response)
        assert b'"policy"' in response
    _raw(proxy, b"", read=True)  # connects and leaves: nothing to log
    assert proxy.proc.poll() is None
    with _via(proxy).open(f"http://127.0.0.1:{upstream[0]}/after", timeout=10) as response:
        assert response.read() == b"payload"
    rows = _wait_rows(tmp_path, len(MALFORMED) + 1)
    assert len(rows) == len(MALFORMED) + 1
    assert [r["status"] for r in rows[:-1]] == [400] * len(MALFORMED)
    assert all(r["allowed"] is False for r in rows[:-1]) and rows[-1]["status"] == 200


@pytest.mark.timing  # asserts on wall-clock time (generous margin)
def test_stopping_the_proxy_cuts_and_logs_open_tunnels(
    proxy: ServiceHandle, upstream: tuple[int, list[dict]], tmp_path: Path
) -> None:
    port = upstream[0]
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as s:
        s.sendall(f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n".encode())
        assert s.recv(1000).startswith(b"HTTP/1.1 200")
        s.sendall(b"GET /hold HTTP/1.0\r\n\r\n")
        assert s.recv(12) == b"HTTP/1.0 200"
        started = time.monotonic()
        proxy.stop()
        assert proxy.proc.returncode == 0
        assert time.monotonic() - started < 3  # not the upstream's 5 s
    [row] = _log(tmp_path)
    assert row["method"] == "CONNECT" and row["status"] == 200
    assert row["reason"] == "proxy stopped" and row["bytes_down"] >= 12


def test_summarize_egress(tmp_path: Path) -> None:
    assert summarize_egress(tmp_path / "missing.jsonl")["requests"] == 0
    log = tmp_path / "egress.jsonl"
    rows = [
        {"method": "CONNECT", "host": "pypi.org", "port": 443, "allowed": True, "status": 200,
         "bytes_up": 10, "bytes_down": 1000},
        {"method": "CONNECT", "host": "pypi.org", "port": 443, "allowed": True, "status": 200,
         "bytes_up": 10, "bytes_down": 500},
        {"method": "GET", "host": "huggingface.co", "port": 80, "allowed": True, "status": 502,
         "bytes_up": 5, "bytes_down": 0, "path": "/x"},
        {"method": "CONNECT", "host": "github.com", "port": 443, "allowed": False, "status": 403,
         "bytes_up": 0, "bytes_down": 0},
        {"method": None, "host": None, "port": None, "allowed": False, "status": 400,
         "bytes_up": 0, "bytes_down": 0},
    ]  # fmt: skip
    log.write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"torn')
    summary = summarize_egress(log)
    assert summary["requests"] == 5
    assert (summary["allowed"], summary["denied"], summary["failed"]) == (3, 2, 1)
    assert (summary["bytes_up"], summary["bytes_down"]) == (25, 1500)
    assert summary["hosts"][0] == {
        "host": "pypi.org", "requests": 2, "denied": 0, "bytes_down": 1500
    }  # fmt: skip
    assert summary["denied_hosts"] == ["github.com:443"]
    assert summary["urls"] == ["http://huggingface.co:80/x"]


def test_allowlist_rules() -> None:
    rules = Allowlist(["pypi.org", "*.hf.co", "127.0.0.1:8080", "[::1]:9", "Example.COM."])
    assert rules.decide("pypi.org", 443) is None and rules.decide("pypi.org", 80) is None
    assert "port 22" in (rules.decide("pypi.org", 22) or "")
    assert rules.decide("evil-pypi.org", 443) is not None
    assert rules.decide("cas-bridge.xethub.hf.co", 443) is None
    assert rules.decide("hf.co", 443) is not None  # *.x is subdomains only
    assert rules.decide("hf.co.evil.net", 443) is not None
    assert rules.decide("127.0.0.1", 8080) is None and rules.decide("127.0.0.1", 443) is not None
    assert rules.decide("::1", 9) is None and rules.decide("example.com", 443) is None
    assert str(parse_rule("[::1]:9")) == "[::1]:9" and str(parse_rule("*.hf.co")) == "*.hf.co"
    assert parse_rule("a.b:1") == AllowRule("a.b", 1)
    for bad in (
        "",
        "*",
        "*.com",
        "http://pypi.org",
        "pypi.org/simple",
        "a:0",
        "a:x",
        "::1",
        "a*b.c",
    ):
        with pytest.raises(ValueError, match="allowlist entry"):
            parse_rule(bad)
    default = Allowlist(DEFAULT_ALLOWLIST)
    for host in ("download.pytorch.org", "registry.npmjs.org"):
        assert default.decide(host, 443) is None, host
    # The index and the hub are reached through the name proxies, which see names; directly,
    # over HTTPS, this proxy would see only the host.
    for host in ("github.com", "objects.githubusercontent.com", "raw.githubusercontent.com",
                 "pypi.org", "files.pythonhosted.org", "huggingface.co", "cdn-lfs.hf.co",
                 "cas-bridge.xethub.hf.co"):  # fmt: skip
        assert default.decide(host, 443) is not None, host
    with pytest.raises(ValueError, match="allowlist entry"):
        start_egress_proxy(["http://x"], Path("l"), ready_file=Path("r"), stdout_log=Path("o"))


def test_parse_head_keeps_what_the_origin_needs() -> None:
    req = parse_head(b"GET http://user:pw@PyPI.org./simple/?q=1 HTTP/1.1\r\nAccept: */*\r\n\r\n")
    assert (req.method, req.host, req.port, req.path) == ("GET", "pypi.org", 80, "/simple/")
    req = parse_head(b"CONNECT [2001:db8::1]:443 HTTP/1.1\r\n\r\n")
    assert (req.host, req.port) == ("2001:db8::1", 443)


@pytest.mark.skipif(
    not network_isolation_available(),
    reason="bwrap is missing or cannot create a network namespace here (--unshare-net refused)",
)
def test_sandboxed_agent_gets_out_only_through_the_proxy(
    proxy: ServiceHandle, upstream: tuple[int, list[dict]], tmp_path: Path
) -> None:
    port = upstream[0]
    ws = tmp_path / "ws"
    ws.mkdir()
    probe = textwrap.dedent(
        f"""
        import json, os, subprocess, urllib.request
        out = {{"env": {{k: os.environ.get(k) for k in ("HTTP_PROXY", "https_proxy", "NO_PROXY")}}}}
        url = "http://127.0.0.1:{port}/via-proxy"
        def fetch(proxies):
            opener = urllib.request.build_opener(urllib.request.ProxyHandler(proxies))
            try:
                return opener.open(url, timeout=5).read().decode()
            except Exception as exc:
                return type(exc).__name__ + ": " + str(exc)
        # The fake upstream is on 127.0.0.1, which NO_PROXY (rightly) sends around the proxy.
        os.environ.pop("NO_PROXY"), os.environ.pop("no_proxy")
        out["proxied"] = fetch({{"http": os.environ["HTTP_PROXY"]}})
        out["direct"] = fetch({{}})
        # curl tunnels through CONNECT (-p), as it would for https://
        curl = ["curl", "-sS", "-p", "-x", os.environ["HTTPS_PROXY"], "--noproxy", "", url]
        out["tunnel"] = subprocess.run(curl, capture_output=True, text=True).stdout
        curl = ["curl", "-sS", "-x", os.environ["HTTP_PROXY"], "http://pypi.example.net/x"]
        out["denied"] = subprocess.run(curl, capture_output=True, text=True).stdout
        print(json.dumps(out))
        """
    )
    spec = SandboxSpec(workspace=ws, ro_binds=python_ro_binds(), env={"PATH": "/usr/bin:/bin"})
    with ServiceBridge(tmp_path / "net", [proxy.port]) as bridge:
        spec, command = confine(spec, bridge, ["python3", "-c", probe], egress_port=proxy.port)
        proc = subprocess.run(bwrap_argv(spec, command), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["env"]["HTTP_PROXY"] == f"http://127.0.0.1:{proxy.port}" == out["env"]["https_proxy"]
    assert out["proxied"] == "payload" and out["tunnel"] == "payload"
    assert out["direct"].startswith("URLError")  # the upstream's port is not bridged
    assert json.loads(out["denied"])["policy"].startswith("network=services")
    rows = _wait_rows(tmp_path, 3)
    assert sorted((r["method"], r["allowed"]) for r in rows) == [
        ("CONNECT", True),
        ("GET", False),
        ("GET", True),
    ]
