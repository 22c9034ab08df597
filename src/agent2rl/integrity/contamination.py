"""Contamination check: did the agent have the private split in its hands?

The sandbox keeps the private split out of the workspace, but an agent with network access can
download a benchmark's test set, and one that finds a leak can copy it. Whatever it trained
on is usually still in its workspace when the run ends: data it wrote or downloaded, its code,
caches, and its ``.tmp`` folder, which is both its ``TMPDIR`` and, under bubblewrap, its
``/tmp`` (:data:`agent2rl.sandbox.agent.AGENT_TMP`: on disk, not a tmpfs that ends with the
sandbox). :func:`scan_workspace` reads every file there (see
:func:`agent2rl.integrity.ngrams.scan_file` for what is read and what is skipped) and looks for
the fingerprints of each private item (:class:`~agent2rl.integrity.ngrams.PrivateIndex`:
13-grams of words after normalisation, minus what the public split shares, plus distinctive
strings).

The egress log (:mod:`agent2rl.sandbox.egress`'s: one JSON object per request with ``host``,
``path`` for plain HTTP only, ``allowed``; a ``url`` field or a plain line holding a URL is read
too) has no bodies, so for a fetched address only the address is judged: it is flagged when
it names one of the task's known dataset sources (:data:`DATASET_SOURCES`, e.g. ``gsm8k``,
``humaneval``; compared with punctuation removed, so ``human-eval`` and ``openai_humaneval``
both name HumanEval). Every dataset-hub URL (``huggingface.co/datasets/...``) is listed as
well, flagged or not. A refused request (``allowed`` false) fetched nothing and is only
counted. Limits: an HTTPS request shows only its host (the proxy tunnels TLS), so a test set
fetched over HTTPS from a general host is caught by the workspace scan, if the agent left it
there, not by its address.

The agent's two main channels, the package index and the model hub, go through the run's
name proxies (:mod:`agent2rl.sandbox.name_proxy`), whose logs (``record/packages.jsonl``,
``record/hub.jsonl``) name every project, version, repo and file. :func:`read_fetch_logs`
judges those names: a fetch the task's deny list refused (``allowed`` false: the agent went
for the grader's own parts) and an allowed fetch whose name names a dataset source (a mirror
under another org) are both flagged; every file fetched is listed.

:func:`check_run` is the end-of-run entry point: it indexes the task's private split against
its public one, scans the run's workspace, its code snapshots (``record/code.git``), the
grader's staged submission copies (:func:`staged_roots`), the egress log, the name proxies'
logs and the LLM provider's tool log (:func:`read_provider_tool_log`), and writes
``record/contamination.json``. Every git repository met has its objects read through git
(:func:`git_objects`: a file committed and deleted is still there). The check fails closed:
what it could not read (a file or folder the system refused, a repository git could not
list) and a crash of the check itself make the report ``unchecked``, which the run's metrics
turn into the ``unchecked`` flag. The check reports; it never changes a score.
"""

from __future__ import annotations

import bisect
import json
import os
import re
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from itertools import accumulate
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from agent2rl.child_process import kill_group, signal_group, spawn_child
from agent2rl.dataset import PreparedTask, Sample
from agent2rl.files import write_json_atomic
from agent2rl.integrity.ngrams import (
    BLOCK_BYTES,
    DEFAULT_N,
    MAX_FILE_BYTES,
    FileScan,
    PrivateIndex,
    file_texts,
    is_container,
    match_content,
    scan_file,
    snippet,
)
from agent2rl.metering.provider_tools import PROVIDER_TOOLS_LOG, read_tool_uses
from agent2rl.rundir import RunPaths
from agent2rl.sandbox.name_proxy import HUB_LOG, PACKAGE_LOG, read_fetch_log

if TYPE_CHECKING:  # a type only: integrity reads a task through the methods it is given
    from agent2rl.tasks.base import Task

