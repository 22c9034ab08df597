"""Generation backends behind one interface."""

from agent2rl.inference.backend import (
    Backend,
    BackendConfig,
    GenerationSettings,
    load_backend,
    truncate_at_stop,
    vllm_usable,
)

__all__ = [
    "Backend",
    "BackendConfig",
    "GenerationSettings",
    "load_backend",
    "truncate_at_stop",
    "vllm_usable",
]
