"""The instruction styles of ``agent2rl run --instructions`` and the agent's ``summary.md``.

- ``neutral`` (the default, and the one the operating-modes study uses): the task and the
  rules, with no framing of how to train and no report asked of the agent.
- ``reference``: the paper's reference implementation's framing (RD-Agent ``autorl_bench``):
  the agent is an RL post-training engineer, and it must keep ``summary.md`` in the
  workspace root, one entry per attempt appended after every training attempt and
  submission (status, score, improvement and best as the grading service returned them,
  training type, key hyper-parameters, what it did and why, problems, the next step). The
  wording is agent2rl's; the requirements are the reference's.

When a run's workspace holds ``summary.md`` (whatever the style: an agent may write one
unasked), the report shows it as *the agent's own account* (:func:`read_agent_summary`,
:func:`summary_markdown`, :func:`summary_html`): text the agent wrote about itself, never
checked against the run's record. The file is the agent's, so it is read with care: a
regular file only (a symlink is not followed: it could point the harness at a private
file), at most :data:`MAX_SUMMARY_BYTES` (the rest cut, the cut said), decoded as UTF-8
with invalid bytes replaced, and shown verbatim as text, never as Markdown or HTML.
"""

from __future__ import annotations

import html
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

#: the choices of ``--instructions``
INSTRUCTION_STYLES = ("neutral", "reference")
#: the agent's account of its run, in the workspace root
SUMMARY_FILE = "summary.md"
#: the most of summary.md a report shows
MAX_SUMMARY_BYTES = 64 * 1024
#: the label the report gives it
SUMMARY_LABEL = "The agent's own account (summary.md)"

_FRAMING = """# Instructions

You are an expert in reinforcement-learning post-training of language models. Your job is to
post-train the base model so that it scores as high as possible on the task `{task}`
described in `description.md`, using RL (for example GRPO or PPO with the task's rewards),
supervised fine-tuning or both, within **{budget}** (until epoch second {deadline}, also in
`$DEADLINE` and `run_meta.json`). Save full models under `output/` and submit them to the
grading service; your result is your best graded submission. Work iteratively: train,
submit, read the score, and improve on your previous attempt.

"""

_SUMMARY = """
## summary.md (required)
You MUST keep a file `summary.md` in the workspace root (next to `instructions.md`). Update
it after every training attempt and after every submission, not only at the end, and append
to it: never overwrite earlier attempts. For each attempt write:

```markdown
## Attempt N (YYYY-MM-DD HH:MM)
- **Status**: success / failure
- **Score**: X.XX | Improvement: +Y.YY | Best: Z.ZZ   (the grading service's reply, verbatim)
- **Training type**: SFT / GRPO / PPO / DPO / ...
- **Hyper-parameters**: lr=..., epochs=..., batch_size=..., ...
- **What I did**: the strategy and the concrete steps of this attempt
- **Why**: why this method and these hyper-parameters
- **Problems / progress**: what went wrong (the root cause of a failure) and what improved
- **Next step**: what to try next, given this result
```

"What I did" and "Why" matter most: be thorough.
"""


def reference_instructions(neutral: str) -> str:
    """The ``reference`` style's template from the ``neutral`` one: the reference's
    framing in place of the neutral opening paragraph, the neutral text's workspace,
    submission and rules sections, then the summary.md requirement. The same format fields
    as ``neutral`` (``budget``, ``deadline``, ``task``, ``url``, ``token``)."""
    body = neutral[neutral.index("## Workspace") :]
    return _FRAMING + body + _SUMMARY.replace("{", "{{").replace("}", "}}")


@dataclass(frozen=True)
class AgentSummary:
    """summary.md as read: its text (at most :data:`MAX_SUMMARY_BYTES` of it), whether it
    was cut, and its full size in bytes."""

    text: str
    truncated: bool
    size: int


def read_agent_summary(workspace: Path) -> AgentSummary | None:
    """``workspace/summary.md`` as the module docstring says; None when there is none, or
    when it is not a regular file (a symlink, a directory, a FIFO) or cannot be read."""
    path = Path(workspace) / SUMMARY_FILE
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:  # absent, a symlink (ELOOP), unreadable
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return None
        data = os.read(fd, MAX_SUMMARY_BYTES + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    cut = len(data) > MAX_SUMMARY_BYTES or info.st_size > MAX_SUMMARY_BYTES
    text = data[:MAX_SUMMARY_BYTES].decode("utf-8", errors="replace")
    return AgentSummary(text, cut, info.st_size)


def _note(s: AgentSummary) -> str:
    shown = f"{MAX_SUMMARY_BYTES // 1024} KiB of {s.size} bytes"
    cut = f" Only its first {shown} are shown." if s.truncated else ""
    return (
        "Written by the agent about its own run; the harness did not check it against the "
        f"run's record (the submissions above are the record).{cut}"
    )


def summary_markdown(s: AgentSummary | None) -> str:
    """The report's Markdown section for ``s`` (empty without one): the label, the note
    and the text in a code fence longer than any backtick run inside it, so nothing in it
    renders as Markdown."""
    if s is None:
        return ""
    longest = max((len(m) for m in re.findall(r"`+", s.text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"\n## {SUMMARY_LABEL}\n\n{_note(s)}\n\n{fence}text\n{s.text}\n{fence}\n"


def summary_html(s: AgentSummary | None) -> str:
    """The report's HTML section for ``s`` (empty without one): the text escaped in a
    ``<pre>``."""
    if s is None:
        return ""
    return (
        f'<h2 id="agent-summary">{html.escape(SUMMARY_LABEL)}</h2>'
        f"<p>{html.escape(_note(s))}</p>"
        f'<pre style="white-space:pre-wrap">{html.escape(s.text)}</pre>'
    )
