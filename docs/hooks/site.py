"""mkdocs hooks for the agent2rl site.

- The site's home page is the repository's README.md, with its ``docs/...`` links made
  relative to the site, so the two never drift apart.
- ``figures.md`` renders every JSON result under ``docs/figures/data/`` at build time (the
  marker ``<!-- figures-data -->``): each file's command, commit, date and machine, then its
  measured values as a table. No figure there is retyped by hand. A file that is not valid JSON
  fails the build (strict), naming the file.
- Any page can show a figure from those files where it names one, as a table or a chart
  (uPlot, the same bundled library as the reports, inlined with its data and a no-JavaScript
  table), so a figure quoted on a page is never retyped:

      <!-- table FILE PATH [columns=a,b,c] -->
      <!-- chart FILE PATH x=FIELD y=FIELD[,FIELD] [group=FIELD] [title=WORDS_WITH_UNDERSCORES] -->
      <!-- value FILE PATH [digits=N] [unit=WORD] -->
      <!-- about FILE -->

  ``PATH`` is a dotted path inside the file to a list of records (objects) or an object of
  records (its keys become a ``key`` column; an object of summaries becomes ``key`` and
  ``value`` rows); ``-`` is the whole file. ``value`` renders one
  number inline (``digits`` decimals, default 2), or a summary that
  ``benchmarks/provenance.py`` wrote (``n`` and ``samples``, and from 3 samples ``median``,
  ``min`` and ``max``) as its median and range, or as its samples when there are fewer
  than 3: never a median of one or two. ``about`` names how the file was measured (command,
  commit, date, machine, split, repeats). A marker naming a file, path or field that does
  not exist, or a file written with ``--quick``, fails the build with the marker's text.
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
PROVENANCE = ("command", "commit", "worktree", "date", "machine", "split", "repeats")


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
        for key in PROVENANCE:
            shown = _provenance(key, data[key]) if key in data else "not recorded"
            out.append(f"- {key}: {shown}")
        out += ["", "| value | measured |", "|---|---|"]
        rest = {k: v for k, v in data.items() if k not in PROVENANCE + ("benchmark",)}
        out += [f"| `{_cell(k)}` | {_cell(v)} |" for k, v in _flatten(rest)]
        out.append("")
    return "\n".join(out)


def _provenance(key: str, v: Any) -> str:
    """One provenance field as the pages show it (a machine as one line)."""
    if key == "machine" and isinstance(v, dict):
        gpus = "".join(f", GPU {g}" for g in v.get("gpus") or [])
        load = f"load {v.get('load_before')} before, {v.get('load_after')} after"
        torch = f"torch {v.get('torch')} on {v.get('torch_threads')} threads"
        v = f"{v.get('host')} ({v.get('cores')} cores, {v.get('cpu')}{gpus}); {torch}; {load}"
    elif key == "worktree" and isinstance(v, dict):
        v = "dirty: " + ", ".join(v.get("dirty", []))
    return f"`{_cell(str(v))}`"


FIGURE_MARKER = re.compile(
    r"<!--\s*(table|chart|value|about)\s+(\S+)(?:\s+([^\s=]+))?((?:\s+[a-z_]+=\S+)*)\s*-->"
)


def _load(data_dir: Path, file: str) -> dict[str, Any]:
    """A data file a page may cite; a quick-mode file may not be cited."""
    try:
        data = json.loads((data_dir / file).read_text(encoding="utf-8"))
    except OSError:
        raise ValueError(f"no data file {file!r} under {data_dir}") from None
    except json.JSONDecodeError as err:
        raise ValueError(f"{file}: not valid JSON ({err})") from None
    if isinstance(data, dict) and data.get("quick"):
        raise ValueError(f"{file} was written with --quick: its figures are not measurements")
    return data


def _node(data_dir: Path, file: str, path: str) -> Any:
    """The value at dotted ``path`` of ``data_dir/file`` (``-``: the whole file)."""
    node: Any = _load(data_dir, file)
    for part in [] if path == "-" else path.split("."):
        if not isinstance(node, dict) or part not in node:
            raise ValueError(f"{file}: no {path!r} in it (at {part!r})")
        node = node[part]
    return node


def _records(data_dir: Path, file: str, path: str) -> list[dict[str, Any]]:
    """The records at dotted ``path`` of ``data_dir/file`` (module docstring)."""
    node = _node(data_dir, file, path)
    if isinstance(node, dict) and node and all(is_summary(v) for v in node.values()):
        return [{"key": k, "value": v} for k, v in node.items()]  # one summary a row
    if isinstance(node, dict) and all(isinstance(v, dict) for v in node.values()):
        return [{"key": k, **v} for k, v in node.items()]
    if isinstance(node, list) and all(isinstance(v, dict) for v in node):
        return node
    raise ValueError(f"{file}: {path!r} is not a list or an object of records")


def _number(v: Any) -> float | None:
    """A chart's x: a number, or a key that spells one (``"10"``); None otherwise."""
    if isinstance(v, bool):
        return None
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def is_summary(v: Any) -> bool:
    """A summary as ``benchmarks/provenance.py`` writes it."""
    return isinstance(v, dict) and "samples" in v and "n" in v


def _num(x: Any, digits: int | None, unit: str) -> str:
    """``x`` with ``digits`` decimals (None: as short as it reads, ``:g``) and its unit."""
    text = (f"{x:g}" if digits is None else f"{x:.{digits}f}") if isinstance(x, float) else str(x)
    return f"{text} {unit}" if unit else text


