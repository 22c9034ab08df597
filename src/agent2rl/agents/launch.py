"""What a run launches: an agent spec + driver + metering proxy -> exact argv, env, files.

The agent process never gets the user's real provider key. Its base-URL variables point at
the run's metering proxy on loopback and its key variables hold the per-run proxy key::

    proxy_url = "http://127.0.0.1:PORT"
    {openai_url}     = proxy_url + "/openai/v1"     (OpenAI-compatible)
    {anthropic_url}  = proxy_url + "/anthropic"     (Anthropic messages: .../v1/messages)
    {gemini_url}     = proxy_url + "/gemini"        (Gemini generateContent)
    {base_url}       = the one of these for the driver's API
    {proxy_key}      = the per-run proxy key

The orchestration resolves the driver (:func:`~agent2rl.agents.drivers.driver_for`), starts
the proxy with its :func:`~agent2rl.agents.drivers.real_key` upstream, then
:func:`build_launch`, :meth:`Launch.write_files` and starts ``argv`` with ``env`` added.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path

from agent2rl.agents.drivers import Driver
from agent2rl.agents.spec import AgentSpec, base_values, fill
from agent2rl.errors import UserError
from agent2rl.files import write_text_atomic
from agent2rl.metering import PROVIDERS

# The provider APIs the metering proxy relays (agent2rl.metering.providers); a driver on any
# other API could only run with the real key in the agent's hands, which a run never allows.
PROXIED_APIS: frozenset[str] = frozenset(PROVIDERS)


def proxy_endpoints(proxy_url: str) -> dict[str, str]:
    """The proxy's per-API base URLs as placeholder values (``openai_url``,
    ``anthropic_url``, ``gemini_url``); trailing slashes of ``proxy_url`` are ignored."""
    root = proxy_url.rstrip("/")
    return {f"{name}_url": root + p.client_path for name, p in PROVIDERS.items()}


@dataclass(frozen=True)
class Launch:
    """Everything needed to start one agent.

    ``env`` holds only the spec's variables (the caller adds the workspace contract's);
    ``files`` are config files to write (absolute path -> content) before starting;
    ``log_path`` is the structured log the CLI writes besides stdout, if any.
    """

    argv: list[str]
    env: dict[str, str]
    files: dict[Path, str] = field(default_factory=dict)
    log_path: Path | None = None
    driver: Driver | None = None

    def write_files(self) -> list[Path]:
        """Write ``files`` (atomically, creating parent folders, mode 0600); returns their paths."""
        for path, text in self.files.items():
            write_text_atomic(path, text, mode=0o600)
        return list(self.files)


def driver_values(driver: Driver, spec: AgentSpec, proxy_url: str, proxy_key: str) -> dict:
    """The LLM placeholder values for ``spec`` run with ``driver`` behind the proxy."""
    urls = proxy_endpoints(proxy_url)
    fmt = spec.driver_format.get(driver.format_key) or spec.driver_format.get(driver.api)
    return {
        **urls,
        "driver": (fmt or "{model}").replace("{model}", driver.model),
        "model": driver.model,
        "api": driver.api,
        "base_url": urls[f"{driver.api}_url"],
        "proxy_key": proxy_key,
    }


def build_launch(
    spec: AgentSpec,
    *,
    workspace: Path,
    prompt: str,
    prompt_file: Path,
    driver: Driver | None = None,
    proxy_url: str | None = None,
    proxy_key: str | None = None,
    real_key: str = "",
    proxied_apis: Collection[str] = PROXIED_APIS,
) -> Launch:
    """The exact argv, env and config files a run launches for ``spec``.

    An agent without an LLM (``api = "none"``) needs no driver or proxy. An LLM agent needs
    all three; a driver whose API is not in ``proxied_apis`` is a
    :class:`UserError`. ``real_key``, when given (8 characters or more), is checked to
    appear nowhere in what the agent gets (a spec that leaked it would be a bug:
    RuntimeError, nothing is written).
    """
    values = base_values(workspace, prompt, prompt_file)
    if spec.uses_llm:
        if driver is None:
            raise UserError(f"agent {spec.name} needs a driver model: pass --driver")
        if not proxy_url or not proxy_key:
            raise ValueError("an LLM agent is launched only behind a metering proxy")
        if driver.api not in proxied_apis:
            raise UserError(
                f"driver {driver.name}: the metering proxy does not relay the {driver.api} API "
                "yet, so this run could not be metered without handing the agent your real "
                f"key; use a driver of one of {', '.join(sorted(proxied_apis))}"
            )
        values |= driver_values(driver, spec, proxy_url, proxy_key)
    argv = [fill(a, values) for a in spec.command]
    env = {k: fill(v, values) for k, v in spec.env.items()}
    files = {workspace / rel: fill(text, values) for rel, text in spec.config_files.items()}
    # Real keys are long; a short string would match innocent text (a prompt) by chance.
    if len(real_key) >= 8:
        leaks = [a for a in argv if real_key in a]
        leaks += [k for k, v in env.items() if real_key in v]
        leaks += [str(p) for p, t in files.items() if real_key in t]
        if leaks:
            raise RuntimeError(f"agent {spec.name}: the real key would reach the agent via {leaks}")
    log_path = workspace / spec.log_file if spec.log_file else None
    return Launch(argv, env, files, log_path, driver if spec.uses_llm else None)
