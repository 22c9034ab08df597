"""The provider APIs the metering proxy relays, one class each, in one registry.

A provider owns everything that differs between APIs: its routes, where a client puts the
key and where the real one goes upstream, how its usage object maps to
:class:`~agent2rl.metering.usage.TokenCounts`, where usage sits in its responses and stream
events, and the shape of its errors. The proxy itself only looks a provider up by name in
:data:`PROVIDERS`; adding an API is one module here and one line below.
"""

from agent2rl.metering.providers.anthropic import AnthropicProvider
from agent2rl.metering.providers.base import Endpoint, Provider, Route, Upstream
from agent2rl.metering.providers.gemini import GeminiProvider
from agent2rl.metering.providers.openai import OpenAIProvider

#: Every relayed API by name (a route prefix, a usage record's ``api``, a driver's API).
PROVIDERS: dict[str, Provider] = {
    p.name: p for p in (OpenAIProvider(), AnthropicProvider(), GeminiProvider())
}

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
