"""What the viewer reads: run directories, study directories and their files, read-only.

Everything here only reads, a run through its :class:`~agent2rl.run_record.RunRecord`. SQLite
files (a run's ledger, its rollout record, a study's state) are opened read-only
(:meth:`~agent2rl.sqlite_store.SQLiteStore.reader`): the grader, the rollout service and the
study driver are never blocked, and a finished run's directory is left as it was. Git is read
through :class:`~agent2rl.recording.snapshot.SnapshotReader`. JSON-lines files that live
writers append to (the transcript, the usage file, the resource timeline) are read up to
their last complete line, incrementally: a page refreshed during a 10,000-call run parses
only the lines added since.

Run ids and study names are looked up in the scanned index (:class:`Index`), never joined
onto a path from a request, so no request can name a file outside the viewed directory.
"""

from __future__ import annotations

import json
import re
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from agent2rl.errors import UserError
from agent2rl.grading.ledger import SubmissionStatus
from agent2rl.run_record import JsonlTail, RunRecord
from agent2rl.rundir import LIVE_RUN_STATUSES, RunPaths, RunStatus
from agent2rl.study.state import STATE_DB, SlotRow, StudyReader

T = TypeVar("T")

#: statuses of run.json after which nothing in the run changes
FINAL_STATUSES = frozenset(RunStatus) - LIVE_RUN_STATUSES
#: final statuses that mean a resource cap stopped the agent, and the cap's name
CAP_STATUSES = {RunStatus.OOM: "memory", RunStatus.DISK_QUOTA: "disk"}
#: how long a directory scan is reused (a new run shows within this many seconds)
SCAN_TTL_S = 2.0
#: the most characters of one text shown in a timeline row (the whole is one click away)
PREVIEW_CHARS = 240
#: the largest diff served (bytes); a larger one is cut with a note
MAX_DIFF_BYTES = 2 << 20
#: a snapshot the diff page names: at least git's default abbreviation (a shorter prefix
#: could name several)
_SHA = re.compile(r"[0-9a-f]{7,64}")


def _stamp(*paths: Path) -> tuple[tuple[int, int], ...]:
    """A cheap change marker of files: (mtime_ns, size) each, (0, 0) when missing."""
    out = []
    for p in paths:
        try:
            st = p.stat()
            out.append((st.st_mtime_ns, st.st_size))
        except OSError:
            out.append((0, 0))
    return tuple(out)


def _is_budget(error: Any) -> bool:
    """Whether a proxy refusal's message is the token budget's (the metering proxy says
    "token budget of N ..."; a refused model or key says something else)."""
    return isinstance(error, str) and "token budget" in error


def _read_study_db(study_dir: Path, read: Callable[[StudyReader], T], empty: T) -> T:
    """``read`` of the study database of ``study_dir`` (read-only, one snapshot:
    :class:`~agent2rl.study.state.StudyReader`); ``empty`` when the file is missing or
    unreadable."""
    try:
        with StudyReader(study_dir) as db, db.snapshot():
            return read(db)
    except (UserError, sqlite3.Error, ValueError):
        return empty


def study_run_dirs(study_dir: Path) -> list[Path]:
    """The run directories a study's slots name (relative ones under ``study_dir``), in
    slot order; those without a ``run.json`` are left out."""
    slots = _read_study_db(study_dir, StudyReader.slots, [])
    dirs = [study_dir / s.run_dir for s in slots if s.run_dir is not None]  # absolute ones stay
    return [d for d in dirs if RunPaths(d).run_json.is_file()]


class _Memo:
    """A small thread-safe cache: a value per key, recomputed when its stamp changes."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._data: dict[Any, tuple[Any, Any]] = {}

    def get(self, key: Any, stamp: Any, make: Callable[[], Any]) -> Any:
        with self._lock:
            hit = self._data.get(key)
        if hit is not None and hit[0] == stamp:
            return hit[1]
        value = make()
        with self._lock:
            self._data[key] = (stamp, value)
        return value


# -- LLM exchanges ---------------------------------------------------------------------------


def _json_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _clip(text: str, n: int = PREVIEW_CHARS) -> str:
    return text if len(text) <= n else text[:n] + f"… (+{len(text) - n} chars)"


def _strings(value: Any, keys: tuple[str, ...] = ("text", "content", "output", "thinking")) -> str:
    """The readable text of a message item or content block of any provider's shape."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "\n".join(s for v in value if (s := _strings(v, keys)))
    if isinstance(value, dict):
        parts = [_strings(value[k], keys) for k in keys if k in value]
        if "functionResponse" in value:
            parts.append(json.dumps(value["functionResponse"].get("response"))[:PREVIEW_CHARS])
        return "\n".join(p for p in parts if p)
    return ""


