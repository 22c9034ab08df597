"""What a run's code actually did: the training methods it used, and where they contradict the
run's mode (:mod:`agent2rl.agents.modes`).

After a run, :func:`detect_methods` reads the agent's code to recognise the methods it used,
and :func:`mode_contradictions` names where they contradict the mode (an ``sft-only`` run
that trained with GRPO). Detection is by pattern, so it errs towards reporting what the code
mentions; comments are ignored.
"""

from __future__ import annotations

import re
from pathlib import Path

from agent2rl.agents.modes import get_mode
from agent2rl.agents.prompt import HARNESS_DIRS

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


def _code_text(root: Path | str) -> str:
    if isinstance(root, str):
        return root
    if root.is_file():
        files = [root]
    elif root.is_dir():
        files = sorted(
            p
            for p in root.rglob("*")
            if p.is_file()
            and p.suffix in _CODE_SUFFIXES
            and not any(part in HARNESS_DIRS for part in p.parts)
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
    # Drop '#' comments (Python, shell, YAML) so "no GRPO here" does not count as GRPO; a
    # '#' inside a string on the same line is cut too, which only loses evidence.
    code = "\n".join(line.split("#", 1)[0] for line in _code_text(code_dir_or_text).splitlines())
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
            labels = {"online_dpo": "online DPO", "reinforce": "REINFORCE"}
            rl = ", ".join(labels.get(m, m.upper()) for m in RL_METHODS if m in methods)
            rl = rl or "a reward-driven policy update"
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
