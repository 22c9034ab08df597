"""Build the agent's workspace: the only directory an agent sees.

::

    workspace/
      code/            the agent's code (snapshotted into the run's record)
      output/          models to submit (output/v1, output/v2, ...)
      data/            the task's public split (read-only)
      models/base/     the base model (read-only; files link into the model store)
      description.md   the task and its exact evaluation protocol
      instructions.md  how to submit, the token, the budget, the rules
      run_meta.json    start, deadline, budget

Nothing private (test split, ledger, grader logs, other runs) is ever placed inside.
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

from agent2rl.dataset import PreparedTask
from agent2rl.errors import UserError
from agent2rl.files import write_json_atomic, write_text_atomic
from agent2rl.formatting import format_duration
from agent2rl.models.resolve import ModelRef
from agent2rl.rundir import RunInfo, RunPaths
from agent2rl.tasks.base import Task
from agent2rl.workspace.instructions import INSTRUCTION_STYLES, reference_instructions

_RO_FILE = stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH
_RO_DIR = _RO_FILE | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH


def _make_read_only(root: Path) -> None:
    for dirpath, _dirs, files in os.walk(root):
        for f in files:
            p = Path(dirpath) / f
            if not p.is_symlink():
                p.chmod(_RO_FILE)
    for dirpath, _dirs, _files in os.walk(root, topdown=False):
        Path(dirpath).chmod(_RO_DIR)


def build_workspace(paths: RunPaths, task: Task, prepared: PreparedTask, model: ModelRef) -> None:
    """Create the directories, copy the public split (less the task's
    ``workspace_exclude``) and the task's ``workspace_files``, link the base model, write the
    task description. Instructions and run_meta are written later by
    :func:`write_instructions`, once the service URL and the clock are known."""
    ws = paths.workspace
    for d in (paths.code, paths.output, paths.base_model.parent):
        d.mkdir(parents=True, exist_ok=True)
    shutil.copytree(
        prepared.public,
        paths.data,
        dirs_exist_ok=False,
        ignore=lambda d, names: [
            n for n in names if Path(d) == prepared.public and n in task.workspace_exclude
        ],
    )
    fmt = task.prompt_format(prepared)
    if fmt is not None:  # with this run's task options applied (e.g. max_new_tokens)
        write_json_atomic(paths.data / "eval_format.json", fmt.to_dict())
    for name, source in task.workspace_files().items():
        shutil.copyfile(source, paths.data / name)
    _make_read_only(paths.data)
    paths.base_model.mkdir()
    for f in sorted(model.path.iterdir()):
        if f.is_file():
            (paths.base_model / f.name).symlink_to(f.resolve())
    _make_read_only(paths.base_model)
    write_text_atomic(ws / "description.md", task.description(prepared))


def agent_env(paths: RunPaths, info: RunInfo, model: ModelRef, url: str, token: str) -> dict:
    """The environment variables of the workspace contract (plus a minimal base env)."""
    ws = paths.workspace
    return {
        "TASK": info.task,
        "BASE_MODEL": model.name,
        "MODEL_PATH": str(paths.base_model),
        "DATA_PATH": str(paths.data),
        "OUTPUT_DIR": str(paths.output),
        "GRADING_SERVER_URL": url,
        "GRADING_TOKEN": token,
        "DEADLINE": str(int(info.deadline or 0)),
        "WORKSPACE": str(ws),
        "HOME": str(ws / ".home"),
        "TMPDIR": str(ws / ".tmp"),
        "HF_HOME": str(ws / ".cache" / "huggingface"),
        "HF_HUB_OFFLINE": "1",
        "PYTHONUNBUFFERED": "1",
        "TOKENIZERS_PARALLELISM": "false",
        # Busy-waiting OpenMP threads slow CPU training ~5x when anything else runs (an
        # evaluation, another run); the agent may override it.
        "OMP_WAIT_POLICY": "PASSIVE",
        "PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
        "LANG": os.environ.get("LANG", "C.UTF-8"),
    }


def write_instructions(
    paths: RunPaths,
    info: RunInfo,
    url: str,
    token: str,
    rollout: bool = False,
    style: str = "neutral",
) -> None:
    """Write instructions.md and run_meta.json (needs the clock and the service URL).
    ``rollout``: the run has a rollout service (an interactive task); say how to reach it.
    ``style``: ``neutral`` (:data:`INSTRUCTIONS`, the default) or ``reference``
    (:data:`REFERENCE_INSTRUCTIONS`: the paper's reference's framing, RL post-training, and a
    required ``summary.md``); a :class:`UserError` names the choices for another."""
    template = instructions_template(style)
    ws = paths.workspace
    for d in (ws / ".home", ws / ".tmp"):
        d.mkdir(exist_ok=True)
    meta = {k: getattr(info, k) for k in ("run_id", "task", "start", "deadline", "budget_s")}
    write_json_atomic(ws / "run_meta.json", meta)
    write_text_atomic(
        ws / "instructions.md",
        template.format(
            budget=format_duration(info.budget_s),
            url=url,
            token=token,
            task=info.task,
            deadline=int(info.deadline or 0),
        )
        + (ROLLOUT if rollout else "")
        + (VALIDATION_FEEDBACK if info.feedback == "validation" else ""),
    )


def instructions_template(style: str) -> str:
    """The instructions.md template of ``style`` (see :func:`write_instructions`)."""
    if style == "neutral":
        return INSTRUCTIONS
    if style == "reference":
        return REFERENCE_INSTRUCTIONS
    raise UserError(f"--instructions {style}: use {', '.join(INSTRUCTION_STYLES)}")


INSTRUCTIONS = """# Instructions

