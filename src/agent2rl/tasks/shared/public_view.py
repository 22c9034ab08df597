"""``--task-opt public=reference`` for the L1 tasks whose validation split the paper's
reference shows to the agent (``gsm8k``: the last 200 of GSM8K's 7,473 train items;
``humaneval``: problems 74-81 of the reference's public 0-81).

By default (``public=heldout``) those items are the harness's validation split and are
held back from the agent, so the agent trains on a little less than the reference's agent
does (GSM8K: 7,273 of 7,473 train items, 97%; HumanEval: 74 of 82 problems with tests and
solutions, 90%). With ``public=reference`` the agent's ``data/`` holds the reference's whole
public set: the public file followed by the validation file, in that order (the original
file order for both tasks). The validation split then overlaps what the agent saw: it is
still never graded (defaults are still not tuned on graded items), but a validation figure
of a run's model is no longer a held-out one.
"""

from __future__ import annotations

import shutil
from dataclasses import replace

from agent2rl.dataset import PreparedTask
from agent2rl.tasks.shared.store import building

#: the choices of the ``public`` option (checked when a task's options are parsed)
PUBLIC_VIEWS = ("heldout", "reference")
#: the folder of the reference's public view, beside ``public/`` in the task's store
REFERENCE_DIR = "public-reference"


def reference_view(prepared: PreparedTask, public_file: str, validation_file: str) -> PreparedTask:
    """``prepared`` with its public split replaced by the reference's view: a copy of the
    public folder whose ``public_file`` is followed by the validation split's
    ``validation_file`` (built once, beside ``public/``, swapped in whole)."""
    assert prepared.validation is not None
    dest = prepared.public.parent / REFERENCE_DIR
    if not (dest / public_file).exists():
        with building(dest) as tmp:
            shutil.copytree(prepared.public, tmp, dirs_exist_ok=True)
            with open(tmp / public_file, "rb+") as out:
                out.seek(0, 2)
                if out.tell():  # a public file without its final newline still ends a line
                    out.seek(-1, 2)
                    if out.read(1) != b"\n":
                        out.write(b"\n")
                out.write((prepared.validation / validation_file).read_bytes())
    return replace(prepared, public=dest)
