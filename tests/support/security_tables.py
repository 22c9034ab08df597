"""The red-team and faults tables of docs/security.md, read as data, and the CI rule on them.

Each table row is ``| attack or case | what happens | `tests/...py::test_id` |``. A named test
must prove its row, so in CI (``CI`` set to ``true`` or ``1``, where ``.ci/run`` installs
bubblewrap) a named test that is skipped is a failure (:func:`ci_skip_failure`, applied by
the hook in ``tests/conftest.py``), unless its row says why CI cannot run it, in its middle
cell: ``May skip in CI: <why>.`` (e.g. a machine without cgroup delegation).

Tests under ``tests/vllm/`` run in their own environment (``make test-vllm``, where none is
skipped); the table check does not collect them with the main suite's pytest
(:data:`OWN_ENVIRONMENT`).
"""

from __future__ import annotations

import os
import re
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SECURITY = ROOT / "docs" / "security.md"
#: overrides the page the CI rule reads (a test of the rule itself)
DOC_ENV = "AGENT2RL_SECURITY_DOC"
#: a table row's last cell: exactly one node id in backticks
NODE_CELL = re.compile(r"^`(tests/[^`\s]+\.py::[^`]+)`$")
#: a row's own word that CI cannot run its test, and why
MAY_SKIP = re.compile(r"May skip in CI: ([^.]+)\.")
#: test directories that run in an environment of their own, not collected with the suite
OWN_ENVIRONMENT = ("tests/vllm/",)


def section(text: str, heading: str, level: int) -> str:
    """The text under ``heading`` up to the next heading of ``level`` or higher."""
    lines = text.splitlines()
    start = lines.index(heading)
    end = len(lines)
    for i in range(start + 1, len(lines)):
        m = re.match(r"^(#+) ", lines[i])
        if m and len(m.group(1)) <= level:
            end = i
            break
    return "\n".join(lines[start + 1 : end])


def rows(text: str) -> list[list[str]]:
    """Each data row of the text's tables as its cells (header and rule rows left out)."""
    out = []
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("|"):
            continue
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip("|"))]
        header = cells in (["attack", "what happens", "test"], ["case", "what holds", "test"])
        if header or set("".join(cells)) <= set("-|: "):
            continue
        out.append(cells)
    return out


def red_team_rows(text: str) -> list[list[str]]:
    """The rows of the page's "## Red team" section."""
    return rows(section(text, "## Red team", level=2))


def fault_rows(text: str) -> list[list[str]]:
    """The rows of the page's "## Faults and load" section."""
    return rows(section(text, "## Faults and load", level=2))


def named_tests(text: str) -> dict[str, str | None]:
    """Every node id the two tables name -> why CI may skip it (its row's ``May skip in CI:
    ...``), None when it must run. A malformed row is left to the table check."""
    out: dict[str, str | None] = {}
    for cells in red_team_rows(text) + fault_rows(text):
        if len(cells) != 3 or not (m := NODE_CELL.match(cells[2])):
            continue
        why = MAY_SKIP.search(cells[1])
        out[m.group(1)] = why.group(1).strip() if why else None
    return out


@cache
def _named(path: str) -> dict[str, str | None]:
    return named_tests(Path(path).read_text())


def in_ci(env: dict[str, str] | os._Environ[str] = os.environ) -> bool:
    """Whether this is a CI run (``CI`` is ``true``/``1``/``yes``, as CI services set it)."""
    return env.get("CI", "").strip().lower() in {"1", "true", "yes"}


def ci_skip_failure(nodeid: str, reason: str) -> str | None:
    """In CI, the failure message for a skip of ``nodeid`` (skipped for ``reason``) when the
    tables name it and its row does not say CI may skip it; else None (not CI, not named,
    or allowed)."""
    if not in_ci():
        return None
    named = _named(os.environ.get(DOC_ENV) or str(SECURITY))
    if nodeid not in named or named[nodeid] is not None:
        return None
    return (
        f"{nodeid} is named in docs/security.md's red-team/faults tables, so in CI it must "
        f"run, but it was skipped ({reason}). Give CI what it needs (.ci/run), or, when CI "
        "cannot have it, say so in its row: 'May skip in CI: <why>.'"
    )
