"""Agents: the AgentSpec registry, reference agents, LLM agent systems (CLI adapters described
as data), their launch behind the metering proxy, log parsing, operating modes and a doctor."""

from agent2rl.agents.drivers import Driver, driver_for, real_key, resolve_driver
from agent2rl.agents.events import AgentLog, Event, parse_log, read_agent_log
from agent2rl.agents.launch import Launch, build_launch
from agent2rl.agents.modes import MODES, detect_methods, mode_contradictions, render_prompt
from agent2rl.agents.spec import AgentSpec, builtin_specs, get_agent, install_files, load_spec

__all__ = [
    "MODES",
    "AgentLog",
    "AgentSpec",
    "Driver",
    "Event",
    "Launch",
    "build_launch",
    "builtin_specs",
    "detect_methods",
    "driver_for",
    "get_agent",
    "install_files",
    "load_spec",
    "mode_contradictions",
    "parse_log",
    "read_agent_log",
    "real_key",
    "render_prompt",
    "resolve_driver",
]