#: where :func:`check_run` writes its report, under the run's ``record/``
CONTAMINATION_FILE = "contamination.json"
#: the egress log :func:`check_run` reads, under the run's ``record/``
EGRESS_LOG = "egress.jsonl"
#: the name proxies' logs :func:`check_run` reads, under the run's ``record/``
FETCH_LOGS = (PACKAGE_LOG, HUB_LOG)
#: names listed per kind in the report (all are counted)
MAX_LISTED_FETCHES = 200
#: names of each task's dataset on the net: a fetched URL naming one is flagged
DATASET_SOURCES: dict[str, tuple[str, ...]] = {
    "gsm8k": ("gsm8k", "grade-school-math"),
    "humaneval": ("humaneval",),
    "alfworld": ("alfworld",),
    "alfworld-lite": ("alfworld",),
    "arith-lite": (),
}
#: matched items listed in the report (all are counted)
MAX_LISTED_ITEMS = 200
#: files listed per matched item
MAX_FILES_PER_ITEM = 5
#: bytes read from one private item's files (interactive tasks' game files)
MAX_ITEM_FILE_BYTES = 4 * 2**20


@dataclass
class ItemMatch:
    """A private item found in the workspace: where (paths relative to the workspace, an
    archive member after ``!``) and the first match's text as found there."""

    item_id: str
    files: list[str]
    snippet: str


@dataclass
class EgressSummary:
    """What the egress log shows the agent fetched (addresses only: the log has no bodies)."""

    log: str | None
    requests: int = 0
    hosts: list[str] = field(default_factory=list)
    dataset_urls: list[str] = field(default_factory=list)
    """Fetches from a dataset hub (informational)."""
    flagged_urls: list[str] = field(default_factory=list)
    """Fetches naming one of the task's :data:`DATASET_SOURCES` (addresses, or
    ``pypi:project/file`` and ``hub:kind:repo/file`` names from the name proxies)."""
    fetches: int = 0
    """Requests the name proxies (package index, model hub) logged."""
    fetched_files: list[str] = field(default_factory=list)
    """Files fetched through them: ``pypi:project==version/file``, ``hub:kind:repo/file``."""
    denied_fetches: list[str] = field(default_factory=list)
    """Names the task's deny list refused (the agent asked for the grader's own parts)."""
    provider_tools: list[str] = field(default_factory=list)
    """What the LLM provider's own tools searched or fetched for the agent
    (``llm:<tool>:<query or URL>``, from the metering proxy's ``provider_tools.jsonl``)."""


@dataclass
class ContaminationReport:
    """The outcome of a contamination check (``record/contamination.json`` is ``to_dict``).

    ``flagged`` when at least one private item was found in the workspace, a fetched URL or
    name names the task's dataset, or a name proxy refused a denied name. ``matches`` lists at
    most :data:`MAX_LISTED_ITEMS` items (sorted by id); ``matched_items`` counts them all.
    """

    task: str | None
    n: int
    flagged: bool = False
    items_total: int = 0
    matched_items: int = 0
    matches: list[ItemMatch] = field(default_factory=list)
    short_items: int = 0
    """Items searched by their distinctive strings only (too short for an n-gram)."""
    unsearchable_items: int = 0
    """Items with nothing distinctive to search for (they can never match)."""
    files_scanned: int = 0
    files_skipped: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    """Skipped files by reason."""
    skipped_files: list[str] = field(default_factory=list)
    """``path: reason`` of the skipped files (at most :data:`MAX_LISTED_FETCHES`)."""
    bytes_scanned: int = 0
    truncated_files: list[str] = field(default_factory=list)
    """Files (and git repositories) read only up to the size bound."""
    repositories: list[str] = field(default_factory=list)
    """Git repositories whose objects were read (``path: N objects``)."""
    git_objects: int = 0
    unchecked: bool = False
    """Something the check had to read could not be read (a file or folder the system
    refused, a git repository whose objects git could not list), or the check itself
    failed: the run cannot be called clean, and aggregates count it as flagged."""
    unchecked_reasons: list[str] = field(default_factory=list)
    egress: EgressSummary | None = None
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ContaminationReport:
        d = dict(data)
        d["matches"] = [ItemMatch(**m) for m in d.get("matches") or []]
        d["egress"] = EgressSummary(**d["egress"]) if d.get("egress") else None
        return cls(**{k: v for k, v in d.items() if k in cls.__dataclass_fields__})


