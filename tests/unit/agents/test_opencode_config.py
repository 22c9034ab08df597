"""OpenCode's config sends every request to the run's driver: its session-title request goes
to ``small_model``, which defaults to a small model of the driver's provider (claude-haiku
for Anthropic) that the metering proxy refuses (it relays only the run's driver), so each
session began with a refused request (found by the end-to-end test)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent2rl.agents import build_launch, driver_for, get_agent


@pytest.mark.parametrize(
    ("driver", "expected"),
    [
        ("claude-sonnet-4-5", "anthropic/claude-sonnet-4-5"),
        ("gpt-4.1", "openai/gpt-4.1"),
    ],
)
def test_opencode_title_model_is_the_driver(tmp_path: Path, driver: str, expected: str) -> None:
    spec = get_agent("opencode")
    launch = build_launch(
        spec,
        workspace=tmp_path,
        prompt="p",
        prompt_file=tmp_path / "prompt.md",
        driver=driver_for(spec, driver),
        proxy_url="http://127.0.0.1:43210",
        proxy_key="a2r-proxy-key",
    )
    config = json.loads(launch.files[tmp_path / ".agent2rl" / "opencode.json"])
    assert config["small_model"] == expected
    assert "--model" in launch.argv and launch.argv[launch.argv.index("--model") + 1] == expected
