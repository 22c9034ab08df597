"""The package's import graph has no cycles between its packages, counting every import:
module level, inside functions and under ``TYPE_CHECKING``, so that an import moved into a
function to dodge a cycle still fails here."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import agent2rl

SRC = Path(agent2rl.__file__).resolve().parent
#: scripts copied into a workspace, run there as plain files (not modules of the package)
SCRIPTS = (SRC / "agents" / "reference",)


def _unit(module: str) -> str | None:
    """The package (or top-level module) of ``agent2rl.x.y``: ``x``; None outside."""
    parts = module.split(".")
    if parts[0] != "agent2rl" or len(parts) < 2:
        return None
    return parts[1]


def _module_name(path: Path) -> str:
    rel = path.relative_to(SRC.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def import_graph() -> dict[str, dict[str, list[str]]]:
    """unit -> imported unit -> the files (with line) that import it."""
    graph: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for path in sorted(SRC.rglob("*.py")):
        if any(path.is_relative_to(s) for s in SCRIPTS):
            continue
        name = _module_name(path)
        src = _unit(name)
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:  # relative: resolve against this package
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    targets = [".".join(base + ([node.module] if node.module else []))]
                elif node.module:
                    targets = [node.module]
            for target in targets:
                dst = _unit(target)
                if src and dst and dst != src:
                    graph[src][dst].append(f"{path.relative_to(SRC)}:{node.lineno}")
    return graph


def find_cycle(graph: dict[str, dict[str, list[str]]]) -> list[str] | None:
    """One cycle of the graph as a list of units (first == last), or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(u: str) -> list[str] | None:
        state[u] = 1
        stack.append(u)
        for v in sorted(graph.get(u, {})):
            if state.get(v) == 1:
                return stack[stack.index(v) :] + [v]
            if v not in state and (found := visit(v)):
                return found
        stack.pop()
        state[u] = 2
        return None

    for u in sorted(graph):
        if u not in state and (found := visit(u)):
            return found
    return None


def test_no_package_cycles() -> None:
    graph = import_graph()
    cycle = find_cycle(graph)
    if cycle:
        where = [
            f"{a} -> {b} ({', '.join(graph[a][b][:3])})"
            for a, b in zip(cycle, cycle[1:], strict=False)
        ]
        raise AssertionError("import cycle between packages:\n  " + "\n  ".join(where))


def test_the_checker_finds_a_cycle() -> None:
    """The walk itself: a planted cycle is found, including through a function-level import."""
    graph = {"a": {"b": ["a.py:1"]}, "b": {"c": ["b.py:9"]}, "c": {"a": ["c.py:40 (in a def)"]}}
    assert find_cycle(graph) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b": ["x"]}, "b": {}}) is None
    # function-level imports are in the real graph: the grading worker imports the tasks
    # inside a module the CLI starts as a process
    assert "tasks" in import_graph()["grading"]


#: analysis/'s subpackages, bottom first: each imports only those before it (rendering
#: serves both pages; the per-run report never reads the cross-run dashboard)
ANALYSIS_LAYERS = ("rendering", "report", "dashboard")


def _imports_of(path: Path) -> list[tuple[int, str]]:
    """(line, absolute module) of every import in ``path``, relative ones resolved."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                out.append((node.lineno, ".".join(base + ([node.module] if node.module else []))))
            elif node.module:
                out.append((node.lineno, node.module))
    return out


def test_analysis_subpackages_import_only_downward() -> None:
    root = SRC / "analysis"
    upward = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).parts
        if len(rel) < 2 or rel[0] not in ANALYSIS_LAYERS:
            continue  # analysis/__init__.py re-exports the public API of all three
        mine = ANALYSIS_LAYERS.index(rel[0])
        for line, target in _imports_of(path):
            parts = target.split(".")
            if parts[:2] == ["agent2rl", "analysis"] and len(parts) > 2:
                other = parts[2]
                if other in ANALYSIS_LAYERS and ANALYSIS_LAYERS.index(other) > mine:
                    upward.append(f"{path.relative_to(SRC)}:{line} imports {target}")
    assert not upward, "analysis subpackage imports upward:\n  " + "\n  ".join(upward)


def test_statistics_is_at_the_bottom() -> None:
    """The intervals the grading service and the analyses share import nothing above them."""
    assert set(import_graph().get("statistics", {})) <= {"files"}


def test_rendering_loads_without_the_report() -> None:
    """The viewer and the docs build import the charts alone: that must not pull in the
    report's dependencies (tasks, integrity), which take seconds to import."""
    import subprocess
    import sys

    code = (
        "import sys, agent2rl.analysis.rendering, agent2rl.analysis as a\n"
        "assert 'agent2rl.tasks' not in sys.modules, 'tasks imported'\n"
        "assert a.RunMetrics.__name__ == 'RunMetrics'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


#: the packages in ARCHITECTURE.md's layers, top first, with the viewer (a user interface
#: over finished and live runs) beside the CLI and the study above the run; ``rollout`` sits
#: above ``solvers``, whose episode solver plays the rollout environments.
LAYERS = (
    "cli",
    "viewer",
    "study",
    "orchestration",
    "analysis",
    "grading",
    "workspace",
    "integrity",
    "models",
    "tasks",
    "agents",
    "scoring",
    "metering",
    "sandbox",
    "solvers",
    "rollout",
    "inference",
    "recording",
)


def test_packages_import_only_downward() -> None:
    """No package imports one listed above it (e.g. a run printing the viewer's URL reads
    the viewer's announce file through a base module, not the viewer's package)."""
    rank = {unit: i for i, unit in enumerate(LAYERS)}
    upward = [
        f"{src} imports {dst} ({', '.join(where[:2])})"
        for src, dsts in sorted(import_graph().items())
        for dst, where in dsts.items()
        if src in rank and dst in rank and rank[dst] < rank[src]
    ]
    assert not upward, "imports upward:\n  " + "\n  ".join(upward)
