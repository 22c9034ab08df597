"""The provider APIs the metering proxy relays, one class each, in one registry.

A provider owns everything that differs between APIs: its routes, where a client puts the
key and where the real one goes upstream, how its usage object maps to
:class:`~agent2rl.metering.usage.TokenCounts`, where usage sits in its responses and stream
events, and the shape of its errors. The proxy itself only looks a provider up by name in
:data:`PROVIDERS`; adding an API is one module here and one line below, or, from another
distribution, an entry point in the ``agent2rl.providers`` group naming a
:class:`~agent2rl.metering.providers.base.Provider` subclass (instantiated on load).
:data:`PROVIDERS` is a :class:`~agent2rl.registry.Registry`, read like a dict; a second
provider under a taken name is refused.
"""

from agent2rl.metering.providers.anthropic import AnthropicProvider
from agent2rl.metering.providers.base import Endpoint, Provider, Route, Upstream
from agent2rl.metering.providers.gemini import GeminiProvider
from agent2rl.metering.providers.openai import OpenAIProvider
from agent2rl.registry import Registry


def _instance(obj: object) -> Provider:
    """An entry point may name a Provider class (instances hold no state) or an instance."""
    return obj() if isinstance(obj, type) else obj  # type: ignore[return-value]


#: Every relayed API by name (a route prefix, a usage record's ``api``, a driver's API).
PROVIDERS: Registry[Provider] = Registry("providers", "provider API", coerce=_instance)
for _provider in (OpenAIProvider(), AnthropicProvider(), GeminiProvider()):
    PROVIDERS.register(_provider.name, _provider)

__all__ = [
    "PROVIDERS",
    "AnthropicProvider",
    "Endpoint",
    "GeminiProvider",
    "OpenAIProvider",
    "Provider",
    "Route",
    "Upstream",
]