def answer_parts(response: Any) -> Iterator[tuple[str, Any]]:
    """The pieces of an answer in any provider's (non-streamed) shape, in order, as
    ``(kind, value)``: ``text`` (a string, maybe empty), ``reasoning`` (the model's own
    reasoning, a string or None) and ``call`` (a tool call: ``id``, ``name`` and
    ``arguments``, a JSON string or object)."""
    if not isinstance(response, dict):
        return

    def call(id_: Any, name: Any, arguments: Any) -> tuple[str, Any]:
        return "call", {"id": id_, "name": name, "arguments": arguments}

    for ch in response.get("choices") or []:  # OpenAI Chat Completions
        msg = (ch or {}).get("message") or {}
        yield "text", _strings(msg.get("content"))
        yield "reasoning", msg.get("reasoning_content")
        for c in msg.get("tool_calls") or []:
            fn = c.get("function") or {}
            yield call(c.get("id"), fn.get("name"), fn.get("arguments"))
    for item in response.get("output") or []:  # OpenAI Responses
        if isinstance(item, dict) and item.get("type") == "message":
            yield "text", _strings(item.get("content"))
        elif isinstance(item, dict) and item.get("type") == "function_call":
            yield call(item.get("call_id"), item.get("name"), item.get("arguments"))
    content = response.get("content")
    for block in content if isinstance(content, list) else []:  # Anthropic Messages
        kind = block.get("type") if isinstance(block, dict) else None
        if kind in ("text", "thinking"):
            yield "text", _strings(block)
        if kind == "thinking":
            yield "reasoning", block.get("thinking")
        elif kind == "tool_use":
            yield call(block.get("id"), block.get("name"), block.get("input"))
    for cand in response.get("candidates") or []:  # Gemini
        for part in ((cand or {}).get("content") or {}).get("parts") or []:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                yield "text", part["text"]
            if isinstance(part, dict) and "functionCall" in part:
                fc = part["functionCall"]
                yield call(fc.get("id"), fc.get("name"), fc.get("args"))


def tool_calls_of(response: Any) -> list[dict[str, Any]]:
    """The tool calls of an answer in any provider's (non-streamed) shape
    (:func:`answer_parts`)."""
    return [value for kind, value in answer_parts(response) if kind == "call"]


def response_text(response: Any) -> str:
    """The text of an answer in any provider's (non-streamed) shape (tool calls left out)."""
    if isinstance(response, str):
        return response
    parts = [value for kind, value in answer_parts(response) if kind == "text"]
    if not parts and isinstance(response, dict) and isinstance(response.get("error"), dict):
        parts.append(str(response["error"].get("message")))
    return "\n".join(p for p in parts if p)


def request_items(request: Any) -> list[Any]:
    """The conversation items of a transcript line's request, in any provider's shape (a
    bare string prompt as one user item)."""
    for name in ("messages", "input", "contents") if isinstance(request, dict) else ():
        if isinstance(request.get(name), list):
            return request[name]
        if isinstance(request.get(name), str):
            return [{"role": "user", "content": request[name]}]
    return []


def new_items(request: Any) -> list[dict[str, str]]:
    """The conversation items a transcript line's request adds (role and text each): the
    user's prompt and tool results; the assistant's own earlier turns, which a client sends
    back as context, are left out (they are the previous exchange's response)."""
    out = []
    for item in request_items(request):
        if not isinstance(item, dict):
            continue
        role = str(item.get("role") or item.get("type") or "item")
        if role in ("assistant", "model"):  # the raw line keeps it
            continue
        text = _strings(item.get("content", item.get("parts", item.get("output", ""))))
        if not text and item.get("tool_calls"):
            text = ", ".join(str((c.get("function") or {}).get("name")) for c in item["tool_calls"])
        out.append({"role": role, "text": _clip(text)})
    return out


