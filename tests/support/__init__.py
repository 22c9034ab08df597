"""What tests share: CLI helpers, real run directories, process probes, the fake LLM provider,
test agents and fixture files in the real schemas."""

from pathlib import Path

SUPPORT = Path(__file__).resolve().parent
FIXTURES = SUPPORT / "fixtures"
#: scripted test agents (spec .toml + script)
AGENTS = SUPPORT / "agents"
#: the repository root
REPO = SUPPORT.parents[1]
