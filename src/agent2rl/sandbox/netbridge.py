"""The sandbox's end of the service bridge: TCP on the sandbox's own loopback to UNIX sockets.

Standard library only, and importable without the rest of the harness: this file is bound
read-only into the agent's sandbox (see :mod:`agent2rl.sandbox.network`) and started there as

    python3 -I -S /run/agent2rl/netbridge.py --map 8123=/run/agent2rl/net/8123.sock ... -- CMD...

It binds ``127.0.0.1:PORT`` (and ``[::1]:PORT`` where the namespace has IPv6) for every
``--map``, starts a forwarder process that copies each accepted connection to and from the
mapped UNIX socket (whose other end, on the host, connects to the host's ``127.0.0.1:PORT``),
and then *executes* ``CMD`` in its own place. So the agent keeps its URLs
(``http://127.0.0.1:PORT``), keeps its pid, its exit status and its signals exactly as without
the bridge, and has no extra child to wait for: the forwarder is double-forked away, in a session
of its own. The ports are listening before ``CMD`` starts, so its first request cannot race the
forwarder.

Lifetime: the forwarder watches the command's pid (a pidfd; polling where the kernel or the
interpreter lacks them) and exits when the command does. Under bwrap it also dies with the pid
namespace, which ends when the command (bwrap's first process) ends. It ignores SIGTERM, SIGINT
and SIGHUP, so the harness's "terminate the tree" leaves the agent its network during its grace
period (a final submission in a SIGTERM handler still reaches the grader).

Threat model: the forwarder runs as the agent's user, so the agent can kill it (or bind the
ports first): that cuts only the agent itself off from its own services. Nothing here is a
security boundary; the boundary is the network namespace (only loopback) and the host side,
which forwards each socket to exactly one host port.

:func:`splice` (the byte copy, with half-close and byte counts) and :func:`forward` (one
accepted connection) are shared with the host side, and :func:`splice` with the egress proxy,
which import this module as ``agent2rl.sandbox.netbridge``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import signal
import socket
import sys
from collections.abc import Awaitable, Callable

CHUNK = 64 * 1024
#: connections open at once through one forwarder; more are closed at once (no fd exhaustion)
MAX_CONNECTIONS = 512
CONNECT_TIMEOUT_S = 10.0
#: how long a cleanly finished connection may take to flush before it is aborted
CLOSE_TIMEOUT_S = 5.0
#: exit status when the bridge itself cannot start (the command never ran): env(1)'s convention
EXIT_BRIDGE_FAILED = 125
#: the forwarder ignores these: the harness's "terminate the tree" must leave the agent its
#: network for its grace period
_SHIELDED = {signal.SIGTERM, signal.SIGINT, signal.SIGHUP}

Stream = tuple[asyncio.StreamReader, asyncio.StreamWriter]


async def splice(
    a: Stream,
    b: Stream,
    *,
    counts: list[int] | None = None,
    sniff: bytearray | None = None,
    end_with_b: bool = False,
) -> None:
    """Copy ``a``'s bytes to ``b`` and ``b``'s to ``a`` until both directions reach EOF.

    Data flows as it arrives (a streamed response is not held back). When one side's reading
    half ends, the other side's writing half is shut down (half-close) and the opposite
    direction goes on. A connection error on either side aborts both. With ``end_with_b``, the
    copy ends as soon as ``b`` has finished sending (an HTTP response with ``Connection:
    close``), whatever ``a`` still does. ``counts`` (two ints) is increased by the bytes copied
    a->b and b->a, also when the copy fails midway. ``sniff`` receives the first bytes of b->a
    (up to 512). Both writers are closed on return, and on cancellation.
    """
    counts = counts if counts is not None else [0, 0]
    up = asyncio.ensure_future(_pump(a[0], b[1], counts, 0, None))
    down = asyncio.ensure_future(_pump(b[0], a[1], counts, 1, sniff))
    clean = False
    try:
        pending: set[asyncio.Future] = {up, down}
        while pending:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            if any(task.exception() is not None for task in done) or (end_with_b and down in done):
                break
        else:
            clean = True
        clean = clean or (end_with_b and down.done() and down.exception() is None)
    finally:
        for task in (up, down):
            task.cancel()
        await asyncio.gather(up, down, return_exceptions=True)
        await close_streams(a[1], b[1], graceful=clean)


async def _pump(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    counts: list[int],
    index: int,
    sniff: bytearray | None,
) -> None:
    while True:
        data = await reader.read(CHUNK)
        if not data:
            break
        if sniff is not None and len(sniff) < 512:
            sniff += data[: 512 - len(sniff)]
        counts[index] += len(data)
        writer.write(data)
        await writer.drain()
    if not writer.is_closing() and writer.can_write_eof():
        writer.write_eof()


async def close_streams(*writers: asyncio.StreamWriter, graceful: bool) -> None:
    """Close ``writers``: flushing what they still buffer when ``graceful`` (bounded by
    :data:`CLOSE_TIMEOUT_S`, so a peer that never reads cannot pin the socket), else at once."""
    for writer in writers:
        if graceful:
            writer.close()
        else:
            writer.transport.abort()
    if graceful:
        waits = [w.wait_closed() for w in writers]
        try:
            await asyncio.wait_for(asyncio.gather(*waits, return_exceptions=True), CLOSE_TIMEOUT_S)
        except asyncio.TimeoutError:  # noqa: UP041 (not builtin TimeoutError before 3.11)
            for writer in writers:
                writer.transport.abort()


async def forward(
    client: Stream,
    connect: Callable[[], Awaitable[Stream]],
    active: set[asyncio.Task],
    max_connections: int,
    timeout: float,
    name: str = "",
) -> None:
    """Serve one connection a forwarder accepted: :func:`splice` it to the stream
    ``connect()`` opens. ``client`` is reset at once when ``active`` (the forwarder's open
    connections, this one among them meanwhile) holds more than ``max_connections``, or when
    the upstream is not connected within ``timeout`` s (said on stderr, by ``name``, unless
    it is empty). Never raises: one broken connection never stops the others."""
    task = asyncio.current_task()
    assert task is not None
    active.add(task)
    writer = client[1]
    try:
        if len(active) > max_connections:
            writer.transport.abort()
            return
        try:
            upstream = await asyncio.wait_for(connect(), timeout)
        except (OSError, asyncio.TimeoutError) as err:  # noqa: UP041 (as above)
            if name:
                print(f"netbridge: {name} unreachable: {err}", file=sys.stderr, flush=True)
            writer.transport.abort()
            return
        await splice(client, upstream)
    except asyncio.CancelledError:
        pass  # the forwarder stops (3.11's stream server logs a cancelled handler as an error)
    except Exception:
        writer.transport.abort()
    finally:
        if not writer.is_closing():
            writer.transport.abort()  # cancelled before splice took the writer over
        active.discard(task)


# --- the in-sandbox forwarder ---------------------------------------------------------------


def main(argv: list[str] | None = None) -> None:
    """Parse ``--map PORT=SOCKET ... -- CMD ...``, listen, fork the forwarder, exec ``CMD``.

    Never returns: ``CMD`` replaces this process. Exits 125 (before ``CMD`` ran) on bad
    arguments or a port that cannot be bound, 127 when ``CMD`` is not found and 126 when it
    cannot be executed, like a shell.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        maps, command = _parse(args)
        listeners = [(sock, path) for port, path in maps for sock in _listen(port)]
    except (ValueError, OSError) as err:
        _fail(f"{err}", EXIT_BRIDGE_FAILED)
    # A pidfd for this process (which becomes the command), opened *before* the fork so that
    # the forwarder can never watch a recycled pid; None where unsupported.
    try:
        watch: int | None = os.pidfd_open(os.getpid())
    except (AttributeError, OSError):
        watch = None
    # Blocked, not lost, until the forwarder ignores them: a SIGTERM that came between its
    # fork and its signal() calls would otherwise kill it with the default action.
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, _SHIELDED)
    first = os.fork()
    if first == 0:
        _daemon(listeners, watch, os.getppid(), mask)
    os.waitpid(first, 0)
    for sock, _ in listeners:
        sock.close()
    if watch is not None:
        os.close(watch)
    # The mask survives exec: the command gets the original one (a pending signal lands here).
    signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    _exec(command)