def _exchange_row(line: dict[str, Any], seq: Any) -> dict[str, Any]:
    """The fields a timeline row of one LLM request has, from a transcript line or a usage
    line (both carry the proxy's usage record): time, endpoint, status, tokens, cost, error,
    and whether the proxy refused it (the token budget, a model not allowed)."""
    status = line.get("status") or 0
    usage = ("stream", "latency_s", "input_tokens", "output_tokens", "cost_usd")
    return {
        "kind": "llm",
        "seq": seq,
        "t": line.get("time"),
        **{k: line.get(k) for k in ("api", "endpoint", "model")},
        "status": status,
        **{k: line.get(k) for k in usage},
        "refused": bool(line.get("refused")),
        "error": line.get("error") or (f"HTTP {status}" if status >= 400 else None),
    }


def summarize_exchange(line: dict[str, Any]) -> dict[str, Any]:
    """A transcript line as the timeline shows it (kept in memory for every line)."""
    calls = tool_calls_of(line.get("response"))
    return {
        **_exchange_row(line, line.get("seq")),
        "input": new_items(line.get("request")),
        "text": _clip(response_text(line.get("response"))),
        "tool_calls": [
            {"name": str(c.get("name")), "arguments": _clip(_json_text(c.get("arguments")), 300)}
            for c in calls
        ],
    }


def summarize_usage_line(line: dict[str, Any]) -> dict[str, Any]:
    """A usage-file line as a timeline row, for a run recorded before transcripts."""
    return {**_exchange_row(line, None), "input": [], "text": "", "tool_calls": []}


# -- one run ---------------------------------------------------------------------------------

#: the submission columns a timeline row shows
_SUBMISSION_FIELDS = (
    "id", "submitted_at", "finished_at", "path", "status", "score", "n_items", "eval_seconds",
    "error", "snapshot", "is_copy", "duplicate_of", "failure_kind",
)  # fmt: skip