# -- the workspace -----------------------------------------------------------------------------
def _walk(root: Path, errors: list[str], repos: list[Path]) -> Iterator[Path]:
    """Every file under ``root``, symlinks included (they are skipped by the scan, listed),
    never following a symlinked directory. A folder that cannot be listed is added to
    ``errors``; every git directory met (``objects/`` and ``HEAD``: a ``.git`` or a bare
    repository) to ``repos``."""

    def refused(err: OSError) -> None:
        name = str(err.filename or "")
        name = str(Path(name).relative_to(root)) if name.startswith(str(root)) else name
        name = name if len(name) <= 120 else f"{name[:60]}...{name[-40:]}"
        errors.append(f"{name}: {err.strerror or type(err).__name__}")

    for dirpath, dirnames, filenames in os.walk(root, followlinks=False, onerror=refused):
        dirnames.sort()
        here = Path(dirpath)
        if "objects" in dirnames and "HEAD" in filenames:
            repos.append(here)
        # os.path.islink, not Path.is_symlink: a path past PATH_MAX is then read (and
        # refused) by the scan, never raised here.
        for name in sorted(filenames) + [d for d in dirnames if os.path.islink(here / d)]:
            yield here / name


#: seconds git may take to list one repository's objects
GIT_TIMEOUT_S = 600.0


class GitReadError(Exception):
    """git could not list a repository's objects."""