def _parse(args: list[str]) -> tuple[list[tuple[int, str]], list[str]]:
    if "--" not in args:
        raise ValueError("usage: netbridge.py --map PORT=SOCKET ... -- COMMAND [ARG...]")
    cut = args.index("--")
    options, command = args[:cut], args[cut + 1 :]
    if not command:
        raise ValueError("no command after --")
    maps: list[tuple[int, str]] = []
    it = iter(options)
    for opt in it:
        if opt != "--map":
            raise ValueError(f"unknown option {opt!r}; expected --map PORT=SOCKET")
        spec = next(it, "")
        port, sep, path = spec.partition("=")
        if not sep or not port.isdigit() or not 0 < int(port) < 65536 or not path:
            raise ValueError(f"bad --map {spec!r}; expected PORT=SOCKET, e.g. 8123=/x/8123.sock")
        maps.append((int(port), path))
    return maps, command


def _listen(port: int) -> list[socket.socket]:
    """Listening sockets on the namespace's loopback: IPv4 always (an error if impossible),
    IPv6 where the namespace has it (``localhost`` may resolve to ``::1`` first)."""
    out = [_bound(socket.AF_INET, "127.0.0.1", port)]
    with contextlib.suppress(OSError):
        out.append(_bound(socket.AF_INET6, "::1", port))
    return out


