"""The security page's red-team and faults tables (docs/security.md, moved there from the README)
stay honest: the red-team table has at least 40
attacks, the faults table at least 12 cases, and every test they name is a test that exists
(collected by pytest itself, from the files the tables name)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
SECURITY = ROOT / "docs" / "security.md"
MIN_ROWS = 40
MIN_FAULT_ROWS = 12
#: a table row's last cell: exactly one node id in backticks
NODE_CELL = re.compile(r"^`(tests/[^`\s]+\.py::[^`]+)`$")


def _section(text: str, heading: str, level: int) -> str:
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


def _rows(section: str) -> list[list[str]]:
    """Each data row of the section's tables as its cells (header and rule rows left out)."""
    rows = []
    for line in section.splitlines():
        line = line.strip()
        if not line.startswith("|"):
            continue
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip("|"))]
        header = cells in (["attack", "what happens", "test"], ["case", "what holds", "test"])
        if header or set("".join(cells)) <= set("-|: "):
            continue
        rows.append(cells)
    return rows


def red_team_rows(text: str) -> list[list[str]]:
    """The rows of the page's "## Red team" section (docs/security.md: "# Security" is the page)."""
    return _rows(_section(text, "## Red team", level=2))


def fault_rows(text: str) -> list[list[str]]:
    return _rows(_section(text, "## Faults and load", level=2))


def test_parser_reads_rows_and_node_ids() -> None:
    text = (
        "# Security\n\n## Red team\n\n**Group**\n\n| attack | what happens | test |\n"
        "|---|---|---|\n| a \\| b | c | `tests/unit/t.py::test_a[p-1]` |\n"
        "## Faults and load\n| not | in | `tests/unit/t.py::test_b` |\n"
    )
    rows = red_team_rows(text)
    assert rows == [["a \\| b", "c", "`tests/unit/t.py::test_a[p-1]`"]]
    assert NODE_CELL.match(rows[0][2]).group(1) == "tests/unit/t.py::test_a[p-1]"


def _assert_real_tests(rows: list[list[str]]) -> None:
    """Each row has three cells, the last one pytest node id that pytest collects; no two rows
    name the same test."""
    ids = []
    for cells in rows:
        assert len(cells) == 3 and all(cells), f"a row needs three cells: {cells}"
        m = NODE_CELL.match(cells[2])
        assert m, f"the test cell must be one pytest node id in backticks: {cells[2]!r}"
        ids.append(m.group(1))
    duplicated = sorted({i for i in ids if ids.count(i) > 1})
    assert not duplicated, f"each row must name its own test (or parameter id): {duplicated}"

    files = sorted({i.split("::")[0] for i in ids})
    missing_files = [f for f in files if not (ROOT / f).is_file()]
    assert not missing_files, f"the table names test files that do not exist: {missing_files}"
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *files],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    collected = set(proc.stdout.splitlines())
    unknown = [i for i in ids if i not in collected]
    assert not unknown, f"the table names tests that pytest does not collect: {unknown}"


def test_red_team_table_names_at_least_40_real_tests() -> None:
    rows = red_team_rows(SECURITY.read_text())
    assert len(rows) >= MIN_ROWS, f"the red-team table has {len(rows)} rows, fewer than {MIN_ROWS}"
    _assert_real_tests(rows)


def test_faults_table_names_real_tests() -> None:
    rows = fault_rows(SECURITY.read_text())
    assert len(rows) >= MIN_FAULT_ROWS, f"the faults table has {len(rows)} rows"
    _assert_real_tests(rows)
