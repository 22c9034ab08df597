"""Driver models: which provider API a driver name belongs to, and where its real key lives.

The *driver* is the LLM that drives an agent system (``--driver``). Accepted forms:

=========================================  ===================  ===============================
driver                                     API                  real key (host environment)
=========================================  ===================  ===============================
``claude-*``                               anthropic            ``ANTHROPIC_API_KEY``
``gpt-*``, ``o1*``, ``o3*``, ``o4*``,      openai               ``OPENAI_API_KEY``
``codex-*``
``gemini-*``                               gemini               ``GEMINI_API_KEY`` (or
                                                                ``GOOGLE_API_KEY``)
``anthropic/<m>``, ``openai/<m>``,         that API, explicitly  as above
``gemini/<m>``
``openai/<m>`` with ``--driver-base-url``  openai-compatible    ``AGENT2RL_DRIVER_API_KEY``
                                           (vLLM, SGLang, ...)  (optional: local servers often
                                                                need none)
=========================================  ===================  ===============================

The real key only ever reaches the metering proxy (as its upstream key); the agent gets the
proxy's URL and a per-run proxy key (see :mod:`agent2rl.agents.launch`). An OpenAI-compatible
server gets its own key variable so that a user's OpenAI key is never sent to another host.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

from agent2rl.agents.spec import AgentSpec
from agent2rl.errors import UserError
from agent2rl.metering import PROVIDERS

COMPATIBLE_KEY_ENV = "AGENT2RL_DRIVER_API_KEY"

# (name prefixes, api) for bare model names; checked in order.
_BARE_PREFIXES: tuple[tuple[tuple[str, ...], str], ...] = (
    (("claude-",), "anthropic"),
    (("gpt-", "o1", "o3", "o4", "codex-"), "openai"),
    (("gemini-",), "gemini"),
)
KEY_ENVS: dict[str, tuple[str, ...]] = {name: p.key_envs for name, p in PROVIDERS.items()}
# Model ids go into argv, env values and JSON/YAML config files verbatim, so only characters
# that need no quoting anywhere are accepted.
_MODEL_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@+\-/]*")

DRIVER_FORMS = (
    "claude-* (Anthropic), gpt-* / o1* / o3* / o4* / codex-* (OpenAI), gemini-* (Google), "
    "anthropic/<model>, openai/<model>, gemini/<model>, or openai/<model> with "
    "--driver-base-url URL for an OpenAI-compatible server"
)


@dataclass(frozen=True)
class Driver:
    """A resolved driver model.

    ``model`` is the id sent to the provider; ``api`` the provider API it is served by
    (``anthropic``, ``openai`` or ``gemini``); ``base_url`` the upstream of an
    OpenAI-compatible server (``None``: the provider's own endpoint); ``key_envs`` the host
    variables that may hold the real key, first found wins.
    """

    name: str
    model: str
    api: str
    key_envs: tuple[str, ...]
    base_url: str | None = None
    key_optional: bool = False

    @property
    def compatible(self) -> bool:
        """Served by an OpenAI-compatible server rather than by OpenAI itself."""
        return self.base_url is not None

    @property
    def format_key(self) -> str:
        """The key of a spec's ``driver_format`` table that names this driver."""
        return "openai-compatible" if self.compatible else self.api

    @property
    def key_env(self) -> str:
        """The variable a user should set (the first of ``key_envs``)."""
        return self.key_envs[0]


def resolve_driver(name: str, base_url: str | None = None) -> Driver:
    """The driver for a ``--driver`` value (and ``--driver-base-url``).

    Edge cases: surrounding whitespace is ignored; an explicit ``anthropic/``, ``openai/`` or
    ``gemini/`` prefix wins over the name's pattern (``openai/claude-x`` is served by an
    OpenAI endpoint); a base URL is accepted only with ``openai/<model>`` and must be
    http(s). Anything else is a :class:`UserError` listing the accepted forms.
    """
    raw = name.strip()
    if base_url is not None:
        base_url = base_url.strip().rstrip("/")
        if not base_url.startswith(("http://", "https://")):
            raise UserError(f"--driver-base-url {base_url!r} must be an http(s) URL")
        if not raw.startswith("openai/"):
            raise UserError(
                f"--driver-base-url needs a driver of the form openai/<model>, not {raw!r} "
                "(the server must speak the OpenAI API)"
            )
    prefix, sep, rest = raw.partition("/")
    if sep and prefix in KEY_ENVS:
        api, model = prefix, rest
    else:
        api = next((a for p, a in _BARE_PREFIXES if raw.lower().startswith(p)), "")
        model = raw
    if not api or not model or not _MODEL_ID.fullmatch(model):
        raise UserError(f"unknown driver {name!r}: use {DRIVER_FORMS}")
    if base_url is not None:
        return Driver(raw, model, "openai", (COMPATIBLE_KEY_ENV,), base_url, key_optional=True)
    return Driver(raw, model, api, KEY_ENVS[api])


def driver_for(spec: AgentSpec, name: str | None = None, base_url: str | None = None) -> Driver:
    """The driver an agent runs with: ``name`` or the spec's ``default_driver``.

    Raises :class:`UserError` when the agent needs no LLM but a driver was given, or when
    the agent's CLI cannot speak the driver's API (``claude-code`` with ``gpt-5``).
    """
    if not spec.uses_llm:
        raise UserError(f"agent {spec.name} uses no LLM: drop --driver")
    driver = resolve_driver(name or spec.default_driver, base_url)
    if spec.api not in ("any", driver.api):
        raise UserError(
            f"agent {spec.name} speaks the {spec.api} API but driver {driver.name} is served "
            f"by the {driver.api} API: use a {spec.api} driver, e.g. --driver "
            f"{spec.default_driver}"
        )
    return driver


def real_key(driver: Driver, environ: Mapping[str, str] | None = None) -> str:
    """The real provider key for ``driver`` from the host environment (``os.environ``).

    Returns ``""`` for an OpenAI-compatible server without a key. A missing key is one
    :class:`UserError` naming the variable to set.
    """
    env = os.environ if environ is None else environ
    for var in driver.key_envs:
        if env.get(var, "").strip():
            return env[var].strip()
    if driver.key_optional:
        return ""
    alt = f" (or {' or '.join(driver.key_envs[1:])})" if len(driver.key_envs) > 1 else ""
    raise UserError(
        f"driver {driver.name} needs your {driver.api} API key: export "
        f"{driver.key_env}=...{alt}. Only the metering proxy uses it; the agent gets a "
        "per-run proxy key."
    )
