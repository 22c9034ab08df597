"""Decoding settings per model: greedy (agent2rl's default) or the reference's table.

The paper's reference implementation picks generation settings per model family by name
prefix and decodes every other model greedily. :data:`REFERENCE_TABLE` holds only the rows
whose values that implementation states (docs/paper-fidelity.md); a value it does not state
is None here and says so (:attr:`Decoding.unknown`), never a guess. So far one row:

==========  ===========  =====  =====  ========  ==========================================
prefix      temperature  top-p  top-k  thinking  output limit
==========  ===========  =====  =====  ========  ==========================================
Qwen3-8B    0.6          0.95   20     on        "long": the exact number is not known here
==========  ===========  =====  =====  ========  ==========================================

Protocols (:func:`decoding_for`): ``greedy`` decodes every model greedily (the default, and
always the lite tasks' default); ``reference`` looks the model up in the table, the default of
``--protocol reference`` on the full tasks (:func:`default_protocol`). Sampled grading is
seeded (:data:`DEFAULT_SEED` unless the run names one) and takes :attr:`Decoding.samples`
samples per item (1, as the reference does); both are in :meth:`Decoding.to_dict`, which goes
into the evaluation settings, so the report and the evaluation hash say how each item was
decoded and how many samples it got.

Edge cases: a model name is matched on its last path part (``Qwen/Qwen3-8B-Base`` and
``/models/Qwen3-8B`` both match ``Qwen3-8B``), case-insensitively, the longest prefix first;
a local directory whose name matches no row is decoded greedily, like any unlisted model.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

from agent2rl.errors import UserError

#: the seed of sampled grading when the run names none
DEFAULT_SEED = 0
PROTOCOLS = ("greedy", "reference")


@dataclass(frozen=True)
class Decoding:
    """One model's generation settings. ``temperature`` 0 is greedy (top-p/top-k unused).
    ``enable_thinking``: passed to the chat template (Qwen3's switch); None leaves the
    template's default. ``max_new_tokens`` None: the task's limit. ``unknown`` names the
    settings the source does not state (they fall back to the task's / the template's)."""

    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    enable_thinking: bool | None = None
    max_new_tokens: int | None = None
    samples: int = 1
    seed: int | None = None
    source: str = "agent2rl greedy"
    unknown: tuple[str, ...] = ()

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    def to_dict(self) -> dict[str, Any]:
        """The settings as JSON (for the evaluation settings and the report)."""
        d = asdict(self)
        d["unknown"] = list(self.unknown)
        return d

    def transformers_kwargs(self) -> dict[str, Any]:
        """``model.generate`` keyword arguments (the seed is set by the caller with
        ``transformers.set_seed(seed)`` before generating)."""
        if self.greedy:
            return {"do_sample": False}
        out: dict[str, Any] = {"do_sample": True, "temperature": self.temperature}
        out["top_p"] = self.top_p
        if self.top_k:
            out["top_k"] = self.top_k
        return out

    def vllm_kwargs(self) -> dict[str, Any]:
        """``vllm.SamplingParams`` keyword arguments (``top_k`` -1: off, vLLM's spelling)."""
        if self.greedy:
            return {"temperature": 0.0, "n": self.samples}
        return {
            "temperature": self.temperature,
            "top_p": self.top_p,
            "top_k": self.top_k or -1,
            "seed": self.seed,
            "n": self.samples,
        }


GREEDY = Decoding()

#: The reference implementation's per-model table, by name prefix: only the rows it states.
REFERENCE_TABLE: dict[str, Decoding] = {
    "Qwen3-8B": Decoding(
        temperature=0.6,
        top_p=0.95,
        top_k=20,
        enable_thinking=True,
        source="reference table (Qwen3-8B)",
        # "a long output limit": the reference's exact number is not known here.
        unknown=("max_new_tokens",),
    ),
}


def _basename(model: str) -> str:
    return model.rstrip("/").rsplit("/", 1)[-1]


def reference_decoding(model: str) -> Decoding:
    """The reference's row for ``model`` (longest matching prefix), else greedy (as the
    reference decodes an unlisted model)."""
    name = _basename(model).lower()
    for prefix in sorted(REFERENCE_TABLE, key=len, reverse=True):
        if name.startswith(prefix.lower()):
            return REFERENCE_TABLE[prefix]
    return replace(GREEDY, source="reference: not in its table, greedy")


def decoding_for(model: str, protocol: str = "greedy", seed: int | None = None) -> Decoding:
    """``model``'s decoding under ``protocol`` (:data:`PROTOCOLS`); a sampled one is seeded
    with ``seed`` (:data:`DEFAULT_SEED` when None). :class:`UserError` for another protocol."""
    if protocol not in PROTOCOLS:
        raise UserError(f"unknown decoding {protocol!r}: use one of {', '.join(PROTOCOLS)}")
    dec = GREEDY if protocol == "greedy" else reference_decoding(model)
    if not dec.greedy:
        dec = replace(dec, seed=DEFAULT_SEED if seed is None else seed)
    return dec


def default_protocol(task: str, run_protocol: str | None) -> str:
    """The decoding a run uses unless it names one: ``reference`` for ``--protocol
    reference`` on a full task, ``greedy`` otherwise (a lite task, ``*-lite``, stays greedy:
    its grading must be fast and deterministic on a laptop)."""
    if run_protocol == "reference" and not task.endswith("-lite"):
        return "reference"
    return "greedy"


__all__ = [
    "DEFAULT_SEED",
    "GREEDY",
    "PROTOCOLS",
    "REFERENCE_TABLE",
    "Decoding",
    "decoding_for",
    "default_protocol",
    "reference_decoding",
]
