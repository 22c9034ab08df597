"""What ``--instructions reference`` gives Claude Code, Codex and Gemini CLI: the paper's
reference's own launch (RD-Agent ``autorl_bench/agents/{claude,codex,gemini}/start.sh`` and
``AGENTS.md`` at 471eb30d).

For those agents (:data:`REFERENCE_AGENTS`) the reference's start scripts:

- copy ``AGENTS.md`` into the workspace: the summary.md rules (:data:`AGENTS_MD`, the
  reference's file verbatim; its field names are in Chinese, as there);
- write ``timer.sh`` (prints the time left on the agent's clock);
- prompt with one text (:data:`PROMPT`): the task, base model, paths and grading URL, the
  task's ``description.md`` and ``instructions.md``, the workspace listing, a data sample,
  the mission steps and "You have 36000 seconds total";
- run the CLI under ``timeout 36000`` (:data:`REFERENCE_TIMEOUT_S`: 10 h, inside the 12 h
  run); Claude Code with ``BASH_MAX_TIMEOUT_MS=36000000`` (its Bash tool's longest command);
  Codex with ``--search`` (in agent2rl: the ``codex-paper`` spec, whose web search the
  metering proxy allows and records).

Differences, each for a reason: the submit command carries the run's bearer token (the
grading service refuses requests without it); the listing is agent2rl's (sizes, harness
folders left out) rather than ``ls -la``; the data sample is the first 5 lines of
``data/train.jsonl`` (the reference: ``head -5 data/*.jsonl``, every file); the agent's
clock also ends at the run's deadline when that comes first (a budget under 10 h).
"""

from __future__ import annotations

import os
from pathlib import Path

from agent2rl.agents.prompt import data_sample, workspace_listing

#: the agents the reference launches with this setup (agent2rl's spec names)
REFERENCE_AGENTS = ("claude-code", "codex", "codex-paper", "gemini-cli")
#: ``CLAUDE_TIMEOUT`` / ``CODEX_TIMEOUT`` / ``GEMINI_TIMEOUT`` (start.sh defaults)
REFERENCE_TIMEOUT_S = 36000
#: environment the reference sets per agent (claude/start.sh: ``export BASH_MAX_TIMEOUT_MS``)
REFERENCE_ENV: dict[str, dict[str, str]] = {
    "claude-code": {"BASH_MAX_TIMEOUT_MS": "36000000"},
}

#: ``agents/claude/AGENTS.md`` (identical for codex and gemini), verbatim
AGENTS_MD = """# AutoRL-Bench Agent Guidelines

## Summary Maintenance (MANDATORY)

You MUST maintain a file called `summary.md` in the workspace root. Update it **after every training attempt and every submission**, not just at the end.

### Format

```markdown
# 运行总结

## Attempt N (YYYY-MM-DD HH:MM)
- **状态**: ✅ 成功 / ❌ 失败
- **Score**: X.XX | Improvement: +Y.YY | Best: Z.ZZ
- **训练类型**: SFT / GRPO / PPO / DPO / ...
- **超参数**: lr=X, epochs=Y, batch_size=Z, ...
- **做了什么**: 简述本次尝试的策略和具体操作
- **为什么**: 为什么选择这个方法/这些超参数
- **问题/进步**: 遇到了什么问题，相比上次有什么改进
- **关键代码**: 关键改动的代码片段（如有）
- **下一步建议**: 基于本次结果，下一步打算怎么做
```

### Rules
1. **Append only** — never overwrite previous attempts
2. Analyze `code/train.py` source to extract training type and hyperparameters
3. If training fails, extract root cause from error output
4. "做了什么" and "为什么" are the most important fields — be thorough
5. Update summary.md IMMEDIATELY after each submission result comes back
6. Include the grading server response (score, improvement, best) verbatim
"""  # noqa: E501 (the reference's text)

