"""Run a coding-agent CLI as a fixed-stage pipeline: the same CLI started N times in turn.

The paper's reference implementation runs OpenHands for 30 iterations and OpenCode for 5,
each a fresh session that continues the previous ones' work in the same workspace (its
instructions ask the agent to keep ``summary.md``). This script is that loop, as the
``openhands-paper`` and ``opencode-paper`` agent specs run it::

    python stages.py --stages 30 --prompt-file prompt.md -- openhands --file @STAGE_PROMPT_FILE@

Each stage gets the run's prompt with a line saying which stage it is and to read and keep
``summary.md``; ``@STAGE_PROMPT_FILE@`` in the command becomes a file holding that text and
``@STAGE_PROMPT@`` the text itself. Stages run one after another whatever the previous one
exited with (a stage that crashes is the agent's failure, not the pipeline's), except that a
command that cannot be started (not installed: exit 127) ends the pipeline at once. The
harness's deadline kills the whole process group, so a pipeline that runs out of time ends
mid-stage, as a stock CLI does. Standard library only: it runs under the harness's Python
inside the sandbox. Its own messages go to stderr; stdout is the CLI's, for the log parser.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

STAGE_NOTE = """

---
Stage {i} of {n} of a fixed-stage pipeline: each stage is a new session in the same
workspace. Read summary.md first if it exists (what earlier stages did, their scores, what
to try next), continue from there, and before you stop update summary.md for the next stage.
"""


def stage_prompt(prompt: str, i: int, n: int) -> str:
    """The prompt stage ``i`` (1-based) of ``n`` gets."""
    return prompt.rstrip("\n") + STAGE_NOTE.format(i=i, n=n)


def main(argv: list[str] | None = None) -> int:
    """Run the stages; returns 0 after the last, 127 when the command cannot be started."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--stages", type=int, required=True, help="how many sessions (>= 1)")
    ap.add_argument("--prompt-file", type=Path, required=True)
    ap.add_argument("command", nargs=argparse.REMAINDER, help="-- then the CLI's argv")
    args = ap.parse_args(argv)
    cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
    if args.stages < 1 or not cmd:
        ap.error("needs --stages >= 1 and a command after --")
    prompt = args.prompt_file.read_text(encoding="utf-8")
    stage_file = args.prompt_file.with_name(".stage-prompt.md")
    for i in range(1, args.stages + 1):
        text = stage_prompt(prompt, i, args.stages)
        stage_file.write_text(text, encoding="utf-8")
        argv_i = [a.replace("@STAGE_PROMPT_FILE@", str(stage_file)) for a in cmd]
        argv_i = [a.replace("@STAGE_PROMPT@", text) for a in argv_i]
        print(f"[stages] stage {i}/{args.stages}: {cmd[0]}", file=sys.stderr, flush=True)
        try:
            rc = subprocess.call(argv_i)
        except FileNotFoundError:
            print(f"[stages] {cmd[0]}: not found", file=sys.stderr, flush=True)
            return 127
        print(f"[stages] stage {i} exited {rc}", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
