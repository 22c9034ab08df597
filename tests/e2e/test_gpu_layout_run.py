"""``agent2rl run --grader-gpus/--agent-gpus``: the layout reaches the agent's environment and
its instructions, and the grader's evaluations (a real run through the CLI, on the CPU)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.cli import only_run, run_cli

AGENT = """import json, os
from pathlib import Path
ws = Path(os.environ["WORKSPACE"])
text = (ws / "instructions.md").read_text()
(ws / "code" / "gpu.json").write_text(json.dumps({
    "visible": os.environ.get("CUDA_VISIBLE_DEVICES"),
    "order": os.environ.get("CUDA_DEVICE_ORDER"),
    "section": text[text.find("## GPUs"):] if "## GPUs" in text else None,
}))
"""


@pytest.mark.slow  # a whole run (baseline, agent, report): about 45 s here
def test_gpu_flags_reach_the_agent_env_and_instructions(tmp_path: Path) -> None:
    (tmp_path / "gpu_probe.py").write_text(AGENT)
    spec = tmp_path / "gpu-probe.toml"
    spec.write_text(f'''name = "gpu-probe"
description = "Test agent that records its GPU layout"
command = ["{{python}}", "code/gpu_probe.py"]
files = ["{tmp_path / "gpu_probe.py"}"]
''')
    runs = tmp_path / "runs"
    r = run_cli(
        ["run", "--task", "arith-lite", "--agent", str(spec), "--budget", "60s",
         "--runs-dir", str(runs), "--sandbox", "none", "--grader-gpus", "none",
         "--agent-gpus", "none"],
        timeout=300,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    assert "GPUs: none" in r.stdout
    probe = json.loads((only_run(runs).code / "gpu.json").read_text())
    assert probe["visible"] == "" and probe["order"] == "PCI_BUS_ID"
    assert probe["section"].startswith("## GPUs") and "no GPU" in probe["section"]


def test_a_gpu_named_that_is_not_here_is_one_clear_error(tmp_path: Path) -> None:
    r = run_cli(
        ["run", "--task", "arith-lite", "--agent", "reference-sft", "--budget", "60s",
         "--runs-dir", str(tmp_path / "runs"), "--grader-gpus", "99"],
        timeout=120,
    )  # fmt: skip
    assert r.returncode == 2 and r.stderr.startswith("error:"), r.stdout + r.stderr
    assert "--grader-gpus 99" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "runs").exists()