#: the start scripts' ``PROMPT`` (as bash expands it), with ``str.format`` fields for the
#: values bash substitutes; the submit line carries the bearer token (module docstring)
PROMPT = """You are an AI researcher doing RL post-training. Complete the entire task autonomously.

## Task: {task}
## Base Model: {base_model}
## Model Path: {model_path}
## Output Dir: {output_dir}
## Grading Server: {grading_url}

## Task Description
{description}

## Instructions
{instructions}

## Workspace Contents
```
{listing}
```

## Data Sample (first 5 lines)
```
{data_sample}
```

## Your Mission
1. Read all files in the workspace to understand the task
2. Implement your training approach (method, code structure, filenames are all up to you)
3. Run training and save the trained model to {output_dir}/ (e.g. output/v1)
4. IMPORTANT: If you use LoRA/PEFT, you MUST merge before saving:
   model = model.merge_and_unload()
   model.save_pretrained(output_path)
   tokenizer.save_pretrained(output_path)
5. Fix tokenizer_config.json if needed (remove extra_special_tokens list format)
6. Submit for evaluation:
   curl -X POST {grading_url}/submit -H 'Authorization: Bearer {token}' -H 'Content-Type: application/json' -d '{{\\"model_path\\": \\"{output_dir}/v1\\"}}'
7. Based on the score, iterate: improve your approach and submit again as v2, v3, etc.
8. Keep iterating until you achieve the best possible score or run out of time.

## Time Budget
You have {timeout} seconds total. Run `bash timer.sh` at any time to check remaining time.

IMPORTANT: Work efficiently. Start with a simple approach, get a baseline score, then iterate."""  # noqa: E501

_TIMER = """#!/bin/bash
DEADLINE={deadline}
NOW=$(date +%s)
REMAINING=$((DEADLINE - NOW))
if [ $REMAINING -le 0 ]; then
    echo "Timer expired!"
else
    HOURS=$((REMAINING / 3600))
    MINUTES=$(((REMAINING % 3600) / 60))
    printf "Remaining: %d:%02d\\n" $HOURS $MINUTES
fi
"""


def applies(agent: str) -> bool:
    """Whether the reference launches ``agent`` (a spec name) this way."""
    return agent in REFERENCE_AGENTS


def agent_timeout_s(budget_s: float) -> int:
    """The agent's clock: the reference's 36,000 s, or the run's budget when shorter."""
    return int(min(REFERENCE_TIMEOUT_S, budget_s))


def prepare(agent: str, workspace: Path, env: dict[str, str], budget_s: float) -> str:
    """Set up ``workspace`` for ``agent`` as the reference's start script does and return
    its prompt: ``AGENTS.md`` and ``timer.sh`` written, ``env`` (the agent's environment,
    with the workspace contract's ``TASK``, ``BASE_MODEL``, ``MODEL_PATH``, ``OUTPUT_DIR``,
    ``GRADING_SERVER_URL``, ``GRADING_TOKEN``, ``DEADLINE``) given :data:`REFERENCE_ENV`.
    The task files are read from the workspace (``description.md``, ``instructions.md``)."""
    ws = Path(workspace)
    timeout = agent_timeout_s(budget_s)
    (ws / "AGENTS.md").write_text(AGENTS_MD, encoding="utf-8")
    deadline = int(env.get("DEADLINE") or 0)  # the agent's clock starts with the run
    timer = ws / "timer.sh"
    timer.write_text(_TIMER.format(deadline=deadline - int(budget_s) + timeout if deadline else 0))
    os.chmod(timer, 0o755)
    env.update(REFERENCE_ENV.get(agent, {}))

    def read(name: str) -> str:
        try:
            return (ws / name).read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""

    return PROMPT.format(
        task=env.get("TASK", ""),
        base_model=env.get("BASE_MODEL", ""),
        model_path=env.get("MODEL_PATH", ""),
        output_dir=env.get("OUTPUT_DIR", ""),
        grading_url=env.get("GRADING_SERVER_URL", ""),
        token=env.get("GRADING_TOKEN", ""),
        description=read("description.md"),
        instructions=read("instructions.md"),
        listing=workspace_listing(ws),
        data_sample=data_sample(ws, lines=5),
        timeout=timeout,
    )


def with_timeout(argv: list[str], budget_s: float) -> list[str]:
    """``argv`` under the reference's ``timeout`` (coreutils: SIGTERM at the agent's
    clock's end), as its start scripts run the CLI."""
    return ["timeout", str(agent_timeout_s(budget_s)), *argv]
