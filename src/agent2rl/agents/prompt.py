"""The prompt an LLM agent starts from: the task's description and instructions, a listing of
its workspace, a sample of its training data, the time left and its mode's text
(:mod:`agent2rl.agents.modes`), filled into a template (:data:`AGENT_PROMPT` or the agent
spec's own).
"""

from __future__ import annotations

from itertools import islice
from pathlib import Path

from agent2rl.agents.modes import get_mode
from agent2rl.errors import UserError
from agent2rl.formatting import format_duration

AGENT_PROMPT = """You are an autonomous ML research engineer. Your goal: improve the base model's \
score on the task below by post-training it within the time budget, and submit your best \
models to the grading service. You work alone and non-interactively: nobody will answer \
questions, so decide, act and keep going until the time is used well.

# Task
{description}

# Instructions: workspace, grading service, rules
{instructions}

# Method ({mode})
{mode_text}

# Workspace ({workspace})
{listing}

# Training data sample (first lines of data/train.jsonl)
{data_sample}

# Time
Time left at the start: {time_left}. The clock keeps running while you think and work; \
`GET /time` on the grading service always tells the time left (see the instructions). \
Submit early and improve from there: only graded submissions count, and anything not \
submitted by the deadline is lost.
"""

#: the harness's own folders in a workspace, left out of the listing and of method detection
HARNESS_DIRS = {".home", ".tmp", ".cache", ".agent2rl", ".git", "__pycache__"}
_LISTING_MAX = 60
SAMPLE_LINES = 3
SAMPLE_LINE_CHARS = 400


def _size(n: float) -> str:
    for unit in ("B", "KB", "MB"):
        if n < 1024:
            return f"{n:.0f} B" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GB"


def workspace_listing(workspace: Path, depth: int = 3) -> str:
    """The workspace's files and folders, ``depth`` levels deep, with file sizes; the
    harness's own folders (``.home``, ``.tmp``, ``.cache``, ``.agent2rl``) are left out and
    at most 60 entries are shown (then ``... N more``). A missing folder gives a note."""
    root = Path(workspace)
    if not root.is_dir():
        return "(workspace not found)"
    lines: list[str] = []
    hidden = 0

    def walk(folder: Path, level: int) -> None:
        nonlocal hidden
        try:
            entries = sorted(folder.iterdir(), key=lambda p: (not p.is_dir(), p.name))
        except OSError:
            return
        for p in entries:
            if p.name in HARNESS_DIRS:
                continue
            if len(lines) >= _LISTING_MAX:
                hidden += 1
                continue
            indent = "  " * level
            if p.is_dir():
                lines.append(f"{indent}{p.name}/")
                if level + 1 < depth:
                    walk(p, level + 1)
            else:
                try:
                    size = _size(p.stat().st_size)  # follows links (the base model's files)
                except OSError:
                    size = "?"
                lines.append(f"{indent}{p.name}  ({size})")

    walk(root, 0)
    if hidden:
        lines.append(f"... {hidden} more")
    return "\n".join(lines) or "(empty)"


def data_sample(workspace: Path, lines: int = SAMPLE_LINES) -> str:
    """The first ``lines`` lines of ``data/train.jsonl``, each cut to 400 characters; a
    note when the file is missing or empty (some tasks have no static training set)."""
    path = Path(workspace) / "data" / "train.jsonl"
    try:
        with path.open(encoding="utf-8", errors="replace") as f:
            out = [line.rstrip("\n") for line in islice(filter(str.strip, f), lines)]
    except OSError:
        return "(no data/train.jsonl in this task: see description.md for the data it has)"
    out = [s if len(s) <= SAMPLE_LINE_CHARS else s[:SAMPLE_LINE_CHARS] + "…" for s in out]
    return "\n".join(out) if out else "(data/train.jsonl is empty)"


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return f"(missing: {path.name})"


def render_prompt(
    workspace: Path,
    mode: str,
    time_left_s: float,
    template: str | None = None,
) -> str:
    """The agent's full prompt for ``mode``: the task's ``description.md`` and
    ``instructions.md``, a workspace listing, a data sample, the time left and the mode's
    text, filled into ``template`` (default :data:`AGENT_PROMPT`).

    A custom template may use any of ``{description}``, ``{instructions}``, ``{mode}``,
    ``{mode_text}``, ``{listing}``, ``{data_sample}``, ``{time_left}``, ``{workspace}``;
    when it has no ``{mode_text}`` the mode's text is appended, so every mode reaches the
    agent. Unknown placeholders or stray braces in a template raise :class:`UserError`.
    Missing task files become a note in the prompt rather than an error.
    """
    m = get_mode(mode)
    ws = Path(workspace)
    template = AGENT_PROMPT if template is None else template
    values = {
        "description": _read(ws / "description.md"),
        "instructions": _read(ws / "instructions.md"),
        "mode": m.name,
        "mode_text": m.text,
        "listing": workspace_listing(ws),
        "data_sample": data_sample(ws),
        "time_left": format_duration(time_left_s),
        "workspace": str(ws),
    }
    try:
        prompt = template.format(**values)
    except (KeyError, IndexError, ValueError) as err:
        raise UserError(
            f"bad prompt template ({err}): use only {', '.join('{' + k + '}' for k in values)}"
            " and double other braces"
        ) from None
    if "{mode_text}" not in template:
        prompt = f"{prompt.rstrip()}\n\n# Method ({m.name})\n{m.text}\n"
    return prompt
