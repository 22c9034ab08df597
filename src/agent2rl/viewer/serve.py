"""Serving the viewer: host and token rules, and the announce file.

Every viewer requires a token, on loopback too: a random one per start unless ``--token``
gives one, printed in the URL the user opens (as Jupyter does). An agent running under
``--network host`` or ``--sandbox none`` reaches the host's loopback, and without a token it
would read every other run's transcripts, diffs and scores there.

``agent2rl view`` writes the announce file of :mod:`agent2rl.viewer_link` while it serves
(mode 0600: readable by the harness's user only, never by a sandboxed agent's uid).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import socket
from collections.abc import Callable
from pathlib import Path

from agent2rl.errors import UserError
from agent2rl.files import read_json, write_text_atomic
from agent2rl.viewer_link import announce_path


def check_access(host: str, token: str | None) -> str:
    """The token the viewer requires, on any ``host``, loopback included: ``token``, or a
    fresh random one. Raises UserError for a token too short to protect anything."""
    if token is not None and len(token) < 16:
        raise UserError("--token must be at least 16 characters (or leave it out for a random one)")
    return token or secrets.token_urlsafe(24)


def serve_viewer(
    root: Path,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    token: str | None = None,
    on_ready: Callable[[str], None] | None = None,
) -> None:
    """Serve the viewer of ``root`` on ``host:port`` (port 0: a free one) until SIGINT or
    SIGTERM; ``on_ready(url)`` once it accepts connections, the URL carrying the token
    (``token``, or a fresh random one when None: a viewer always has one). Raises UserError
    when the port is taken or the token is too short."""
    import asyncio

    import uvicorn

    from agent2rl.viewer.app import create_app

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host.strip("[]"), port))
    except OSError as exc:
        sock.close()
        raise UserError(
            f"cannot listen on {host}:{port}: {exc.strerror}; pick another --port"
        ) from exc
    sock.listen(128)
    token = check_access(host, token)
    bound = sock.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    base = f"http://{shown}:{bound}"
    root_dir = str(Path(root).resolve())
    app = create_app(root, token=token)
    server = uvicorn.Server(
        uvicorn.Config(app, log_level="warning", timeout_keep_alive=30, timeout_graceful_shutdown=3)
    )
    announce = announce_path()

    async def serve() -> None:
        async def ready() -> None:
            while not server.started:
                await asyncio.sleep(0.02)
            with contextlib.suppress(OSError):
                announce.parent.mkdir(parents=True, exist_ok=True)
                record = {"url": base, "root": root_dir, "pid": os.getpid(), "token": token}
                # The token opens every run: readable by this user alone.
                write_text_atomic(announce, json.dumps(record, indent=2) + "\n", mode=0o600)
            if on_ready is not None:
                on_ready(f"{base}/?token={token}")

        task = asyncio.create_task(ready())
        await server.serve(sockets=[sock])
        task.cancel()

    try:
        asyncio.run(serve())
    finally:
        with contextlib.suppress(OSError, ValueError):
            data = read_json(announce)
            if isinstance(data, dict) and data.get("pid") == os.getpid():
                announce.unlink()