@dataclass
class RunView:
    """Reads one run directory through its :class:`RunRecord`, as the pages show it; one per
    run, shared by requests (its caches are locked)."""

    root: Path
    _memo: _Memo = field(default_factory=_Memo)
    _transcript: JsonlTail = field(init=False)
    _usage: JsonlTail = field(init=False)
    _resources: JsonlTail = field(init=False)

    def __post_init__(self) -> None:
        self.record = RunRecord(self.root)
        paths = self.record.paths
        self._transcript = JsonlTail(paths.transcript, summarize_exchange)
        self._usage = JsonlTail(paths.llm_usage, summarize_usage_line)
        self._resources = JsonlTail(paths.resources)

    # -- pieces

    def info(self) -> dict[str, Any]:
        """``run.json`` as a dict (``{}`` when the run has none readable yet)."""
        return self._memo.get("info", _stamp(self.record.paths.run_json), self._read_info)

    def _read_info(self) -> dict[str, Any]:
        info = self.record.info()
        return dict(vars(info)) if info is not None else {}

    def ledger(self) -> dict[str, Any]:
        db = self.record.paths.ledger
        stamp = (_stamp(db, db.with_name(db.name + "-wal")), self.settled())
        return self._memo.get("ledger", stamp, self._read_ledger)

    def settled(self) -> bool:
        """Whether the run ended (its databases have no writer any more)."""
        return self.info().get("status") in FINAL_STATUSES

    def _read_ledger(self) -> dict[str, Any]:
        led = self.record.ledger()
        best = led.best
        return {
            "submissions": [
                {k: getattr(s, k) for k in _SUBMISSION_FIELDS} for s in led.submissions
            ],
            "rejections": [asdict(r) for r in led.rejections],
            "baseline": (led.baseline or {}).get("score"),
            "best": best.score if best is not None else None,
        }

    def llm(self) -> list[dict[str, Any]]:
        """Every LLM exchange (transcript; the usage file for a run without one)."""
        items = self._transcript.refresh()
        if items or self._transcript.path.exists():
            return items
        return self._usage.refresh()

    def exchange(self, index: int) -> dict[str, Any] | None:
        self._transcript.refresh()
        return self._transcript.line(index)

    def snapshots(self) -> list[dict[str, Any]]:
        git_dir = self.record.paths.code_git
        stamp = _stamp(git_dir / "refs" / "heads", git_dir / "packed-refs", git_dir / "HEAD")
        # refs/heads/* files change on every commit; their directory's mtime may not.
        heads = git_dir / "refs" / "heads"
        if heads.is_dir():
            stamp += _stamp(*sorted(heads.iterdir()))
        return self._memo.get(
            "snapshots",
            stamp,
            lambda: [{"kind": "snapshot", **asdict(s)} for s in self.record.git.log()],
        )

    def diff(self, sha: str) -> str | None:
        """The change a snapshot made (against its parent; the whole tree for the first), as
        a unified diff; None for a sha that is not one of the run's snapshots."""
        if not _SHA.fullmatch(sha):
            return None
        known = {s["sha"]: s for s in self.snapshots()}
        snap = known.get(sha) or next((s for k, s in known.items() if k.startswith(sha)), None)
        if snap is None:
            return None
        return self.record.git.show(snap["sha"], limit=MAX_DIFF_BYTES) or ""

    def env_activity(self) -> dict[str, Any]:
        db = self.record.paths.env_db
        return self._memo.get("env", _stamp(db, db.with_name(db.name + "-wal")), self._read_env)

    def _read_env(self) -> dict[str, Any]:
        env = self.record.env()
        sessions = [{**asdict(s), "task_type": s.group} for s in env.sessions]
        return {"sessions": sessions, "steps": env.steps}

    def resources(self) -> list[dict[str, Any]]:
        return self._resources.refresh()

    # -- what the pages ask

    def brief(self) -> dict[str, Any]:
        """The little a study's slot table shows: status, times, submissions and best (from
        run.json and the ledger only)."""
        info, led = self.info(), self.ledger()
        status = info.get("status") or "unknown"
        return {
            "status": status,
            "live": status not in FINAL_STATUSES,
            "start": info.get("start"),
            "deadline": info.get("deadline"),
            "now": time.time(),
            "submissions": len(led["submissions"]),
            "best": led["best"],
        }

    def summary(self) -> dict[str, Any]:
        """The run's live status: what the run list and the run page's header show."""
        info, led = self.info(), self.ledger()
        llm = self.llm()
        now = time.time()
        deadline, status = info.get("deadline"), info.get("status") or "unknown"
        live = status not in FINAL_STATUSES
        res = self.resources()
        env = self.env_activity()
        subs = led["submissions"]
        snaps = self.snapshots()
        settled = sum(s["status"] != SubmissionStatus.EVALUATING for s in subs)
        times = ("error", "created_at", "start", "deadline", "ended_at", "budget_s")
        return {
            "run_id": info.get("run_id") or self.root.name,
            **{k: info.get(k) for k in ("task", "agent", "model", "driver", "mode")},
            "status": status,
            "live": live,
            **{k: info.get(k) for k in times},
            "now": now,
            "time_left_s": max(0.0, deadline - now) if (live and deadline) else None,
            "submissions": len(subs),
            "graded": sum(s["status"] == SubmissionStatus.GRADED for s in subs),
            "evaluating": sum(s["status"] == SubmissionStatus.EVALUATING for s in subs),
            "best": led["best"],
            "baseline": led["baseline"],
            "llm_calls": len(llm),
            "llm_errors": sum(bool(e.get("error")) for e in llm),
            "input_tokens": sum(e.get("input_tokens") or 0 for e in llm),
            "output_tokens": sum(e.get("output_tokens") or 0 for e in llm),
            "cost_usd": round(sum(e.get("cost_usd") or 0 for e in llm), 6),
            "env_steps": env["steps"],
            "env_sessions": len(env["sessions"]),
            "snapshots": len(snaps),
            "resources": res[-1] if res else None,
            # Changes whenever the timeline would: the page refetches it only then.
            "version": f"{len(llm)}:{len(subs)}:{settled}:{len(snaps)}:{env['steps']}"
            f":{len(led['rejections'])}:{status}",
        }

    def timeline(self) -> list[dict[str, Any]]:
        """Every event of the run in time order: LLM exchanges, code snapshots, submissions
        (with score and the snapshot that produced them), rejected submissions, rollout
        sessions and the harness's own events."""
        events = [{**e, "id": f"llm-{i}", "index": i} for i, e in enumerate(self.llm())]
        events += [{**s, "id": f"snap-{s['sha'][:12]}"} for s in self.snapshots()]
        led = self.ledger()
        for s in led["submissions"]:
            events.append(
                {
                    **s,
                    "kind": "submission",
                    "id": f"sub-{s['id']}",
                    "submission_id": s["id"],
                    "t": s["submitted_at"],
                    "snapshot_id": f"snap-{s['snapshot'][:12]}" if s.get("snapshot") else None,
                }
            )
        for r in led["rejections"]:
            events.append(
                {
                    "kind": "rejection",
                    "id": f"rej-{r['id']}",
                    "t": r["at"],
                    "path": r["path"],
                    "error": f"HTTP {r['http_status']}: {r['reason']}",
                }
            )
        for s in self.env_activity()["sessions"]:
            events.append(
                {
                    "kind": "env",
                    "id": f"env-{s['id']}",
                    "t": s["opened_at"],
                    **{k: s[k] for k in ("game_id", "task_type", "steps", "reward")},
                    "won": bool(s["won"]),
                    "done": bool(s["done"]),
                    "closed_at": s["closed_at"],
                }
            )
        events.extend(self.harness_events())
        events.sort(key=lambda e: (e.get("t") or 0, e["id"]))
        return events

    def harness_events(self) -> list[dict[str, Any]]:
        """The harness's own events: from run.json, created, budget clock started, deadline
        (once passed), a resource cap that stopped the agent (memory: ``oom``, disk:
        ``disk_quota``; the agent's process tree is killed), ended (its status, the agent's
        exit code and any error); from the LLM record, the first request the proxy refused
        because the run's token budget was spent (the token cap), with how many were
        refused. Each has an ``event`` name (``deadline``, ``cap``, ``token_cap``...) that
        the page can filter on; an event without a time in the record is left out."""
        info = self.info()
        out = []

        def add(key: str, t: Any, text: str, error: str | None = None) -> None:
            if isinstance(t, int | float):
                event = {"kind": "harness", "event": key, "id": f"h-{key}"}
                out.append(event | {"t": t, "text": text, "error": error})

        created = f"run created ({info.get('task')}, {info.get('agent')})"
        add("created", info.get("created_at"), created)
        caps = info.get("caps") or {}
        cap_text = ", ".join(f"{k}={v}" for k, v in caps.items()) if caps else "none"
        add(
            "start",
            info.get("start"),
            f"budget clock started: {info.get('budget_s')} s; caps: {cap_text}"
            f" ({info.get('cap_mechanism') or 'n/a'}); sandbox {info.get('sandbox')}",
        )
        deadline, status, ended = info.get("deadline"), info.get("status"), info.get("ended_at")
        # The deadline is an event once it passed while the run was still going.
        if isinstance(deadline, int | float) and deadline <= time.time():
            if not isinstance(ended, int | float) or ended >= deadline - 1:
                add("deadline", deadline, "deadline reached: the agent is stopped")
        if status in CAP_STATUSES:
            text = f"{CAP_STATUSES[status]} cap reached: the agent's processes are killed"
            add("cap", ended, text, info.get("error") or status)
        refused = [e for e in self.llm() if e.get("refused") and _is_budget(e.get("error"))]
        if refused:
            more = f" ({len(refused)} requests refused in all)" if len(refused) > 1 else ""
            text = f"token cap reached: the metering proxy refuses the agent's requests{more}"
            add("token_cap", refused[0].get("t"), text, refused[0].get("error"))
        if status in FINAL_STATUSES:
            bad = status not in (RunStatus.COMPLETED, RunStatus.DEADLINE)
            text = f"run ended: {status} (agent exit code {info.get('agent_exit_code')})"
            add("ended", ended, text, (info.get("error") or status) if bad else None)
        return out

    def search(self, query: str, limit: int = 500) -> list[str]:
        """Ids of timeline events whose text holds ``query`` (case-insensitive): every LLM
        exchange's whole request and response as recorded, submissions, snapshots."""
        q = query.casefold()
        if not q:
            return []
        hits: list[str] = []
        self._transcript.refresh()
        path = self._transcript.path
        if path.exists():
            # The lines as written: JSON with non-ASCII and control characters escaped, so
            # the query is looked for both as typed and as JSON writes it.
            needles = {q, json.dumps(query)[1:-1].casefold()}
            index_of = {off: i for i, off in enumerate(self._transcript.offsets)}
            offset = 0
            with open(path, "rb") as f:
                for raw in f:
                    i = index_of.get(offset)
                    offset += len(raw)
                    if i is None:
                        continue
                    text = raw.decode("utf-8", "replace").casefold()
                    if any(n in text for n in needles):
                        hits.append(f"llm-{i}")
                        if len(hits) >= limit:
                            return hits
        events = (e for e in self.timeline() if e["kind"] != "llm")
        hits += [e["id"] for e in events if q in json.dumps(e, default=str).casefold()]
        return hits[:limit]


