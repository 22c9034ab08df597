"""The leak scanner's host half: fingerprints of the tasks' private splits, and the real agent
sandbox of a run to scan from (the scanning itself is ``agents/leak_probe.py``, run inside).

Fingerprints of a private split (:func:`fingerprints`): the end-of-run contamination check's
index (:class:`~agent2rl.integrity.ngrams.PrivateIndex` over
:func:`~agent2rl.integrity.contamination.private_texts`, the public split's n-grams removed),
the word 6-gram that starts each of its n-grams and distinctive strings (the scanner's
prefilter for decompressed text), and raw substrings for ``grep -F``: up to three per item,
each eight to ten words long (six with letters) of characters that JSON and Python string
literals copy unchanged, found in that item only and in no public text. The private split's
JSON-lines rows are added to the items' texts (webshop's goals: its samples are bare ids).
"""

from __future__ import annotations

import io
import json
import pickle
import re
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from rich.console import Console

from agent2rl.dataset import PreparedTask
from agent2rl.integrity import ngrams
from agent2rl.integrity.contamination import _strings, private_texts, public_texts
from agent2rl.integrity.ngrams import MIN_WORDS, PrivateIndex, ngram_hashes, words
from agent2rl.tasks.base import Task
from support import AGENTS

PROBE = AGENTS / "leak_probe.py"
#: words of a raw pattern (at most), and the least of them holding a letter
PATTERN_WORDS, PATTERN_LETTER_WORDS = 10, 4
#: the least words of a raw pattern (six gave "is an empty string, return None." in a library)
PATTERN_MIN_WORDS = 8
PATTERNS_PER_ITEM = 3
#: the scanner's prefilter: the first words of every n-gram and distinctive string
PREFIX = MIN_WORDS
_RUN = re.compile(r"[A-Za-z0-9,.;:!?()-]+(?: [A-Za-z0-9,.;:!?()-]+)+")
_ID_FIELDS = ("id", "game_id", "task_id", "item_id")


@dataclass
class Fingerprints:
    """What the scanner looks for (see the module docstring); item ids as given."""

    index: PrivateIndex
    prefixes: tuple[np.ndarray, np.ndarray]
    patterns: dict[str, str]
    """Raw pattern -> the item it comes from."""
    items: dict[str, list[str]] = field(default_factory=dict)
    """The items' texts (for positive controls)."""
    aliases: dict[str, str] = field(default_factory=dict)
    """An item left out for being another task's item verbatim -> that item (:func:`union`)."""

    def unsearchable(self) -> list[str]:
        """Items the scanner could never find (no n-gram, string or raw pattern)."""
        with_patterns = set(self.patterns.values())
        return [i for i in self.index.unsearchable_items if i not in with_patterns]


def item_texts(task: Task, prepared: PreparedTask) -> dict[str, list[str]]:
    """Item id -> texts: :func:`private_texts`, plus every string of the private split's
    JSON-lines rows, by their id field (``id``, ``game_id``, ...) or ``file:line``."""
    out = private_texts(task, prepared)
    for path in sorted(Path(prepared.private).rglob("*.jsonl")):
        with path.open(encoding="utf-8", errors="replace") as fh:
            for lineno, line in enumerate(fh, 1):
                try:
                    row = json.loads(line)
                except ValueError:
                    continue
                ids = [row.get(k) for k in _ID_FIELDS] if isinstance(row, dict) else []
                key = next((str(i) for i in ids if str(i) in out), f"{path.name}:{lineno}")
                out.setdefault(key, []).extend(s for s in _strings(row) if s not in out[key])
    return out


