"""The agent's workspace: the only directory an agent sees (see :mod:`.builder`)."""

from agent2rl.workspace.builder import agent_env, build_workspace, write_instructions

__all__ = ["agent_env", "build_workspace", "write_instructions"]
