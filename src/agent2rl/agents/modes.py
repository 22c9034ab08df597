"""Operating modes of an LLM agent, the prompt it starts from, and what its code actually did.

A mode is a prompt variant: text added to the agent's prompt that frames which methods it may
use. The paper runs Claude Code in all four:

==============  =================================================================
mode            the agent is told
==============  =================================================================
``free``        any method it judges best (SFT, RL, preference tuning, data work)
``sft-only``    supervised fine-tuning only: no RL, no preference optimisation
``rl-oriented`` RL is expected: online rollouts where the task has an environment,
                a reward it designs, GRPO/PPO/RLOO-style policy optimisation
``multi``       it may run parallel explorations or sub-agents and keep the best
==============  =================================================================

After a run, :func:`detect_methods` reads the agent's code to recognise the methods it used,
and :func:`mode_contradictions` names where they contradict the mode (an ``sft-only`` run
that trained with GRPO). Detection is by pattern, so it errs towards reporting what the code
mentions; comments are ignored.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from agent2rl.errors import UserError
from agent2rl.formatting import format_duration


@dataclass(frozen=True)
class Mode:
    """One operating mode: its name, a one-line summary and the text added to the prompt."""

    name: str
    summary: str
    text: str


MODES: dict[str, Mode] = {
    m.name: m
    for m in (
        Mode(
            "free",
            "free choice of method",
            "Choose whatever post-training method you judge best for this task and budget: "
            "supervised fine-tuning, reinforcement learning, preference optimisation, data "
            "filtering or generation, or a combination. Measure, compare and keep what works.",
        ),
        Mode(
            "sft-only",
            "supervised fine-tuning only, no RL",
            "Use supervised fine-tuning only: train on (prompt, target) pairs with a "
            "likelihood loss (e.g. trl's SFTTrainer or a plain training loop). You may clean, "
            "filter, augment or generate training data, but do not use reinforcement learning "
            "or preference optimisation: no reward-driven policy updates (GRPO, PPO, RLOO, "
            "REINFORCE) and no DPO-style training.",
        ),
        Mode(
            "rl-oriented",
            "reinforcement learning expected",
            "Use reinforcement learning as your main method. Design a reward for the task "
            "(a programmatic verifier where answers can be checked, else a judge or learned "
            "reward) and optimise the policy with it, e.g. GRPO, PPO or RLOO (trl's "
            "GRPOTrainer works well). Where the task has an interactive environment, collect "
            "online rollouts from it and train on those trajectories. A short SFT warm-up "
            "before RL is fine; RL should carry the improvement.",
        ),
        Mode(
            "multi",
            "parallel explorations / sub-agents",
            "You may work in parallel: start several explorations at once (different methods, "
            "hyperparameters or data recipes), as sub-agents or background jobs, each in its "
            "own folder under code/ and output/, and then pursue the most promising. Keep the "
            "machine's resources (GPU memory, CPU cores) in mind when running jobs side by "
            "side, and submit the best models you find.",
        ),
    )
}


def get_mode(name: str) -> Mode:
    """The mode called ``name``; else :class:`UserError` listing the modes."""
    try:
        return MODES[name]
    except KeyError:
        raise UserError(f"unknown mode {name!r}: choose one of {', '.join(MODES)}") from None


# --------------------------------------------------------------------------------------------
# The prompt

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

_LISTING_SKIP = {".home", ".tmp", ".cache", ".agent2rl", ".git", "__pycache__"}
_LISTING_MAX = 60
SAMPLE_LINES = 3
SAMPLE_LINE_CHARS = 400


def _size(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


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
            if p.name in _LISTING_SKIP:
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
    out: list[str] = []
    try:
        with path.open(encoding="utf-8", errors="replace") as f:
            for line in f:
                line = line.rstrip("\n")
                if line.strip():
                    cut = line if len(line) <= SAMPLE_LINE_CHARS else line[:SAMPLE_LINE_CHARS] + "…"
                    out.append(cut)
                if len(out) >= lines:
                    break
    except OSError:
        return "(no data/train.jsonl in this task: see description.md for the data it has)"
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


# --------------------------------------------------------------------------------------------
# What the code did

# Method -> patterns over comment-free code. "rl" is derived, see detect_methods.
_METHOD_PATTERNS: dict[str, tuple[str, ...]] = {
    # Upper case may run into a class name (GRPOTrainer); lower case must stand alone
    # (grpo_train.py, run_ppo) so that words like "oppose" do not count.
    "sft": (
        r"(?<![A-Za-z])SFT",
        r"(?i)(?<![a-z])sft(?![a-z])",
        r"(?i)supervised[ _-]?fine[ _-]?tun",
    ),
    "grpo": (r"(?<![A-Za-z])GRPO", r"(?i)(?<![a-z])grpo(?![a-z])"),
    "ppo": (r"(?<![A-Za-z])PPO", r"(?i)(?<![a-z])ppo(?![a-z])"),
    "rloo": (r"(?<![A-Za-z])RLOO", r"(?i)(?<![a-z])rloo(?![a-z])"),
    "reinforce": (
        r"(?<![A-Za-z])REINFORCE",
        r"(?<![a-z])reinforce(?:_?pp)?(?![a-z])",
        r"(?i)policy[ _]gradient",
    ),
    "online_dpo": (r"OnlineDPO", r"(?i)online[ _-]dpo"),
    "dpo": (
        r"(?<![A-Za-z])(?:DPO|ORPO|KTO|CPO|SimPO)",
        r"(?i)(?<![a-z])(?:dpo|orpo|simpo|kto)(?![a-z])",
    ),
    "reward": (
        r"(?i)\bdef\s+\w*reward\w*\s*\(",
        r"\breward_(?:funcs?|fn|model)\b",
        r"(?i)\bcompute_rewards?\b",
        r"(?i)\brewards?\s*=",
    ),
    "rollout": (
        r"(?i)rollout",
        r"\benv\.step\s*\(",
        r"(?i)\btrajector(?:y|ies)\b",
    ),
}
# A plain transformers Trainer is SFT when the batches carry labels.
_TRAINER = re.compile(r"\bTrainer\s*\(")
_LABELS = re.compile(r"""["']?labels["']?\s*[\]=:]""")
_ADVANTAGE = re.compile(r"(?i)advantages?\b")
_LOGPROB = re.compile(r"(?i)log_?probs?\b")
RL_METHODS = ("grpo", "ppo", "rloo", "reinforce", "online_dpo")
_CODE_SUFFIXES = {".py", ".sh", ".yaml", ".yml", ".toml", ".json", ".cfg", ".ipynb"}
_MAX_FILE_BYTES = 2_000_000


def _strip_comments(code: str) -> str:
    # Drop '#' comments (Python, shell, YAML) so "no GRPO here" does not count as GRPO; a
    # '#' inside a string on the same line is cut too, which only loses evidence.
    return "\n".join(line.split("#", 1)[0] for line in code.splitlines())


def _code_text(code_dir_or_text: Path | str) -> str:
    if isinstance(code_dir_or_text, Path):
        root = code_dir_or_text
        if root.is_file():
            files = [root]
        elif root.is_dir():
            files = sorted(
                p
                for p in root.rglob("*")
                if p.is_file()
                and p.suffix in _CODE_SUFFIXES
                and not any(part in _LISTING_SKIP for part in p.parts)
            )
        else:
            return ""
        chunks = []
        for p in files:
            try:
                if p.stat().st_size <= _MAX_FILE_BYTES:
                    chunks.append(p.read_text(encoding="utf-8", errors="replace"))
            except OSError:
                continue
        return "\n".join(chunks)
    return code_dir_or_text


def detect_methods(code_dir_or_text: Path | str) -> set[str]:
    """The training methods a body of code uses.

    ``code_dir_or_text`` is a folder (its ``.py``/``.sh``/config files, recursively), one
    file, or the code itself as a string. Returns a subset of ``sft``, ``grpo``, ``ppo``,
    ``rloo``, ``reinforce``, ``online_dpo``, ``dpo`` (offline preference optimisation:
    DPO/ORPO/KTO/SimPO), ``preference`` (any DPO-style method), ``reward`` (a reward
    function or model), ``rollout`` (rollout loops, environment steps, trajectories) and
    ``rl``: any of grpo/ppo/rloo/reinforce/online_dpo, or a reward used with rollouts or
    advantages (a hand-written policy-gradient loop). A missing folder gives an empty set.
    """
    code = _strip_comments(_code_text(code_dir_or_text))
    # Online DPO samples from the policy (RL); only DPO mentioned apart from it is offline.
    offline = code
    for p in _METHOD_PATTERNS["online_dpo"]:
        offline = re.sub(p, " ", offline)
    found = {
        method
        for method, patterns in _METHOD_PATTERNS.items()
        if any(re.search(p, offline if method == "dpo" else code) for p in patterns)
    }
    if _TRAINER.search(code) and _LABELS.search(code):
        found.add("sft")
    if found & {"dpo", "online_dpo"}:
        found.add("preference")
    hand_written_pg = "reward" in found and (
        "rollout" in found or (_ADVANTAGE.search(code) and _LOGPROB.search(code))
    )
    if found & set(RL_METHODS) or hand_written_pg:
        found.add("rl")
    return found


def _names(methods: set[str], which: tuple[str, ...]) -> str:
    labels = {"online_dpo": "online DPO", "reinforce": "REINFORCE"}
    return ", ".join(labels.get(m, m.upper()) for m in which if m in methods)


def mode_contradictions(
    mode: str, methods: set[str], env_steps: int = 0, *, interactive: bool = False
) -> list[str]:
    """Where a run's methods (from :func:`detect_methods`) and environment steps contradict
    its mode; an empty list when they agree.

    ``sft-only`` contradicts any RL method and offline preference optimisation;
    ``rl-oriented`` contradicts code with no RL method, and — when the task is
    ``interactive`` (it has an environment) — a run that took no environment steps.
    ``free`` and ``multi`` allow everything. An unknown mode is a :class:`UserError`.
    """
    get_mode(mode)
    found: list[str] = []
    if mode == "sft-only":
        if "rl" in methods:
            rl = _names(methods, RL_METHODS) or "a reward-driven policy update"
            found.append(f"sft-only run used reinforcement learning ({rl})")
        if "dpo" in methods:
            found.append("sft-only run used preference optimisation (DPO-style), not SFT")
    elif mode == "rl-oriented":
        if "rl" not in methods:
            only = f" (found: {', '.join(sorted(methods))})" if methods else ""
            found.append(
                "rl-oriented run shows no RL method: no GRPO/PPO/RLOO/REINFORCE trainer and "
                f"no reward-driven rollout loop{only}"
            )
        if interactive and env_steps <= 0:
            found.append("rl-oriented run on an interactive task took no environment steps")
    return found


__all__ = [
    "AGENT_PROMPT",
    "MODES",
    "RL_METHODS",
    "Mode",
    "data_sample",
    "detect_methods",
    "get_mode",
    "mode_contradictions",
    "render_prompt",
    "workspace_listing",
]
