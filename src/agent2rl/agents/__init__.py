"""Agents: the AgentSpec registry, reference agents and (later) CLI adapters."""

from agent2rl.agents.spec import AgentSpec, builtin_specs, get_agent, install_files, load_spec

__all__ = ["AgentSpec", "builtin_specs", "get_agent", "install_files", "load_spec"]
