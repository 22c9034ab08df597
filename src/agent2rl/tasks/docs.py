"""The task pages' option tables, generated from each task's options dataclass
(:mod:`agent2rl.tasks.options`), never written by hand. A page marks where a task's table goes::

    <!-- task-options: webshop-lite -->
    <!-- /task-options -->

and ``python -m agent2rl.tasks.docs`` (from the repository root; ``--check`` only reports)
fills in the table between the markers, replacing what was there. The docs test fails while
a page's table differs from the generated one."""

from __future__ import annotations

import sys
from pathlib import Path

from agent2rl.errors import UserError
from agent2rl.tasks.options import TaskOptions
from agent2rl.tasks.registry import TASKS

#: the markers around a generated table in a task page: <!-- task-options: NAME --> ...
BEGIN = "<!-- task-options: {name} -->"
END = "<!-- /task-options -->"


def options_markdown(options: type[TaskOptions]) -> str:
    """The options as a Markdown table (option, type, default, what it sets); a line saying
    there are none when there are none."""
    specs = options.specs()
    if not specs:
        return "This task has no options."
    rows = ["| option | type | default | what it sets |", "|---|---|---|---|"]
    for s in specs:
        text = s.help + (f" One of: {', '.join(f'`{c}`' for c in s.choices)}." if s.choices else "")
        # a pipe in a code span needs no escape on the site (Python-Markdown's tables);
        # in the help text it would end the cell
        text = text.replace("|", "\\|")
        rows.append(f"| `{s.name}` | {s.type.__name__} | `{s.default_text()}` | {text} |")
    return "\n".join(rows)


def render_docs(text: str) -> str:
    """``text`` (a Markdown page) with every generated options table replaced by the table
    of the task its marker names. Raises :class:`UserError` for an unknown task or a marker
    without its end."""
    out: list[str] = []
    rest = text
    while (start := rest.find("<!-- task-options: ")) >= 0:
        head_end = rest.index("-->", start) + 3
        name = rest[start + len("<!-- task-options: ") : head_end - 3].strip()
        stop = rest.find(END, head_end)
        if stop < 0:
            raise UserError(f"task-options marker for {name!r} has no {END}")
        table = options_markdown(TASKS[name].Options)  # type: ignore[attr-defined]
        out.append(rest[:start] + BEGIN.format(name=name) + "\n" + table + "\n")
        rest = rest[stop:]
    return "".join(out) + rest


def sync_docs(folder: Path, write: bool) -> list[Path]:
    """The Markdown files under ``folder`` whose generated option tables are stale
    (rewritten when ``write``)."""
    stale = []
    for path in sorted(folder.rglob("*.md")):
        text = path.read_text(encoding="utf-8")
        fresh = render_docs(text)
        if fresh != text:
            stale.append(path)
            if write:
                path.write_text(fresh, encoding="utf-8")
    return stale


def main(argv: list[str] | None = None) -> int:
    """``python -m agent2rl.tasks.docs [--check] [DIR...]``: rewrite (or only check) the
    generated option tables of the Markdown pages under each ``DIR`` (``docs/tasks``)."""
    args = list(sys.argv[1:] if argv is None else argv)
    check = "--check" in args
    folders = [Path(a) for a in args if a != "--check"] or [Path("docs/tasks")]
    stale = [p for d in folders for p in sync_docs(d, write=not check)]
    for path in stale:
        print(f"{'stale' if check else 'rewrote'}: {path}")
    return 1 if check and stale else 0


if __name__ == "__main__":
    raise SystemExit(main())
