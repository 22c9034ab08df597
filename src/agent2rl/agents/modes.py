"""Operating modes of an LLM agent: the prompt variants (text added to its prompt) that frame
which methods it may use, in :data:`MODES`. The paper runs Claude Code in all four.

The prompt a mode is rendered into is :mod:`agent2rl.agents.prompt`; whether a run's code
kept to its mode is :mod:`agent2rl.agents.methods`.
"""

from __future__ import annotations

from dataclasses import dataclass

from agent2rl.errors import UserError
from agent2rl.registry import Registry


@dataclass(frozen=True)
class Mode:
    """One operating mode: its name, a one-line summary and the text added to the prompt."""

    name: str
    summary: str
    text: str


#: the modes, by name (plug-ins add theirs through the ``agent2rl.modes`` entry points)
MODES: Registry[Mode] = Registry("modes", "mode")
for _mode in (
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
):
    MODES.register(_mode.name, _mode)


def get_mode(name: str) -> Mode:
    """The mode called ``name``; else :class:`UserError` listing the modes in the paper's
    order (the registry's, not sorted)."""
    if name not in MODES:
        raise UserError(f"unknown mode {name!r}: choose one of {', '.join(MODES)}")
    return MODES[name]
