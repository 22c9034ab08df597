"""The agent's workspace: builder and sandbox."""

from agent2rl.workspace.builder import agent_env, build_workspace, write_instructions

__all__ = ["agent_env", "build_workspace", "write_instructions"]