def _bound(family: int, host: str, port: int) -> socket.socket:
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind((host, port))
        sock.listen(socket.SOMAXCONN)
        sock.setblocking(False)
    except OSError as err:
        sock.close()
        raise OSError(f"cannot listen on {host} port {port}: {err}") from None
    return sock


def _daemon(
    listeners: list[tuple[socket.socket, str]],
    watch: int | None,
    pid: int,
    mask: set[signal.Signals],
) -> None:
    """The first child: leave the command's session and group, fork the forwarder, exit, so
    the forwarder is adopted by the namespace's init and is nobody's child the command sees."""
    try:
        os.setsid()
        if os.fork() == 0:
            for sig in _SHIELDED:
                signal.signal(sig, signal.SIG_IGN)
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
            null = os.open(os.devnull, os.O_RDWR)
            os.dup2(null, 0)
            os.dup2(null, 1)  # stderr stays: the agent's log is where a bridge error belongs
            os.close(null)
            asyncio.run(_forward_all(listeners, watch, pid))
    except BaseException as err:  # the forwarder must never return into main() and exec CMD
        print(f"netbridge: forwarder failed: {err!r}", file=sys.stderr, flush=True)
    finally:
        os._exit(0)


async def _forward_all(
    listeners: list[tuple[socket.socket, str]], watch: int | None, pid: int
) -> None:
    loop = asyncio.get_running_loop()
    ended = loop.create_future()
    active: set[asyncio.Task] = set()

    async def on_connect(path: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        connect = functools.partial(asyncio.open_unix_connection, path, limit=CHUNK)
        await forward((reader, writer), connect, active, MAX_CONNECTIONS, CONNECT_TIMEOUT_S, path)

    for sock, path in listeners:
        await asyncio.start_server(lambda r, w, p=path: on_connect(p, r, w), sock=sock, limit=CHUNK)
    if watch is not None:
        loop.add_reader(watch, lambda: ended.done() or ended.set_result(None))
        await ended
    else:
        while _alive(pid):
            await asyncio.sleep(0.5)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _exec(command: list[str]) -> None:
    # Python ignores SIGPIPE and SIGXFSZ, and an ignored signal stays ignored across exec:
    # restore them, as subprocess does, so `yes | head` behaves as without the bridge.
    for sig in (signal.SIGPIPE, signal.SIGXFSZ):
        signal.signal(sig, signal.SIG_DFL)
    try:
        os.execvp(command[0], command)
    except FileNotFoundError:
        _fail(f"{command[0]}: command not found", 127)
    except OSError as err:
        _fail(f"{command[0]}: cannot execute: {err.strerror}", 126)


def _fail(message: str, code: int) -> None:
    print(f"netbridge: {message}", file=sys.stderr, flush=True)
    os._exit(code)


if __name__ == "__main__":
    main()
