"""Agents: the AgentSpec registry, reference agents, LLM agent systems (CLI adapters described
as data), their launch behind the metering proxy, log parsing, operating modes and a doctor.

The package::

    spec.py      AgentSpec (an agent as data) and the built-in specs in specs/*.toml
    drivers.py   driver models: which provider API serves one, where its real key lives
    launch.py    spec + driver + metering proxy -> the exact argv, env and config files
    logs/        one parser per CLI log format, merged into PARSERS -> typed events
    modes.py     operating modes: the prompt variants that frame the methods an agent may use
    prompt.py    the agent's prompt: task files, workspace listing, data sample, mode text
    methods.py   the training methods a run's code used, and where they contradict its mode
    doctor.py    which agents are installed and configured here
    reference/   the reference agents' scripts (no LLM), copied into the workspace

Dependencies point one way: logs <- spec <- drivers <- launch <- doctor; the LLM plumbing
(the proxy, token counts) is :mod:`agent2rl.metering`, which imports nothing from here.
"""

from agent2rl.agents.drivers import Driver, driver_for, real_key, resolve_driver
from agent2rl.agents.launch import Launch, build_launch
from agent2rl.agents.logs import AgentLog, Event, parse_log, read_agent_log
from agent2rl.agents.methods import detect_methods, mode_contradictions
from agent2rl.agents.modes import MODES
from agent2rl.agents.prompt import render_prompt
from agent2rl.agents.spec import AGENTS, AgentSpec, get_agent, install_files, load_spec

__all__ = [
    "MODES",
    "AgentLog",
    "AgentSpec",
    "Driver",
    "Event",
    "Launch",
    "build_launch",
    "AGENTS",
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
