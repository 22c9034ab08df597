"""The unit-test scorer: a completion passes when the dataset's tests pass against the function
it defines, judged as OpenAI's human-eval harness judges HumanEval, but with the model's code
and the tests in two sandboxed processes (:mod:`agent2rl.sandbox.two_process`), so that the
code cannot forge the verdict.

Each completion becomes one :class:`~agent2rl.sandbox.two_process.FunctionUnderTest`
(:func:`build_item`). :func:`build_program` is the classic one-process program, kept for
comparison (``benchmarks/humaneval_grading.py``) and for tests that show what it lets through.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from agent2rl.dataset import Sample
from agent2rl.sandbox.programs import ExecLimits, ExecResult, isolation
from agent2rl.sandbox.two_process import FunctionUnderTest, check_functions
from agent2rl.scoring.base import ItemResult
from agent2rl.solvers.base import Output

_FENCE = re.compile(r"```[ \t]*([\w+-]*)[ \t]*\n(.*?)(?:\n[ \t]*```|\Z)", re.S)


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
    with_def = (b for b in blocks if re.search(r"^\s*def \w+\s*\(", b, re.M))
    return next(with_def, blocks[0])


def defines(code: str, name: str) -> bool:
    """True if ``code`` has a ``def name(`` at any indentation."""
    return re.search(rf"^\s*(?:async\s+)?def {re.escape(name)}\s*\(", code, re.M) is not None


def build_item(problem: dict[str, str], completion: str, chat: bool) -> FunctionUnderTest:
    """What decides whether ``completion`` solves ``problem`` (``prompt``, ``entry_point``,
    ``test``): the model's program and the dataset's tests, for two processes.

    The program, base model (``chat`` False): ``prompt + completion``, exactly as in the
    ``human-eval`` harness. Chat model: the code is extracted with :func:`extract_code`; if it
    defines the entry point, it follows the prompt in full (the prompt only supplies its imports
    and helper functions, and the reply's definition replaces the prompt's stub); otherwise it
    is taken as the function's body, like a base completion. The tests' side is the dataset's
    alone: the prompt (whose helpers, e.g. HumanEval/32's ``poly``, the tests call: the model's
    redefinition of one does not reach them), then ``problem["test"]`` and
    ``check(candidate)``.
    """
    prompt, entry = problem["prompt"], problem["entry_point"]
    if chat:
        code = extract_code(completion)
        body = f"{prompt}\n{code}" if defines(code, entry) else prompt + code
    else:
        body = prompt + completion
    return FunctionUnderTest(code=body, entry_point=entry, test=problem["test"], setup=prompt)


def build_program(problem: dict[str, str], completion: str, chat: bool) -> str:
    """The classic one-process program for ``completion``: :func:`build_item`'s program, then
    ``problem["test"]`` and ``check(<entry_point>)``, as the ``human-eval`` harness runs it.

    Not how items are graded: in one process the program can forge its pass (see
    :mod:`agent2rl.sandbox.two_process`). Kept to measure and demonstrate exactly that.
    """
    item = build_item(problem, completion, chat)
    return f"{item.code}\n\n{item.test}\n\ncheck({item.entry_point})\n"


def outcome(result: ExecResult) -> str:
    """``passed``, or the status and reason of a failure (``failed: AssertionError: ...``)."""
    if result.passed or not result.reason:
        return result.status
    return f"{result.status}: {result.reason}"


@dataclass(frozen=True)
class UnitTests:
    """Pass@1 over HumanEval-shaped samples: ``input`` holds ``prompt`` and ``entry_point``,
    the target is the ``test`` code defining ``check(candidate)``. Each item runs in two
    sandboxed processes (:func:`build_item`). The item's target in the report is its outcome
    (``passed``, ``failed: ...``, ``timed out: ...``, ``error: ...``)."""

    limits: ExecLimits = field(default_factory=ExecLimits)
    #: paths both processes' sandboxes mask: the task's private data shipped by an installed
    #: package (a program reading HumanEval's own file would find every test)
    hide: tuple[Path, ...] = ()

    def score(self, samples: list[Sample], outputs: list[Output]) -> list[ItemResult]:
        items = [
            build_item({**s.input, "test": s.target}, o.text, bool(o.trace.get("chat")))
            for s, o in zip(samples, outputs, strict=True)
        ]
        results = check_functions(items, self.limits, hide=self.hide)
        return [
            ItemResult(s.id, o.text, outcome(r), r.passed, 1.0 if r.passed else 0.0)
            for s, o, r in zip(samples, outputs, results, strict=True)
        ]

    def settings(self) -> dict[str, Any]:
        # "runner" is in the eval hash: scores from the one-process runner, whose verdicts the
        # program could forge, must not be compared with these.
        return {"scorer": "unit_tests", "runner": "two-process", "limits": asdict(self.limits)}

    def details(self, items: list[ItemResult], outputs: list[Output]) -> dict[str, Any]:
        statuses = Counter(i.target.split(":", 1)[0] for i in items)
        chat = bool(outputs and outputs[0].trace.get("chat"))
        return {"isolation": isolation(), "chat": chat, "statuses": dict(statuses)}
