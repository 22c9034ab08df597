"""Base models: the built-in ``tiny`` model, local directories and hub ids."""

from agent2rl.models.resolve import ModelRef, resolve_model
from agent2rl.models.weights import weights_hash

__all__ = ["ModelRef", "resolve_model", "weights_hash"]
