"""mkdocs hooks for the agent2rl site.

- The site's home page is the repository's README.md, with its ``docs/...`` links made
  relative to the site, so the two never drift apart.
- ``figures.md`` renders every JSON result under ``docs/figures/data/`` at build time (the
  marker ``<!-- figures-data -->``): each file's command, commit, date and machine, then its
  measured values as a table. No figure there is retyped by hand. A file that is not valid JSON
  fails the build (strict), naming the file.
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

log = logging.getLogger("mkdocs.hooks.agent2rl")
ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "docs" / "figures" / "data"
MARKER = "<!-- figures-data -->"
#: provenance fields as benchmarks write them (first present wins)
PROVENANCE = {
    "command": ("command", "cmd"),
    "commit": ("commit", "git_commit", "git_rev"),
    "date": ("date", "measured_at", "timestamp"),
    "machine": ("machine", "host"),
}


def on_files(files: Files, config: Any) -> Files:
    """Add README.md as the site's index.md (a page generated in memory, not a file on disk)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    # README links into docs/ are relative to the repository; on the site they are relative to
    # the docs root. An image or link elsewhere in the repository has no page on the site.
    text = re.sub(r"\]\(docs/", "](", text)
    files.append(File.generated(config, "index.md", content=text))
    return files


def _flatten(value: Any, prefix: str = "") -> list[tuple[str, str]]:
    """(dotted key, value) for every scalar leaf; a list of scalars stays one cell."""
    if isinstance(value, dict):
        out: list[tuple[str, str]] = []
        for k, v in value.items():
            out += _flatten(v, f"{prefix}.{k}" if prefix else str(k))
        return out
    if isinstance(value, list) and any(isinstance(v, (dict, list)) for v in value):
        out = []
        for i, v in enumerate(value):
            out += _flatten(v, f"{prefix}[{i}]")
        return out
    return [(prefix, json.dumps(value) if not isinstance(value, str) else value)]


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_figures(data_dir: Path = DATA) -> str:
    """Markdown for every ``*.json`` under ``data_dir``, sorted by name; "none yet" when empty.

    Raises ValueError naming the file when one is not a JSON object.
    """
    paths = sorted(data_dir.glob("*.json")) if data_dir.is_dir() else []
    if not paths:
        return "_No benchmark has written a result file under `docs/figures/data/` yet._\n"
    out = []
    for path in paths:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as err:
            raise ValueError(f"{path.name}: not valid JSON ({err})") from None
        if not isinstance(data, dict):
            raise ValueError(f"{path.name}: a result file must hold a JSON object")
        name = data.get("benchmark", path.stem)
        out += [f"### `{name}`", "", f"From [`{path.name}`](figures/data/{path.name}).", ""]
        used = set()
        for label, keys in PROVENANCE.items():
            key = next((k for k in keys if k in data), None)
            shown = f"`{_cell(str(data[key]))}`" if key else "not recorded"
            used.add(key)
            out.append(f"- {label}: {shown}")
        out += ["", "| value | measured |", "|---|---|"]
        rest = {k: v for k, v in data.items() if k not in used and k != "benchmark"}
        out += [f"| `{_cell(k)}` | {_cell(v)} |" for k, v in _flatten(rest)]
        out.append("")
    return "\n".join(out)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    if page.file.src_uri == "figures.md" and MARKER in markdown:
        return markdown.replace(MARKER, render_figures())
    return markdown