# -- studies and the directory index ---------------------------------------------------------


def read_study(study_dir: Path, *, counts_only: bool = False) -> dict[str, Any]:
    """A study directory's state, read-only: its name, the count of slots per status, their
    ``total`` and (unless ``counts_only``) the slots (:class:`~agent2rl.study.state.SlotRow`)."""

    def read(db: StudyReader) -> tuple[Any, dict[str, int], list[SlotRow]]:
        return db.get_meta("name"), db.status_counts(), [] if counts_only else db.slots()

    name, counts, slots = _read_study_db(study_dir, read, (None, {}, []))
    return {
        "name": name or study_dir.name,
        "slots": slots,
        "counts": counts,
        "total": sum(counts.values()),
    }


class Index:
    """The runs and studies under one directory, rescanned at most every
    :data:`SCAN_TTL_S` seconds.

    ``root`` may be a runs directory (``<root>/<run>/run.json``), a study directory
    (``study.db``; its runs wherever its slots say), a directory of either, or one run.
    """

    def __init__(self, root: Path) -> None:
        self.root = Path(root).resolve()
        self._lock = threading.Lock()
        self._scanned = 0.0
        self.runs: dict[str, Path] = {}
        self.studies: dict[str, Path] = {}
        self._views: dict[Path, RunView] = {}

    def scan(self) -> None:
        with self._lock:
            if time.monotonic() - self._scanned < SCAN_TTL_S:
                return
            runs: dict[str, Path] = {}
            studies: dict[str, Path] = {}

            def add_study(d: Path) -> None:
                studies.setdefault(d.name, d)
                for p in study_run_dirs(d):
                    runs.setdefault(p.name, p)

            def add(d: Path) -> bool:
                """List ``d`` if it is a run or a study; whether it was one."""
                if RunPaths(d).run_json.is_file():
                    runs.setdefault(d.name, d)
                elif (d / STATE_DB).is_file():
                    add_study(d)
                else:
                    return False
                return True

            root = self.root
            if RunPaths(root).run_json.is_file():
                runs.setdefault(root.name, root)
            if (root / STATE_DB).is_file():
                add_study(root)
            for d in _subdirs(root):
                if not add(d):  # a directory of runs or studies, one level down
                    for dd in _subdirs(d):
                        add(dd)
            self.runs, self.studies = runs, studies
            self._scanned = time.monotonic()

    def run(self, run_id: str) -> RunView | None:
        self.scan()
        path = self.runs.get(run_id)
        if path is None:
            return None
        with self._lock:
            view = self._views.get(path)
            if view is None:
                view = self._views[path] = RunView(path)
            return view

    def study(self, name: str) -> Path | None:
        self.scan()
        return self.studies.get(name)

    def run_id_of(self, path: str | None) -> str | None:
        """The id under which the run directory ``path`` is listed (None if it is not)."""
        if not path:
            return None
        name = Path(path).name
        return name if name in self.runs else None


def _subdirs(path: Path) -> list[Path]:
    try:
        return sorted(
            (p for p in path.iterdir() if p.is_dir() and not p.name.startswith(".")),
            key=lambda p: p.name,
        )
    except OSError:
        return []
