"""``--instructions reference`` for Claude Code, Codex and Gemini CLI (issue #39 item 5):
the reference's AGENTS.md, prompt, timer, 36,000 s timeout and Claude's
BASH_MAX_TIMEOUT_MS, pinned on the reference's own strings (RD-Agent
``autorl_bench/agents/claude/start.sh`` and ``AGENTS.md`` at 471eb30d)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from agent2rl.agents import reference_setup as rs

#: lines of the reference's AGENTS.md and of its start.sh prompt, as written there
AGENTS_LINES = [
    "# AutoRL-Bench Agent Guidelines",
    "You MUST maintain a file called `summary.md` in the workspace root. Update it **after "
    "every training attempt and every submission**, not just at the end.",
    "- **做了什么**: 简述本次尝试的策略和具体操作",
    "1. **Append only** — never overwrite previous attempts",
    "6. Include the grading server response (score, improvement, best) verbatim",
]
PROMPT_LINES = [
    "You are an AI researcher doing RL post-training. Complete the entire task autonomously.",
    "## Task: gsm8k",
    "## Base Model: Qwen/Qwen3-8B-Base",
    "## Data Sample (first 5 lines)",
    "5. Fix tokenizer_config.json if needed (remove extra_special_tokens list format)",
    "You have 36000 seconds total. Run `bash timer.sh` at any time to check remaining time.",
    "IMPORTANT: Work efficiently. Start with a simple approach, get a baseline score, then "
    "iterate.",
]


def _workspace(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    ws = tmp_path / "ws"
    (ws / "data").mkdir(parents=True)
    (ws / "data" / "train.jsonl").write_text("".join(f'{{"i": {i}}}\n' for i in range(8)))
    (ws / "description.md").write_text("DESCRIPTION TEXT")
    (ws / "instructions.md").write_text("INSTRUCTIONS TEXT")
    env = {
        "TASK": "gsm8k",
        "BASE_MODEL": "Qwen/Qwen3-8B-Base",
        "MODEL_PATH": "/ws/models/base",
        "OUTPUT_DIR": "/ws/output",
        "GRADING_SERVER_URL": "http://127.0.0.1:9",
        "GRADING_TOKEN": "tok",
        "DEADLINE": "1000000",
    }
    return ws, env


def test_claude_gets_the_references_prompt_agents_md_env_and_timeout(tmp_path: Path) -> None:
    ws, env = _workspace(tmp_path)
    prompt = rs.prepare("claude-code", ws, env, budget_s=12 * 3600)
    agents_md = (ws / "AGENTS.md").read_text()
    assert all(line in agents_md.splitlines() for line in AGENTS_LINES)
    assert all(line in prompt.splitlines() for line in PROMPT_LINES)
    assert "DESCRIPTION TEXT" in prompt and "INSTRUCTIONS TEXT" in prompt
    assert '{"i": 4}' in prompt and '{"i": 5}' not in prompt  # five lines of data
    # the submit line: the reference's, with the run's bearer token
    assert (
        "   curl -X POST http://127.0.0.1:9/submit -H 'Authorization: Bearer tok' -H "
        "'Content-Type: application/json' -d '{\\\"model_path\\\": \\\"/ws/output/v1\\\"}'"
    ) in prompt.splitlines()
    assert env["BASH_MAX_TIMEOUT_MS"] == "36000000"
    assert rs.with_timeout(["claude", "-p", "x"], 12 * 3600) == [
        "timeout", "36000", "claude", "-p", "x",
    ]  # fmt: skip
    # timer.sh counts down to start + 36,000 s (start = deadline - budget)
    out = subprocess.run(["bash", str(ws / "timer.sh")], capture_output=True, text=True)
    assert out.stdout.strip() == "Timer expired!"  # that moment is long past
    assert f"DEADLINE={1_000_000 - 12 * 3600 + 36000}" in (ws / "timer.sh").read_text()


def test_codex_and_gemini_get_it_without_claudes_env_and_other_agents_not(
    tmp_path: Path,
) -> None:
    for agent in ("codex", "codex-paper", "gemini-cli"):
        ws, env = _workspace(tmp_path / agent)
        prompt = rs.prepare(agent, ws, env, budget_s=3600)
        assert "BASH_MAX_TIMEOUT_MS" not in env and (ws / "AGENTS.md").exists()
        assert "You have 3600 seconds total." in prompt  # a shorter budget is the clock
    assert not rs.applies("openhands-paper") and not rs.applies("reference-sft")
    assert rs.applies("claude-code")
