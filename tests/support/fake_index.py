"""Real HTTP servers on loopback standing in for a package index (PEP 503 HTML and PEP 691
JSON pages, wheel files) and for the Hugging Face hub (repo info, resolve with an LFS-style
redirect to a second "CDN" server, a renamed repo's redirect), for the name proxies' tests.
No traffic leaves the machine."""

from __future__ import annotations

import hashlib
import http.server
import json
import threading
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path


def build_wheel(root: Path, name: str, version: str) -> Path:
    """A minimal valid pure-Python wheel ``{name}-{version}-py3-none-any.whl`` in ``root``."""
    mod = name.replace("-", "_")
    path = root / f"{mod}-{version}-py3-none-any.whl"
    info = f"{mod}-{version}.dist-info"
    files = {
        f"{mod}/__init__.py": "VALUE = 1\n",
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
        "Tag: py3-none-any\n",
    }
    record = "".join(f"{n},,\n" for n in files) + f"{info}/RECORD,,\n"
    with zipfile.ZipFile(path, "w") as zf:
        for n, text in files.items():
            zf.writestr(n, text)
        zf.writestr(f"{info}/RECORD", record)
    return path


@dataclass
class Upstream:
    """A running fake server: its URL and the paths it was asked for."""

    url: str
    seen: list[str] = field(default_factory=list)


@contextmanager
def _serve(handler: type[http.server.BaseHTTPRequestHandler]) -> Iterator[Upstream]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    up = Upstream(f"http://127.0.0.1:{server.server_address[1]}")
    handler.seen = up.seen  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1})
    thread.start()
    try:
        yield up
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


class _Base(http.server.BaseHTTPRequestHandler):
    seen: list[str]

    def log_message(self, *args: object) -> None:
        pass

    def send(self, status: int, body: bytes, ctype: str, extra: dict | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)


@contextmanager
def fake_index(root: Path, packages: dict[str, str]) -> Iterator[Upstream]:
    """An index at ``URL/simple/`` serving one wheel per project of ``packages`` (name ->
    version): HTML pages with relative links and ``#sha256=`` fragments, or PEP 691 JSON when
    the client's Accept asks for it; files under ``/packages/``, each wheel's PEP 658
    metadata beside it (``<wheel>.metadata``, announced as ``core-metadata``)."""
    wheels = {n: build_wheel(root, n, v) for n, v in packages.items()}
    metadata = {
        w.name + ".metadata": f"Metadata-Version: 2.1\nName: {n}\nVersion: {packages[n]}\n".encode()
        for n, w in wheels.items()
    }

    class Handler(_Base):
        def do_GET(self) -> None:  # noqa: N802
            self.seen.append(self.path)
            parts = [p for p in self.path.split("/") if p]
            if parts[:1] == ["simple"] and len(parts) == 2 and parts[1] in wheels:
                wheel = wheels[parts[1]]
                sha = hashlib.sha256(wheel.read_bytes()).hexdigest()
                href = f"../../packages/{wheel.name}"
                if "application/vnd.pypi.simple.v1+json" in self.headers.get("Accept", ""):
                    meta_sha = hashlib.sha256(metadata[wheel.name + ".metadata"]).hexdigest()
                    entry = {"filename": wheel.name, "url": href, "hashes": {"sha256": sha}}
                    entry["core-metadata"] = {"sha256": meta_sha}
                    page = {"meta": {"api-version": "1.1"}, "name": parts[1], "files": [entry]}
                    self.send(200, json.dumps(page).encode(), "application/vnd.pypi.simple.v1+json")
                else:
                    page = f'<html><body><a href="{href}#sha256={sha}">{wheel.name}</a></body>'
                    self.send(200, page.encode(), "text/html")
            elif parts[:1] == ["packages"] and len(parts) == 2 and parts[1] in metadata:
                self.send(200, metadata[parts[1]], "application/octet-stream")
            elif parts[:1] == ["packages"] and len(parts) == 2:
                match = [w for w in wheels.values() if w.name == parts[1]]
                if match:
                    self.send(200, match[0].read_bytes(), "application/octet-stream")
                else:
                    self.send(404, b"no such file", "text/plain")
            else:
                self.send(404, b"not found", "text/plain")

        do_HEAD = do_GET

    with _serve(Handler) as up:
        yield up


@contextmanager
def fake_hub(files: dict[str, bytes], renamed: dict[str, str] | None = None) -> Iterator[Upstream]:
    """A hub serving ``files`` (``"datasets/org/name/file"`` or ``"org/name/file"`` ->
    bytes): ``/api/{models,datasets}/<repo>`` info, ``resolve/main/<file>`` answered by a
    302 to a second server (the CDN) with ``X-Linked-Size``/``X-Repo-Commit``, and a 307 from
    each old repo id in ``renamed`` (``"datasets/gsm8k" -> "datasets/openai/gsm8k"``) to the
    new one, as the hub does for moved repos. ``Upstream.seen`` holds both servers' paths."""
    renamed = renamed or {}

    class Cdn(_Base):
        def do_GET(self) -> None:  # noqa: N802
            key = self.path.lstrip("/")
            self.seen.append("cdn:" + self.path)
            if key in files:
                self.send(200, files[key], "application/octet-stream")
            else:
                self.send(404, b"", "text/plain")

    with _serve(Cdn) as cdn:

        class Hub(_Base):
            def _answer(self) -> None:
                self.seen.append(self.path)
                path = self.path.split("?")[0]
                for old, new in renamed.items():
                    for prefix in (f"/{old}/", f"/api/{old}"):
                        if path.startswith(prefix):
                            target = path.replace(old, new, 1)
                            self.send(307, b"", "text/plain", {"Location": target})
                            return
                if path.startswith("/api/"):
                    repo = path.removeprefix("/api/")
                    repo = repo if repo.startswith("datasets/") else repo.removeprefix("models/")
                    names = [k.removeprefix(repo + "/") for k in files if k.startswith(repo + "/")]
                    if not names:
                        self.send(404, b'{"error": "Repository not found"}', "application/json")
                        return
                    siblings = [{"rfilename": n} for n in names]
                    info = {"id": repo, "sha": "c0ffee", "siblings": siblings}
                    self.send(200, json.dumps(info).encode(), "application/json")
                    return
                if "/resolve/main/" in path:
                    repo, _, name = path.lstrip("/").partition("/resolve/main/")
                    key = f"{repo}/{name}"
                    if key in files:
                        headers = {
                            "Location": f"{cdn.url}/{key}",
                            "X-Linked-Size": str(len(files[key])),
                            "X-Linked-Etag": '"' + hashlib.sha256(files[key]).hexdigest() + '"',
                            "X-Repo-Commit": "c0ffee" * 6 + "c0ff",
                            "X-Xet-Hash": "would-send-the-client-elsewhere",
                        }
                        self.send(302, b"", "text/plain", headers)
                        return
                self.send(404, b'{"error": "Entry not found"}', "application/json")

            do_GET = do_HEAD = _answer

        with _serve(Hub) as hub:
            hub.seen = cdn.seen = hub.seen  # one list for both
            Cdn.seen = hub.seen
            yield hub
