"""Durations, sizes and numbers as people read them: one format for the CLI, the status line,
the agent's prompt and the reports."""

from __future__ import annotations

DASH = "—"


def format_duration(seconds: float | None) -> str:
    """``1h02m03s`` / ``2m05s`` / ``42s``; a negative value keeps its sign (``-5s``, a
    deadline passed); None gives :data:`DASH`. Rounded to whole seconds."""
    if seconds is None:
        return DASH
    sign, s = ("-" if seconds < 0 else ""), abs(int(round(seconds)))
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    if h:
        return f"{sign}{h}h{m:02d}m{sec:02d}s"
    if m:
        return f"{sign}{m}m{sec:02d}s"
    return f"{sign}{sec}s"


def format_bytes(n: float | None) -> str:
    """``512 B``, ``1.5 KiB``, ``3.2 MiB``, ``1.0 GiB`` (binary units, GiB the largest);
    None gives :data:`DASH`."""
    if n is None:
        return DASH
    value = float(n)
    for unit in ("B", "KiB", "MiB"):
        if abs(value) < 1024:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB"


def format_number(
    x: float | None, digits: int = 2, *, signed: bool = False, missing: str = DASH
) -> str:
    """``x`` with ``digits`` decimals (``+`` / ``-`` always shown when ``signed``); None or
    NaN gives ``missing`` (:data:`DASH` unless a table wants its own placeholder)."""
    if x is None or x != x:  # x != x: NaN
        return missing
    return f"{x:+.{digits}f}" if signed else f"{x:.{digits}f}"


def format_percent(ratio: float | None, *, missing: str = DASH) -> str:
    """A ratio in [0, 1] as a whole percentage (``0.5`` -> ``50%``); None gives ``missing``."""
    return missing if ratio is None else f"{100 * ratio:.0f}%"
