"""When a warm grader may keep its loaded engine for the next submission (issue #28).

A warm evaluation worker holds one backend between submissions: a transformers model, or a
vLLM engine put to sleep between evaluations (its GPU memory released to the agent). The next
submission's weights are loaded into it in place only when nothing else about the engine
would differ from a fresh load: the same backend kind and start-up settings, the same model
structure (config, generation config, tokenizer files and chat template, byte for byte:
:func:`agent2rl.grading.worker.structure_fingerprint`), and, for vLLM, no less GPU memory
free than the engine was sized for (its KV cache would not fit when it wakes). Anything else
starts a fresh engine. :func:`reuse_engine` is the whole decision, pure, so that it is tested
without vLLM or a GPU.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

#: vLLM shares closer than this are the same sizing (measurement noise between two probes)
FRACTION_TOLERANCE = 0.01


@dataclass(frozen=True)
class EngineKey:
    """What a loaded engine was started with.

    ``kind``: the resolved backend (``vllm`` or ``transformers``); ``structure``: the model
    directory's structure fingerprint; ``settings``: the backend settings a weight reload
    cannot change (dtype, context length, tensor parallel size, decoding, stop ids), as
    canonical JSON; ``memory_fraction``: vLLM's ``gpu_memory_utilization`` (None for
    transformers).
    """

    kind: str
    structure: str
    settings: str
    memory_fraction: float | None = None

    @classmethod
    def of(cls, config: Any, structure: str) -> EngineKey:
        """The key of a backend loaded with ``config`` (a sized
        :class:`~agent2rl.inference.backend.BackendConfig`) for a model of ``structure``."""
        kind = config.resolved_kind()
        settings = config.to_dict()
        # the kind and the share are compared on their own (a share may shrink and be reused)
        for k in ("kind", "gpu_memory_utilization"):
            settings.pop(k, None)
        return cls(
            kind=kind,
            structure=structure,
            settings=json.dumps(settings, sort_keys=True),
            memory_fraction=config.gpu_memory_utilization if kind == "vllm" else None,
        )


def reuse_engine(held: EngineKey | None, wanted: EngineKey) -> tuple[bool, str]:
    """Whether the engine loaded as ``held`` may take the weights of a submission that needs
    ``wanted``: ``(True, "reload")``, or ``(False, why)`` for a fresh load.

    Edge cases: no engine held is a fresh load; for vLLM a ``wanted`` share larger than the
    held one still reuses the engine (it fits in what is free; the engine keeps its own
    size), a smaller one (the agent took memory since) does not.
    """
    if held is None:
        return False, "no engine loaded"
    if held.kind != wanted.kind:
        return False, f"backend changed from {held.kind} to {wanted.kind}"
    if held.structure != wanted.structure:
        return False, "model structure changed (config, tokenizer or chat template)"
    if held.settings != wanted.settings:
        return False, "backend settings changed"
    if (
        wanted.kind == "vllm"
        and held.memory_fraction is not None
        and wanted.memory_fraction is not None
        and wanted.memory_fraction < held.memory_fraction - FRACTION_TOLERANCE
    ):
        return False, (
            f"less GPU memory free: engine re-sized from {held.memory_fraction:.2f} "
            f"to {wanted.memory_fraction:.2f}"
        )
    return True, "reload"