You have **{budget}** (until epoch second {deadline}, also in `$DEADLINE` and `run_meta.json`)
to improve the base model on the task `{task}` described in `description.md`. Train however you
like (SFT, RL, ...), save full models under `output/`, and submit them to the grading service.
Your result is your best graded submission.

## Workspace
- `code/`: put your code here (it is recorded at every submission).
- `data/`: the training data (read-only). `models/base/`: the base model (read-only).
- `output/`: save each model you want graded in its own directory, e.g. `output/v1`.

Environment variables: `TASK`, `BASE_MODEL`, `MODEL_PATH` (base model dir), `DATA_PATH`,
`OUTPUT_DIR`, `GRADING_SERVER_URL`, `GRADING_TOKEN`, `DEADLINE` (epoch seconds).

## Submitting
Submitting blocks until the model is graded on the held-out test set, and returns its score,
the baseline (the base model's score), the improvement, the best score so far and the time left.

```bash
curl -s -X POST "$GRADING_SERVER_URL/submit" \\
  -H "Authorization: Bearer $GRADING_TOKEN" -H "Content-Type: application/json" \\
  -d '{{"model_path": "output/v1"}}'
curl -s "$GRADING_SERVER_URL/time" -H "Authorization: Bearer $GRADING_TOKEN"
curl -s "$GRADING_SERVER_URL/submissions" -H "Authorization: Bearer $GRADING_TOKEN"
```

```python
import json, os, urllib.request
req = urllib.request.Request(
    os.environ["GRADING_SERVER_URL"] + "/submit",
    data=json.dumps({{"model_path": "output/v1"}}).encode(),
    headers={{"Authorization": "Bearer " + os.environ["GRADING_TOKEN"],
             "Content-Type": "application/json"}})
print(json.load(urllib.request.urlopen(req, timeout=3600)))
```

Service: {url} — token: `{token}`

## Rules
- Submit full, merged models in Hugging Face format: `config.json` plus `*.safetensors` weights
  and the tokenizer files (`save_pretrained(dir, safe_serialization=True)`). Pickle weights
  (`.bin`, `.pt`) and custom model code (`auto_map`) are refused; LoRA adapters must be merged.
- Submissions must be directories inside `output/`.
- Train only from the given data and base model. The test set is not available to you.
- Submitting the same weights twice returns the earlier result; submitting the unchanged base
  model is recorded as a copy.
- At the deadline every process you started is stopped. A submission already being graded at
  the deadline still counts.
"""

ROLLOUT = """
## The environment (online RL)
This task is interactive. A rollout service plays the public training games for you at
`$ENV_SERVER_URL` with the token `$ENV_TOKEN`; `data/env_client.py` is a client for it and
`description.md` documents its API and the exact protocol the grader uses to play your
model (`data/protocol.py` is the grader's own code for it). Every episode and step you play
is recorded in the run's report.
"""

#: ``agent2rl run --feedback validation`` (agent2rl.grading.final): what the scores mean and
#: how the run's result is chosen; overrides "your result is your best graded submission"
VALIDATION_FEEDBACK = """
## Grading protocol of this run: validation feedback
This run overrides what is said above about the held-out test set and your best submission:
- `/submit` grades your model on a **validation set** (held out, not the test set) and answers
  only that score; the baseline, improvement, intervals and best score it returns are all on
  the validation set (`"split": "validation"` in every answer).
- Your result is **one** submission, graded on the held-out test set by the harness after the
  run ends: the one you mark final, or, if you mark none, your best on validation (the latest
  one on a tie). `final_submission_id` in every answer says which one that is now.
- Mark a graded submission final when you submit it (`"final": true`), or later:

```bash
curl -s -X POST "$GRADING_SERVER_URL/submit" \\
  -H "Authorization: Bearer $GRADING_TOKEN" -H "Content-Type: application/json" \\
  -d '{"model_path": "output/v3", "final": true}'
curl -s -X POST "$GRADING_SERVER_URL/final" \\
  -H "Authorization: Bearer $GRADING_TOKEN" -H "Content-Type: application/json" \\
  -d '{"submission_id": 3}'
```

  The latest mark counts. Only the weights of the submission marked final and of your best on
  validation are kept: to mark an older one, submit its directory again with `"final": true`.
"""


#: ``--instructions reference``: the neutral text's practical sections under the reference's
#: framing, with its summary.md requirement (see agent2rl.workspace.instructions)
REFERENCE_INSTRUCTIONS = reference_instructions(INSTRUCTIONS)
