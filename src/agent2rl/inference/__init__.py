"""Generation backends behind one interface."""

from agent2rl.inference.backend import Backend, GenerationSettings, load_backend, truncate_at_stop

__all__ = ["Backend", "GenerationSettings", "load_backend", "truncate_at_stop"]
