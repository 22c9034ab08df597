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
