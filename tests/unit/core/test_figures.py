"""The figures pipeline (issue #40): every data file under ``docs/figures/data/`` comes from a
command the pipeline runs, through one writer, from a committed checkout; the pages quote
figures only through the docs hook's markers; the README's demo block is what the data says.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
DATA = ROOT / "docs" / "figures" / "data"
sys.path.insert(0, str(ROOT / "benchmarks"))

import figures  # noqa: E402  (benchmarks/figures.py: the pipeline)
import provenance  # noqa: E402  (benchmarks/provenance.py: the writer)
import readme  # noqa: E402  (benchmarks/readme.py: the README's demo block)


@pytest.mark.parametrize("path", sorted(DATA.glob("*.json")), ids=lambda p: p.name)
def test_every_data_file_comes_from_the_pipeline(path: Path) -> None:
    data = json.loads(path.read_text())
    lacking = [k for k in provenance.HEADER if k not in data]
    assert not lacking, f"{path.name}: no {lacking} (not written by benchmarks/provenance.py)"
    assert path.stem in {f.name for f in figures.FIGURES}, "no pipeline command writes it"
    assert data["benchmark"] == path.stem
    assert re.fullmatch(r"[0-9a-f]{40}", data["commit"]), "a full commit"
    assert data["quick"] is False, "a --quick file is a smoke test, not a figure"
    assert data["split"] in ("graded", "validation", "none")
    assert {"cores", "load_before", "load_after", "torch_threads"} <= set(data["machine"])
    assert data["command"].startswith("python benchmarks/")


def test_every_figure_a_cpu_measures_has_its_data_file() -> None:
    """What ``make figures`` measures on a CPU is on the pages: no figure left unmeasured."""
    cpu = [f.name for f in figures.FIGURES if f.needs is None]
    assert [n for n in cpu if not (DATA / f"{n}.json").is_file()] == []
    for f in figures.FIGURES:
        assert (ROOT / "benchmarks" / f.script).is_file(), f.script


def test_summaries_never_give_a_median_of_fewer_than_three() -> None:
    assert provenance.summarize([2.0, 1.0]) == {"n": 2, "samples": [2.0, 1.0]}
    s = provenance.summarize([3.0, 1.0, 2.0, 10.0])
    assert (s["median"], s["min"], s["max"], s["n"]) == (2.5, 1.0, 10.0, 4)
    r = provenance.ratio([2.0, 4.0, 9.0], [1.0, 2.0, 3.0])
    assert r["samples"] == [2.0, 2.0, 3.0] and r["median"] == 2.0
    with pytest.raises(ValueError, match="not paired"):
        provenance.ratio([1.0], [1.0, 2.0])


def _git_repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    (repo / "docs/figures/data").mkdir(parents=True)
    (repo / "code.py").write_text("x = 1\n")
    for cmd in (
        ["init", "-q"],
        ["add", "."],
        ["-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "c"],
    ):
        subprocess.run(["git", *cmd], cwd=repo, check=True)
    return repo


def _args(out: Path, **kw: bool) -> argparse.Namespace:
    return argparse.Namespace(
        out=out, allow_dirty=kw.get("dirty", False), quick=kw.get("quick", False)
    )


def test_the_writer_refuses_uncommitted_code_unless_allowed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = _git_repo(tmp_path)
    monkeypatch.setattr(provenance, "REPO", repo)
    out = repo / "docs/figures/data/x.json"
    # the pipeline's own outputs do not make the checkout dirty
    out.write_text("{}")
    monkeypatch.setattr(sys, "argv", [str(repo / "bench.py"), "--repeats", "3"])
    rec = provenance.Recorder(_args(out))
    # a library that rewrites sys.argv mid-run (TextWorld's PDDL translator does)
    monkeypatch.setattr(sys, "argv", ["translate.py", "domain", "task"])
    rec.write({"speed": provenance.summarize([1.0, 2.0, 3.0])}, repeats=3, split="validation")
    data = json.loads(out.read_text())
    assert data["worktree"] == "clean" and data["repeats"] == 3 and data["quick"] is False
    assert data["command"] == "python bench.py --repeats 3"
    assert (
        data["commit"]
        == subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True
        ).stdout.strip()
    )
    assert list(data)[: len(provenance.HEADER)] == list(provenance.HEADER)
    (repo / "code.py").write_text("x = 2\n")
    with pytest.raises(SystemExit, match=r"code\.py.*--allow-dirty"):
        provenance.Recorder(_args(out))
    provenance.Recorder(_args(out, dirty=True)).write({}, repeats=1, split="none")
    assert json.loads(out.read_text())["worktree"] == {"dirty": ["code.py"]}
    provenance.Recorder(_args(out, quick=True)).write({}, repeats=1, split="none")
    assert json.loads(out.read_text())["quick"] is True
    with pytest.raises(ValueError, match="header"):
        rec.write({"commit": "x"}, repeats=1, split="none")


def test_a_page_cannot_cite_a_quick_file_and_shows_no_median_of_two(tmp_path: Path) -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("docs_site_hooks", ROOT / "docs/hooks/site.py")
    hooks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hooks)
    (tmp_path / "q.json").write_text(json.dumps({"quick": True, "x": 1}))
    with pytest.raises(ValueError, match="--quick"):
        hooks.render_markers("<!-- value q.json x -->", tmp_path)
    two = {"x": provenance.summarize([1.5, 2.25]), "y": provenance.summarize([1.0, 3.0, 2.0])}
    (tmp_path / "s.json").write_text(json.dumps({"quick": False, **two}))
    md = hooks.render_markers(
        "a <!-- value s.json x unit=s --> b <!-- value s.json y -->", tmp_path
    )
    assert md == "a 1.50 s, 2.25 s (2 samples, no median) b 2.00 (1.00-3.00, 3 repeats)"


# Numbers that look like figures but are not measurements (a requirement, a setting, a
# version, a price, a budget), page by page: anything else figure-like on these pages must
# come through a marker (`<!-- value ... -->`, a table or a chart).
NOT_MEASURED = {
    "README.md": {
        "3 GiB",  # the disk a laptop needs (a requirement)
        "0.30",  # the grader's share of one GPU (a setting)
        "3.11",  # Python
        "3.12",
    },
    "docs/figures.md": set(),
    "docs/results.md": {"95%"},  # the confidence level of every interval (a setting)
}
FIGURE_LIKE = re.compile(
    r"(?<![\w.$/#~@-])\d[\d,]*(?:\.\d+)?(?:\s?(?:x|%|s|ms|min|GiB|MiB|GB|MB|items/s|steps/s))?"
    r"(?![\w.-]*\w)"
)


def _prose(text: str) -> str:
    """The page without what is not prose: the README's generated demo block (its own test
    checks it against its data file), code, markers and other comments, link targets."""
    text = re.sub(re.escape(readme.BEGIN) + ".*?" + re.escape(readme.END), " ", text, flags=re.S)
    text = re.sub(r"```.*?```", " ", text, flags=re.S)
    text = re.sub(r"`[^`\n]*`", " ", text)
    text = re.sub(r"<!--.*?-->", " ", text, flags=re.S)
    return re.sub(r"\]\([^)]*\)", "]", text)


def _figure_like(token: str) -> bool:
    """A decimal, or a number with a unit (a time, a ratio, a share, a size)."""
    return "." in token or not token.replace(",", "").isdigit()


@pytest.mark.parametrize("page", sorted(NOT_MEASURED))
def test_pages_quote_figures_only_through_markers(page: str) -> None:
    found = {m.group(0) for m in FIGURE_LIKE.finditer(_prose((ROOT / page).read_text()))}
    typed = sorted({t for t in found if _figure_like(t)} - NOT_MEASURED[page])
    assert not typed, f"{page}: figures typed by hand (quote them with a marker): {typed}"
    assert NOT_MEASURED[page] <= found, "an allowlisted number the page no longer has"


def test_the_readme_demo_block_is_the_median_demo_run() -> None:
    assert readme.demo_block_drift() is None
