"""agent2rl: a benchmark harness for LLM coding agents that engineer RL post-training."""

from agent2rl.errors import UserError

__version__ = "0.1.0"
__all__ = ["UserError", "__version__"]
