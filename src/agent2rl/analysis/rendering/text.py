"""Escaping for the analysis pages: the one place agent-controlled text becomes markup."""

from __future__ import annotations

import html
import re
from typing import Any

_MD_SPECIAL = re.compile(r"([\\`*_\[\]|#~])")


def esc(value: Any) -> str:
    """HTML-escape anything, quotes too (safe inside attributes); None gives ``""``."""
    return html.escape("" if value is None else str(value), quote=True)


def md_cell(value: Any, limit: int = 300) -> str:
    """Escape a string for one Markdown table cell: HTML, Markdown syntax, pipes, newlines.

    Whitespace runs (newlines included) collapse to one space; text longer than ``limit``
    characters is cut with an ellipsis. None gives ``""``.
    """
    text = "" if value is None else " ".join(str(value).split())
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    return _MD_SPECIAL.sub(r"\\\1", html.escape(text, quote=False))