def summary_text(v: dict[str, Any], digits: int | None = 2, unit: str = "") -> str:
    """A summary's median and range, or its samples when there are fewer than 3."""
    if "median" in v:
        lo, hi = _num(v["min"], digits, ""), _num(v["max"], digits, unit)
        return f"{_num(v['median'], digits, unit)} ({lo}-{hi}, {v['n']} repeats)"
    shown = ", ".join(_num(x, digits, unit) for x in v["samples"])
    return f"{shown} ({v['n']} {'sample' if v['n'] == 1 else 'samples'}, no median)"


def _value(v: Any, digits: int | None = None, unit: str = "") -> str:
    if is_summary(v):
        return summary_text(v, digits, unit)
    if isinstance(v, float):
        return _num(v, digits, unit)
    if isinstance(v, int) and not isinstance(v, bool):
        return _num(v, digits, unit)
    return "" if v is None else _cell(v if isinstance(v, str) else json.dumps(v))


def _about(data_dir: Path, file: str, up: str) -> str:
    """How ``file`` was measured, as one sentence."""
    d = _load(data_dir, file)
    lacking = [k for k in PROVENANCE if k not in d]
    if lacking:
        raise ValueError(f"{file}: no {', '.join(lacking)} (not written by the figures pipeline)")
    return (
        f"Measured by `{d['command']}` at commit `{str(d['commit'])[:10]}` on {d['date'][:10]} "
        f"({_provenance('machine', d['machine'])}), {d['split']} split, {d['repeats']} "
        f"repeats, checkout {_provenance('worktree', d['worktree'])}: "
        f"[`{file}`]({up}figures/data/{file})."
    )


def _figure(kind: str, file: str, path: str, opts: dict[str, str], data_dir: Path, up: str) -> str:
    if kind == "about":
        return _about(data_dir, file, up)
    if kind == "value":
        digits = int(opts.get("digits", 2))
        return _value(_node(data_dir, file, path), digits, opts.get("unit", "").replace("_", " "))
    rows = _records(data_dir, file, path)
    fields = list(dict.fromkeys(k for r in rows for k in r))
    wanted = [c for c in opts.get("columns", "").split(",") if c]
    for f in (
        wanted
        + [opts[k] for k in ("x", "group") if k in opts]
        + [y for y in opts.get("y", "").split(",") if y]
    ):
        if f not in fields:
            raise ValueError(f"{file} {path}: no field {f!r} (fields: {', '.join(fields)})")
    source = f"From [`{file}`]({up}figures/data/{file})" + ("" if path == "-" else f", `{path}`")
    split = _load(data_dir, file).get("split")
    source += f" ({split} split)" if split in ("graded", "validation") else ""
    if kind == "table":
        cols = wanted or fields
        lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
        digits = int(opts["digits"]) if "digits" in opts else None
        lines += ["| " + " | ".join(_value(r.get(c), digits) for c in cols) + " |" for r in rows]
        return "\n".join(lines) + f"\n\n{source}.\n"
    from agent2rl.analysis.rendering import Chart, Series, chart_html

    if "x" not in opts or "y" not in opts:
        raise ValueError(f"chart {file} {path}: needs x= and y=")
    palette = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b")
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault(str(r.get(opts["group"])) if "group" in opts else "", []).append(r)
    series = []
    for y in opts["y"].split(","):
        for g, members in groups.items():
            pts = [(v, r.get(y)) for r in members if (v := _number(r.get(opts["x"]))) is not None]
            label = " · ".join(s for s in (g, y if "," in opts["y"] or not g else "") if s)
            color = palette[len(series) % len(palette)]
            series.append(
                Series(label or y, color, [p[0] for p in pts], [p[1] for p in pts], markers=True)
            )
    title = opts.get("title", f"{path} ({file})").replace("_", " ")
    chart = Chart(
        id=f"{file}-{path}-{opts['y']}".replace(".", "-"),
        title=title,
        x_label=opts["x"].replace("_", " "),
        y_label=opts["y"].replace("_", " ").replace(",", ", "),
        series=series,
        width=640,
        height=300,
    )
    return f"\n{chart_html(chart)}\n\n{source}.\n"


def render_markers(markdown: str, data_dir: Path = DATA, page_uri: str = "figures.md") -> str:
    """``markdown`` with every table/chart marker replaced by its figure (module docstring);
    a page with a chart gets the charting library's style and script once, at its end.
    ``page_uri`` (the page's path under docs/) makes the links to the data files relative.
    Raises ValueError naming the marker when its file, path or a field does not exist."""
    charts = False

    def one(m: re.Match[str]) -> str:
        nonlocal charts
        kind, file, path = m.group(1), m.group(2), m.group(3) or "-"
        opts = dict(o.split("=", 1) for o in m.group(4).split())
        try:
            out = _figure(kind, file, path, opts, data_dir, "../" * page_uri.count("/"))
        except ValueError as err:
            raise ValueError(f"{m.group(0)}: {err}") from None
        charts = charts or kind == "chart"
        return out

    out = FIGURE_MARKER.sub(one, markdown)
    if charts:
        from agent2rl.analysis.rendering import chart_runtime, chart_style

        out += f"\n\n{chart_style()}\n{chart_runtime()}\n"
    return out


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    if page.file.src_uri == "figures.md" and MARKER in markdown:
        markdown = markdown.replace(MARKER, render_figures())
    return render_markers(markdown, page_uri=page.file.src_uri)