def _candidates(text: str) -> list[str]:
    out = []
    for line in text.splitlines():
        for run in _RUN.findall(line):
            tokens = run.split(" ")
            starts = [0] if len(tokens) < 2 * PATTERN_WORDS else [0, len(tokens) // 2]
            for s in starts:
                window = tokens[s : s + PATTERN_WORDS]
                letters = sum(any(c.isalpha() for c in t) for t in window)
                if len(window) >= PATTERN_MIN_WORDS and letters >= PATTERN_LETTER_WORDS + 2:
                    out.append(" ".join(window))
    return sorted(set(out), key=lambda c: (-len(c), c))


def raw_patterns(items: dict[str, list[str]], public: bytes) -> dict[str, str]:
    """Up to :data:`PATTERNS_PER_ITEM` raw patterns per item (see the module docstring)."""
    blobs = {item: "\n".join(texts) for item, texts in items.items()}
    everything = "\0".join(blobs.values())
    out: dict[str, str] = {}
    for item, blob in blobs.items():
        kept = 0
        for cand in _candidates(blob):
            if kept == PATTERNS_PER_ITEM:
                break
            if cand in out or everything.count(cand) != blob.count(cand):
                continue  # in another item too
            if cand.encode() in public:
                continue
            out[cand] = item
            kept += 1
    return out


def _letter_words(raw: bytes, w) -> np.ndarray:
    """1 for each word of ``w`` (of ``raw``) holding a letter, else 0."""
    is_letter = np.zeros(256, dtype=bool)
    for c in b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ":
        is_letter[c] = True
    is_letter[0x80:] = True
    flags = is_letter[np.frombuffer(raw, dtype=np.uint8)]
    cum = np.concatenate(([0], np.cumsum(flags)))
    return ((cum[w.ends] - cum[w.starts]) > 0).astype(np.int64)


def _windows(counts: np.ndarray, m: int) -> np.ndarray:
    cum = np.concatenate(([0], np.cumsum(counts)))
    return cum[m:] - cum[:-m] if len(counts) >= m else np.zeros(0, dtype=np.int64)


def _in(values: np.ndarray, sorted_hashes: np.ndarray) -> np.ndarray:
    """``np.isin`` for a sorted table (a _Table's hashes), without re-hashing it per call."""
    i = np.minimum(np.searchsorted(sorted_hashes, values), max(len(sorted_hashes) - 1, 0))
    return (sorted_hashes[i] == values) if len(sorted_hashes) else np.zeros(len(values), bool)


def _prefixes(index: PrivateIndex, items: dict[str, list[str]]) -> tuple[np.ndarray, np.ndarray]:
    """The word 6-gram starting each n-gram and distinctive string ``index`` kept that holds
    at least :data:`PATTERN_LETTER_WORDS` words with a letter (runs of numbers, such as a
    test's ``0, 0, 0, ...``, are in every data file): a text the probe matches holds one."""
    grams = index.ngrams.hashes
    hashes: list[np.ndarray] = []
    owners: list[np.ndarray] = []
    for owner, item in enumerate(index.item_ids):
        for text in items[item]:
            raw = text.encode("utf-8", "replace")
            w = words(raw)
            letters = _letter_words(raw, w)
            full = ngram_hashes(w.hashes, index.n)
            lettered = _windows(letters, index.n) >= PATTERN_LETTER_WORDS
            keep = np.flatnonzero(_in(full, grams) & lettered)
            six = ngram_hashes(w.hashes, PREFIX)
            found = [six[keep]]
            # Distinctive strings are whole lines: each line's words, found in the text's.
            arr = np.frombuffer(raw, dtype=np.uint8)
            nl = np.flatnonzero((arr == 10) | (arr == 13))
            first = np.searchsorted(w.starts, np.concatenate(([0], nl + 1)))
            count = np.searchsorted(w.starts, np.concatenate((nl, [len(raw)]))) - first
            cum = np.concatenate(([0], np.cumsum(letters)))
            for m, table in index.strings.items():
                at = first[count == m]
                at = at[(cum[at + m] - cum[at]) >= PATTERN_LETTER_WORDS]
                hit = _in(ngram_hashes(w.hashes, m)[at], table.hashes)
                found.append(six[at[hit]])
            for f in found:
                hashes.append(f)
                owners.append(np.full(len(f), owner, dtype=np.int64))
    if not hashes:
        return np.zeros(0, dtype=np.uint64), np.zeros(0, dtype=np.int64)
    return np.concatenate(hashes), np.concatenate(owners)


def fingerprints(items: dict[str, list[str]], public: list[str | bytes]) -> Fingerprints:
    """The fingerprints of ``items`` (id -> texts) against the ``public`` texts."""
    index = PrivateIndex.build(items, public)
    blob = b"\0".join(p.encode("utf-8", "replace") if isinstance(p, str) else p for p in public)
    return Fingerprints(index, _prefixes(index, items), raw_patterns(items, blob), items)


def task_fingerprints(task: Task, prepared: PreparedTask) -> Fingerprints:
    return fingerprints(item_texts(task, prepared), list(public_texts(task, prepared)))


def union(named: dict[str, tuple[Task, PreparedTask]]) -> Fingerprints:
    """One set of fingerprints for every task's private items (ids ``task:item``), each
    task's public texts removed. An item whose texts are another task's item's verbatim
    (alfworld's test data is alfworld-lite's games) is indexed once, under the first task's
    id (:attr:`Fingerprints.aliases`): twice, its n-grams and patterns would be shared by two
    items, so dropped as not distinctive, and the item would be unsearchable."""
    items: dict[str, list[str]] = {}
    first: dict[tuple[str, ...], str] = {}
    aliases: dict[str, str] = {}
    public: list[str | bytes] = []
    for name, (task, prepared) in named.items():
        for key, texts in item_texts(task, prepared).items():
            item = f"{name}:{key}"
            if (same := first.setdefault(tuple(texts), item)) != item:
                aliases[item] = same
            else:
                items[item] = texts
        public.extend(public_texts(task, prepared))
    fp = fingerprints(items, public)
    fp.aliases = aliases
    return fp


def payload(
    fp: Fingerprints,
    roots: list[str],
    exclude: list[str] = (),
    full: list[str] = (),
    masked: list[str] = (),
) -> bytes:
    """What the probe reads on stdin: ``fp``, where to look (``roots`` less ``exclude``;
    ``full``: every file through the contamination check's scan) and the ``masked`` paths
    whose contents it reports."""
    idx = fp.index

    def table(t):
        return (np.ascontiguousarray(t.hashes), np.ascontiguousarray(t.owners))

    return pickle.dumps(
        {
            "ngrams_src": Path(ngrams.__file__).read_text(),
            "n": idx.n,
            "item_ids": idx.item_ids,
            "ngrams": table(idx.ngrams),
            "strings": {m: table(t) for m, t in idx.strings.items()},
            "prefixes": fp.prefixes,
            "patterns": fp.patterns,
            "roots": list(roots),
            "exclude": list(exclude),
            "full": list(full),
            "masked": list(masked),
            "letter_words": PATTERN_LETTER_WORDS,
        },
        protocol=5,
    )


# -- the sandbox -------------------------------------------------------------------------------
@dataclass
class AgentSandbox:
    """A run's agent about to start: its run context, and the process (argv, env, preexec)
    the run would launch."""

    ctx: object
    agent: object
    services: object  # the run's RunServices: its cgroup, closed by close()

    @property
    def workspace(self) -> Path:
        return self.ctx.paths.workspace

    def mount_view(self) -> list[str]:
        """The sandbox's bwrap options with this run's own paths and the environment left
        out: equal for two runs exactly when they show their agents the same files beside
        their workspaces."""
        argv = self.agent.argv
        head, out, i = argv[: argv.index("--")], [], 0
        while i < len(head):
            if head[i] == "--setenv":
                i += 3
                continue
            out.append(head[i].replace(str(self.ctx.paths.root), "<run>"))
            i += 1
        return out

    def scan(self, data: bytes, timeout: float = 300) -> dict:
        """Run the probe with ``data`` on its stdin; its JSON report."""
        started = time.time()
        proc = subprocess.run(
            self.agent.argv,
            input=data,
            capture_output=True,
            env=self.agent.env,
            cwd=self.workspace,
            preexec_fn=self.agent.preexec,
            timeout=timeout,
        )
        out = proc.stdout.decode(errors="replace").strip().splitlines()
        if proc.returncode != 0 or not out:
            raise AssertionError(
                f"leak probe failed (rc {proc.returncode}): {proc.stderr.decode()[-3000:]}"
            )
        report = json.loads(out[-1])
        report["seconds"] = round(time.time() - started, 2)
        return report

    def close(self) -> None:
        self.services.close()


def agent_sandbox_of_run(
    task: str, options: dict[str, str], runs_dir: Path, spec_dir: Path
) -> AgentSandbox:
    """The agent sandbox a run of ``task`` would start (``--sandbox bwrap``, the tiny
    model), with the probe as its agent: the run's stage 1 (:func:`resolve_run`: run
    directory, workspace) and the launch of stage 3 (instructions, run_meta.json, prompt,
    the agent's environment and its bwrap argv, as its own user) without the services.
    ``--network host``: ``services`` adds only the bridge's socket folder to the view."""
    from agent2rl.agents.launch import build_launch
    from agent2rl.agents.prompt import render_prompt
    from agent2rl.files import write_text_atomic
    from agent2rl.orchestration.request import RunRequest
    from agent2rl.orchestration.run import _launch, resolve_run
    from agent2rl.orchestration.services import RunServices
    from agent2rl.workspace import agent_env, write_instructions

    spec = spec_dir / "leak-probe.toml"
    if not spec.exists():
        spec.write_text(
            'name = "leak-probe"\ndescription = "Test agent: the leak scanner"\n'
            f'command = ["{{python}}", "code/{PROBE.name}"]\nfiles = ["{PROBE}"]\n'
        )
    req = RunRequest(
        task=task,
        agent=str(spec),
        model="tiny",
        budget_s=600,
        runs_dir=runs_dir,
        sandbox="bwrap",
        network="host",
        task_options=dict(options),
    )
    ctx = resolve_run(req, Console(file=io.StringIO()))
    paths, info = ctx.paths, ctx.info
    info.start = time.time()
    info.deadline = req.deadline(info.start)
    url, token = "http://127.0.0.1:9", "leak-scan-token"
    write_instructions(paths, info, url, token, rollout=ctx.task.interactive)
    env = agent_env(paths, info, ctx.model, url, token)
    if ctx.task.interactive:
        env.update({"ENV_SERVER_URL": "http://127.0.0.1:9", "ENV_TOKEN": "leak-scan-env"})
    prompt_file = paths.workspace / "prompt.md"
    prompt = render_prompt(paths.workspace, req.mode, req.budget_s, None)
    write_text_atomic(prompt_file, prompt)
    launch = build_launch(
        ctx.spec, workspace=paths.workspace, prompt=prompt, prompt_file=prompt_file
    )
    launch.write_files()
    env.update(launch.env)
    services = RunServices()
    try:
        return AgentSandbox(ctx, _launch(ctx, launch.argv, env, services), services)
    except BaseException:
        services.close()
        raise


def describe(hits: list[dict], limit: int = 30) -> str:
    """Hits as lines: the file, how it was found, the items (and a snippet)."""
    lines = []
    for hit in hits[:limit]:
        items = [
            i if isinstance(i, str) else f"{i['item']} ({i['snippet'][:80]!r})"
            for i in hit["items"]
        ]
        lines.append(f"{hit['file']} [{hit['how']}]: {', '.join(items[:5])}")
    if len(hits) > limit:
        lines.append(f"... and {len(hits) - limit} more files")
    return "\n".join(lines)
