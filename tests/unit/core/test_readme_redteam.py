"""The security page's red-team and faults tables (docs/security.md, moved there from the README)
stay honest: the red-team table has at least 40
attacks, the faults table at least 12 cases, and every test they name is a test that exists
(collected by pytest itself, from the files the tables name; a test of ``tests/vllm/``, which
runs in its own environment, is looked up in its file). In CI a named test may not be skipped
unless its row says why (tests/conftest.py's hook, :mod:`support.security_tables`)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from support.security_tables import (
    DOC_ENV,
    NODE_CELL,
    OWN_ENVIRONMENT,
    ROOT,
    SECURITY,
    fault_rows,
    named_tests,
    red_team_rows,
)

MIN_ROWS = 40
MIN_FAULT_ROWS = 12


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
    # tests/vllm runs in its own environment (make test-vllm): its module-level import of
    # vllm cannot be collected here, so the test function is looked up in its file.
    own = [i for i in ids if i.startswith(OWN_ENVIRONMENT)]
    absent = [
        i
        for i in own
        if f"def {i.split('::')[1].split('[')[0]}(" not in (ROOT / i.split("::")[0]).read_text()
    ]
    assert not absent, f"the table names tests that their files do not define: {absent}"
    ids = [i for i in ids if i not in own]
    files = sorted({i.split("::")[0] for i in ids})
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


def test_a_named_test_skipped_in_ci_fails_unless_its_row_says_why(tmp_path: Path) -> None:
    """The conftest hook in a real pytest run: with CI=true, a skip of a test the tables name
    fails the run, naming the test and the way out; a row that says 'May skip in CI: why.'
    lets its test skip; an unnamed test skips as ever; without CI nothing changes."""
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "conftest.py").write_text((ROOT / "tests" / "conftest.py").read_text())
    (tests / "test_x.py").write_text(
        "import pytest\n\n"
        "def test_named():\n    pytest.skip('no bubblewrap here')\n\n"
        "@pytest.mark.skipif(True, reason='no cgroup delegation')\n"
        "def test_allowed():\n    pass\n\n"
        "def test_unnamed():\n    pytest.skip('not in the tables')\n"
    )
    doc = tmp_path / "security.md"
    doc.write_text(
        "# Security\n\n## Red team\n\n| attack | what happens | test |\n|---|---|---|\n"
        "| a | b | `tests/test_x.py::test_named` |\n"
        "| c | d. May skip in CI: no cgroup delegation on CI machines. | "
        "`tests/test_x.py::test_allowed` |\n\n## Faults and load\n"
    )
    assert named_tests(doc.read_text()) == {
        "tests/test_x.py::test_named": None,
        "tests/test_x.py::test_allowed": "no cgroup delegation on CI machines",
    }

    def run(ci: str) -> subprocess.CompletedProcess:
        env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
        env.update(CI=ci, PYTHONPATH=str(ROOT / "tests"), **{DOC_ENV: str(doc)})
        cmd = [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider"]
        cmd += ["-p", "no:randomly", "-n", "0", "--rootdir", str(tmp_path), "tests/test_x.py"]
        return subprocess.run(
            cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
        )

    ci = run("true")
    assert ci.returncode == 1, ci.stdout + ci.stderr
    assert "1 failed, 2 skipped" in ci.stdout, ci.stdout
    assert "tests/test_x.py::test_named is named in docs/security.md" in ci.stdout
    assert "no bubblewrap here" in ci.stdout and "May skip in CI" in ci.stdout
    local = run("")
    assert local.returncode == 0 and "3 skipped" in local.stdout, local.stdout