def git_objects(git_dir: Path, max_bytes: int) -> Iterator[tuple[str, bytes, bool]]:
    """``(member, content, truncated)`` of every object stored in the git directory
    ``git_dir`` (``git cat-file --batch-all-objects --batch``: loose and packed, reachable
    or not, so a file committed and then deleted, or dropped from history, is still read),
    member ``<type> <sha>``; at most ``max_bytes`` in all, the last object cut and
    ``truncated`` set. Trees are listed, not read (file names only).

    git runs as the harness's child (its own group, killed after :data:`GIT_TIMEOUT_S`),
    with no system or global config, no transport allowed, and any owner's repository
    accepted. Raises :class:`GitReadError` when git fails or is missing."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull, GIT_TERMINAL_PROMPT="0")
    env["GIT_NO_REPLACE_OBJECTS"] = "1"
    cmd = ["git", "-c", "safe.directory=*", "-c", "protocol.allow=never"]
    cmd += ["--git-dir", str(git_dir), "cat-file", "--batch-all-objects", "--batch"]
    with tempfile.TemporaryFile() as err:
        try:
            proc = spawn_child(cmd, env=env, stdout=subprocess.PIPE, stderr=err)
        except OSError as exc:
            raise GitReadError(f"cannot run git: {exc}") from None
        timer = threading.Timer(GIT_TIMEOUT_S, signal_group, (proc,))
        timer.start()
        left, cut, missing, finished = max_bytes, False, 0, False
        try:
            out = proc.stdout
            assert out is not None
            while header := out.readline():
                parts = header.split()
                if len(parts) != 3:
                    missing += 1  # "<sha> missing": listed, but git cannot read it
                    continue
                sha, kind, size = parts[0].decode(), parts[1].decode(), int(parts[2])
                want = min(size, left)
                data = out.read(want) if want > 0 else b""
                if len(data) < want:
                    break  # git stopped mid-object: its exit status says why
                cut = want < size  # at the bound: this object is cut, the rest not read
                if kind != "tree":
                    yield f"{kind} {sha}", data, cut
                if cut:
                    break
                out.read(1)  # the newline after the content
                left -= size
            finished = True
        finally:
            timer.cancel()
            # Cut at the bound, or the reader stopped early: git may be blocked writing.
            rc = kill_group(proc) if cut or not finished else proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()
        if not cut and (rc != 0 or missing):
            err.seek(0)
            message = " ".join(err.read(600).decode("utf-8", "replace").split())
            raise GitReadError(f"git cat-file exited {rc}, {missing} objects unreadable: {message}")


def scan_repository(git_dir: Path, index: PrivateIndex, max_bytes: int) -> FileScan:
    """Scan every object of the git directory ``git_dir`` (:func:`git_objects`) as
    :func:`~agent2rl.integrity.ngrams.scan_file` reads a file: a compressed or archived
    blob member by member, anything else by content. Small text objects are matched in
    batches (one match per batch; the batch's objects are told apart by offset). A git
    failure is the scan's ``skipped`` (``unreadable: ...``)."""
    scan = FileScan(Path(git_dir))
    batch: list[tuple[str, bytes]] = []  # (member, data) of the small text objects
    size = 0

    def flush() -> None:
        if batch:
            block = b"\n\n".join(data for _, data in batch)
            starts = list(accumulate((len(data) + 2 for _, data in batch), initial=0))
            for item, span in index.match_block(block).items():
                owner = batch[bisect.bisect_right(starts, span[0]) - 1][0]
                scan.hits.setdefault(item, (owner, snippet(block, span)))
        batch.clear()

    try:
        for member, data, cut in git_objects(git_dir, max_bytes):
            scan.members += 1
            scan.bytes_read += len(data)
            scan.truncated |= cut
            if is_container(data[:512]) or b"\x00" in data[:8192] or data.startswith(b"PAR1"):
                with tempfile.NamedTemporaryFile() as tmp:
                    tmp.write(data)
                    tmp.flush()
                    for inner, content, _cut in file_texts(Path(tmp.name), max_bytes):
                        where = member + (f"/{inner}" if inner and inner[0] != "(" else "")
                        match_content(scan, where, content, index)
                continue
            batch.append((member, data))
            size += len(data) + 2
            if size >= BLOCK_BYTES:
                flush()
                size = 0
        flush()
    except (GitReadError, OSError) as err:
        scan.errors.append(f"git objects not read: {err}"[:300])
    return scan


def scan_workspace(
    workspace: Path,
    index: PrivateIndex,
    egress_log: Path | None = None,
    *,
    task: str | None = None,
    max_file_bytes: int = MAX_FILE_BYTES,
    fetch_logs: tuple[Path, ...] = (),
    extra_roots: dict[str, Path] | None = None,
) -> ContaminationReport:
    """Scan every file under ``workspace`` (and ``egress_log`` and the name proxies'
    ``fetch_logs`` when they exist) for ``index``'s items; ``task`` names the dataset sources
    a fetched URL or name is judged against. ``extra_roots`` (label -> directory: the run's
    code snapshots, the grader's staged submissions) are scanned as well, their files listed
    as ``label/path``; a missing one is skipped.

    Files are read by :func:`~agent2rl.integrity.ngrams.scan_file` and git repositories by
    :func:`scan_repository`, within ``max_file_bytes`` each. What was skipped is listed with
    its reason (``skipped_files``), what was cut at the bound in ``truncated_files``. A file
    or folder the system refuses to read, and a repository git cannot list, make the report
    ``unchecked`` (never fatal). A missing workspace gives an empty, unflagged report with a
    note.
    """
    started = time.time()
    report = ContaminationReport(
        task=task,
        n=index.n,
        items_total=len(index.item_ids),
        short_items=len(index.short_items),
        unsearchable_items=len(index.unsearchable_items),
    )
    if index.short_items:
        report.notes.append(
            f"{len(index.short_items)} items have no {index.n}-gram of their own (shorter than"
            f" {index.n} words, or shared with the public split) and were searched by their"
            " distinctive strings only"
        )
    if index.unsearchable_items:
        report.notes.append(
            f"{len(index.unsearchable_items)} items have nothing distinctive to search for and"
            " cannot be detected"
        )
    found: dict[str, ItemMatch] = {}
    workspace = Path(workspace)
    roots = [("", workspace)] if workspace.is_dir() else []
    if not roots:
        report.notes.append(f"no workspace at {workspace}: nothing scanned")
    roots += [(label, Path(r)) for label, r in (extra_roots or {}).items() if Path(r).is_dir()]

    def where(root: Path, label: str, path: Path) -> str:
        rel = str(path.relative_to(root)) if path != root else ""
        return "/".join(p for p in (label.rstrip("/"), rel) if p) or "."

    def record(scan: FileScan, rel: str) -> None:
        if scan.skipped:
            report.files_skipped += 1
            reason = scan.skipped.split(":")[0]
            report.skipped[reason] = report.skipped.get(reason, 0) + 1
            if len(report.skipped_files) < MAX_LISTED_FETCHES:
                report.skipped_files.append(f"{rel}: {scan.skipped}")
            if reason == "unreadable":
                report.unchecked_reasons.append(f"{rel}: {scan.skipped}")
            return
        report.unchecked_reasons.extend(f"{rel}: {e}" for e in scan.errors)
        report.files_scanned += 1
        report.bytes_scanned += scan.bytes_read
        if scan.truncated:
            report.truncated_files.append(rel)
        report.notes.extend(f"{rel}: {note}" for note in scan.notes[:5])
        for item, (member, text) in scan.hits.items():
            at = f"{rel}!{member}" if member else rel
            match = found.setdefault(item, ItemMatch(item, [], text))
            if len(match.files) < MAX_FILES_PER_ITEM:
                match.files.append(at)

    for label, root in roots:
        errors: list[str] = []
        repos: list[Path] = []
        for path in _walk(root, errors, repos):
            record(scan_file(path, index, max_file_bytes), where(root, label, path))
        for message in errors:
            report.unchecked_reasons.append(f"folder not readable: {message}")
        for repo in repos:
            rel = where(root, label, repo)
            scan = scan_repository(repo, index, max_file_bytes)
            if not scan.errors:
                report.repositories.append(f"{rel}: {scan.members} objects")
                report.git_objects += scan.members
            record(scan, rel)
    report.unchecked = bool(report.unchecked_reasons)
    report.unchecked_reasons = report.unchecked_reasons[:MAX_LISTED_FETCHES]
    report.notes = report.notes[:MAX_LISTED_FETCHES]
    report.matched_items = len(found)
    report.matches = [found[k] for k in sorted(found)][:MAX_LISTED_ITEMS]
    sources = DATASET_SOURCES.get(task or "", ())
    if egress_log is not None:
        report.egress = read_egress(egress_log, sources)
    if any(Path(f).is_file() for f in fetch_logs):
        report.egress = report.egress or EgressSummary(log=None)
        read_fetch_logs(fetch_logs, sources, report.egress)
    eg = report.egress
    report.flagged = bool(found) or bool(eg and (eg.flagged_urls or eg.denied_fetches))
    report.seconds = round(time.time() - started, 3)
    return report


# -- the egress log ----------------------------------------------------------------------------
_URL = re.compile(r"https?://[^\s\"'<>]+")
_DATASET_HUBS = ("huggingface.co/datasets/", "hf.co/datasets/", "kaggle.com/datasets/")


def _squash(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", text.lower())


def _names_source(text: str, sources: tuple[str, ...]) -> bool:
    """Whether ``text`` names one of ``sources`` (both compared with punctuation removed)."""
    squashed = _squash(text)
    return any(wanted in squashed for s in sources if (wanted := _squash(s)))


def _add(names: list[str], name: str) -> None:
    """List ``name`` unless it is listed already or :data:`MAX_LISTED_FETCHES` are."""
    if name not in names and len(names) < MAX_LISTED_FETCHES:
        names.append(name)


def _urls(line: str) -> tuple[list[str], bool]:
    """The addresses one log line names, and whether the request was let through."""
    try:
        row = json.loads(line)
    except ValueError:
        row = None
    if isinstance(row, dict):
        allowed = row.get("allowed") is not False
        if isinstance(row.get("url"), str):
            return [row["url"]], allowed
        if isinstance(row.get("host"), str):
            scheme = "http" if row.get("path") is not None else "https"
            return [f"{scheme}://{row['host']}{row.get('path') or ''}"], allowed
    return _URL.findall(line), True


def read_egress(log: Path, sources: tuple[str, ...]) -> EgressSummary:
    """Summarise an egress log: requests, hosts, dataset-hub URLs, and the URLs naming one of
    ``sources``. A missing log gives a summary with ``requests`` 0."""
    summary = EgressSummary(log=str(log))
    if not Path(log).is_file():
        return summary
    hosts: set[str] = set()
    with open(log, encoding="utf-8", errors="replace") as fh:
        for line in fh:
            urls, allowed = _urls(line)
            summary.requests += len(urls)
            for url in urls if allowed else ():
                parts = urlsplit(url)
                hosts.add(parts.hostname or "")
                address = f"{parts.hostname or ''}{parts.path}"
                if any(h in address for h in _DATASET_HUBS):
                    _add(summary.dataset_urls, url)
                if _names_source(address, sources):
                    _add(summary.flagged_urls, url)
    summary.hosts = sorted(h for h in hosts if h)[:MAX_LISTED_FETCHES]
    return summary


def _fetch_name(row: dict[str, Any]) -> str | None:
    """A name proxy's log row as one name: ``pypi:project==version/file`` (a page:
    ``pypi:project``) or ``hub:kind:repo[/file]``; None for a row that names nothing."""
    if "project" in row:
        name = f"pypi:{row['project']}" + (f"=={row['version']}" if row.get("version") else "")
    elif row.get("repo"):
        name = f"hub:{row.get('repo_type') or 'model'}:{row['repo']}"
    else:
        return None
    return name + (f"/{row['file']}" if row.get("file") else "")


def read_fetch_logs(
    logs: tuple[Path, ...], sources: tuple[str, ...], summary: EgressSummary
) -> EgressSummary:
    """Add what the name proxies' ``logs`` show to ``summary``: the requests, every file
    fetched, every name the deny list refused, and the names (project, repo, file; compared
    with punctuation removed) that name one of ``sources``. Missing logs and torn lines are
    skipped. Lists keep :data:`MAX_LISTED_FETCHES` distinct names each."""
    for log in logs:
        for row in read_fetch_log(Path(log)):
            name = _fetch_name(row)
            if name is None:
                continue
            summary.fetches += 1
            if row.get("allowed") is False:
                _add(summary.denied_fetches, name)
                continue
            ok = isinstance(row.get("status"), int) and 200 <= row["status"] < 400
            if ok and row.get("file") and row.get("kind") in ("file", "resolve"):
                _add(summary.fetched_files, name)
            if ok and _names_source(name, sources):
                _add(summary.flagged_urls, name)
    return summary


def read_provider_tool_log(
    log: Path, sources: tuple[str, ...], summary: EgressSummary
) -> EgressSummary:
    """Add the LLM provider's own web use (``record/provider_tools.jsonl``,
    :mod:`agent2rl.metering.provider_tools`) to ``summary``: each search query or URL is listed
    as ``llm:<tool>:<query or URL>`` (a tool without either is not), and flagged when it names
    one of ``sources``, let through or refused: either way the agent went for the test set. A
    missing log adds nothing."""
    for row in read_tool_uses(log):
        what = row.get("url") or row.get("query")
        if not isinstance(what, str) or not what:
            continue
        name = f"llm:{row.get('tool')}:{what[:300]}"
        _add(summary.provider_tools, name)
        if _names_source(what, sources) and name not in summary.flagged_urls:
            summary.flagged_urls.append(name)
    return summary


# -- the task's splits -------------------------------------------------------------------------
def _strings(value: Any) -> Iterator[str]:
    """Every string inside ``value`` (dicts and lists walked)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict | list | tuple):
        for v in value.values() if isinstance(value, dict) else value:
            yield from _strings(v)


def _item_files(split_dir: Path, sample: Sample) -> list[str]:
    """The text of the files of an item stored as its own directory (an interactive task's
    game: ``<split>/<id>/`` or ``<split>/games/<id>/``), each file one field."""
    out: list[str] = []
    for folder in (split_dir / sample.id, split_dir / "games" / sample.id):
        if folder.is_dir() and folder.resolve().is_relative_to(split_dir.resolve()):
            for f in sorted(folder.rglob("*")):
                if f.is_file() and not f.is_symlink():
                    with f.open("rb") as fh:
                        out.append(fh.read(MAX_ITEM_FILE_BYTES).decode("utf-8", "replace"))
    return out


def private_texts(task: Task, prepared: PreparedTask) -> dict[str, list[str]]:
    """Item id -> the texts of one private item: every string of its ``input`` and
    ``target``, the files of its directory when it has one (interactive tasks), and what the
    task adds (:meth:`~agent2rl.tasks.base.Task.item_texts`: webshop's goal instructions)."""
    out: dict[str, list[str]] = {}
    extra = task.item_texts(prepared, "private")
    for s in task.samples(prepared, "private"):
        texts = [*_strings(s.input), *_strings(s.target), *_item_files(prepared.private, s)]
        out[s.id] = [*texts, *(t for t in extra.get(s.id, ()) if t not in texts)]
    return out


def public_texts(task: Task, prepared: PreparedTask) -> Iterator[str | bytes]:
    """Everything the harness itself gives the agent: the public split's samples and files,
    the task's description, prompt protocol and workspace files. An n-gram found here is
    evidence of nothing."""
    try:
        samples = task.samples(prepared, "public")
    except (NotImplementedError, OSError, ValueError):
        samples = []
    for s in samples:
        yield "\n".join([*_strings(s.input), *_strings(s.target)])
    for path in sorted(Path(prepared.public).rglob("*")):
        if path.is_file() and not path.is_symlink():
            with path.open("rb") as fh:
                yield fh.read(MAX_FILE_BYTES)
    yield task.description(prepared)
    fmt = task.prompt_format(prepared)
    if fmt is not None:
        yield json.dumps(fmt.to_dict())
    for source in task.workspace_files().values():
        if Path(source).is_file():
            yield Path(source).read_bytes()


def check_run(paths: RunPaths, task: Task, prepared: PreparedTask) -> ContaminationReport:
    """The contamination check of a finished run (see the module docstring; n-grams of
    :data:`~agent2rl.integrity.ngrams.DEFAULT_N` words), written atomically to
    ``record/contamination.json``. The agent's ``/tmp`` is the workspace's ``.tmp``
    (its ``TMPDIR`` too; files listed as ``.tmp/...``), scanned with it; under ``--sandbox
    none`` a literal ``/tmp`` path is the host's own, shared with every process, and is not.

    Call it after the agent has stopped (the workspace no longer changes); it reads the
    private split, so it runs in the harness, never where the agent could see its output. A
    failing check writes an ``unchecked`` report naming the error
    (:func:`record_check_failure`) before the error propagates: never clean by default.
    """
    try:
        started = time.time()
        index = PrivateIndex.build(private_texts(task, prepared), public_texts(task, prepared))
        egress_log = paths.record / EGRESS_LOG
        report = scan_workspace(
            paths.workspace,
            index,
            egress_log if egress_log.is_file() else None,
            task=task.name,
            fetch_logs=tuple(paths.record / name for name in FETCH_LOGS),
            extra_roots=staged_roots(paths),
        )
        if (paths.record / PROVIDER_TOOLS_LOG).is_file():
            report.egress = report.egress or EgressSummary(log=None)
            sources = DATASET_SOURCES.get(task.name, ())
            read_provider_tool_log(paths.record / PROVIDER_TOOLS_LOG, sources, report.egress)
            report.flagged = report.flagged or bool(report.egress.flagged_urls)
        report.seconds = round(time.time() - started, 3)
        write_json_atomic(paths.record / CONTAMINATION_FILE, report.to_dict())
        return report
    except Exception as err:
        record_check_failure(paths, task.name, err)
        raise


def staged_roots(paths: RunPaths) -> dict[str, Path]:
    """Label -> folder of what the check reads beyond the workspace: ``record/code.git`` (every
    version of the agent's files the recorder committed, deleted ones included) and each
    staged submission's ``grading/submissions/<id>/model`` (what the grader kept of it, a
    tokenizer or a chat template; never the rest of ``grading/``: the grader's own records
    hold the private items)."""
    roots = {"record/code.git": paths.code_git}
    subs = paths.grading / "submissions"
    for model in sorted(subs.glob("*/model")) if subs.is_dir() else []:
        if model.is_dir() and not model.is_symlink():
            roots[str(model.relative_to(paths.root))] = model
    return roots


def record_check_failure(paths: RunPaths, task: str | None, err: BaseException) -> None:
    """Write ``record/contamination.json`` as ``unchecked``, naming ``err`` (the check
    itself failed: the run must not read as clean). Never raises."""
    report = ContaminationReport(task=task, n=DEFAULT_N, unchecked=True)
    report.unchecked_reasons.append(f"the check failed: {type(err).__name__}: {err}"[:500])
    try:
        write_json_atomic(paths.record / CONTAMINATION_FILE, report.to_dict())
    except Exception:  # noqa: BLE001 - no report at all reads as unchecked too
        pass


def read_contamination(paths: RunPaths) -> ContaminationReport | None:
    """The run's ``record/contamination.json``; None when the check did not run or the file
    is unreadable."""
    try:
        data = json.loads((paths.record / CONTAMINATION_FILE).read_text())
        return ContaminationReport.from_dict(data) if isinstance(data, dict) else None
    except (OSError, ValueError, TypeError):
        return None
