"""Paths and defaults.

Everything a run reads or writes outside its run directory lives under ``AGENT2RL_HOME``
(default ``~/.agent2rl``): the task store (public and private splits), the model store,
the baseline cache and the per-device evaluation locks.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from agent2rl.errors import UserError
from agent2rl.files import SubPath


@dataclass(frozen=True)
class Settings:
    """Resolved paths; build with :func:`load_settings`."""

    home: Path

    task_store = SubPath("tasks", base="home")
    model_store = SubPath("models", base="home")
    baseline_cache = SubPath("cache", "baselines", base="home")
    locks = SubPath("locks", base="home")


def load_settings() -> Settings:
    """Read ``AGENT2RL_HOME`` from the environment (``~/.agent2rl`` when unset)."""
    home = Path(os.environ.get("AGENT2RL_HOME") or Path.home() / ".agent2rl").expanduser()
    return Settings(home=home.resolve())


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$", re.IGNORECASE)
_UNIT_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str) -> float:
    """Parse a budget like ``90s``, ``30m``, ``12h``, ``1.5h`` or a bare number of seconds.

    Raises :class:`UserError` for anything else, including zero or negative budgets.
    """
    match = _DURATION.match(str(text))
    if not match:
        raise UserError(f"bad duration {text!r}: use a number with s, m or h, e.g. 90s, 30m, 12h")
    seconds = float(match.group(1)) * _UNIT_SECONDS[match.group(2).lower()]
    if seconds <= 0:
        raise UserError(f"bad duration {text!r}: it must be more than zero")
    return seconds


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?\s*$", re.IGNORECASE)
_UNIT_BYTES = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}


def parse_size(text: str) -> int:
    """Parse a size like ``200M``, ``16G``, ``1.5GiB``, ``512k`` or a bare number of bytes
    (binary units: 1K = 1024 bytes). Raises :class:`UserError` for anything else, including
    zero."""
    match = _SIZE.match(str(text))
    if not match:
        raise UserError(f"bad size {text!r}: use a number with K, M, G or T, e.g. 200M, 16G")
    size = int(float(match.group(1)) * _UNIT_BYTES[match.group(2).lower()])
    if size <= 0:
        raise UserError(f"bad size {text!r}: it must be more than zero")
    return size
