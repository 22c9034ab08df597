"""The LLM metering proxy: ``python -m agent2rl.metering --usage-file F --ready-file R``.

One proxy runs per run, on 127.0.0.1 (a random free port). The agent is pointed at it instead
of the provider and given a per-run *proxy key*, never the real one:

==========================  ============================================================
agent's setting             value
==========================  ============================================================
``OPENAI_BASE_URL``         ``http://127.0.0.1:PORT/openai/v1``
``ANTHROPIC_BASE_URL``      ``http://127.0.0.1:PORT/anthropic``
``GOOGLE_GEMINI_BASE_URL``  ``http://127.0.0.1:PORT/gemini``
``*_API_KEY``               the proxy key (``Authorization: Bearer``, ``x-api-key``, or for
                            Gemini ``x-goog-api-key`` / a ``?key=`` query parameter)
==========================  ============================================================

Routes (anything else is a provider-shaped 404, so the real key cannot reach other endpoints,
e.g. fine-tuning or files)::

    POST /openai/v1/chat/completions          metered
    POST /openai/v1/responses                 metered
    GET  /openai/v1/models[/{id}]
    POST /anthropic/v1/messages               metered
    POST /anthropic/v1/messages/count_tokens
    GET  /anthropic/v1/models[/{id}]
    POST /gemini/v1beta/models/{m}:generateContent        metered
    POST /gemini/v1beta/models/{m}:streamGenerateContent  metered (``?alt=sse``: SSE events)
    POST /gemini/v1beta/models/{m}:countTokens
    GET  /gemini/v1beta/models[/{m}]
    GET  /healthz                             no key needed

Any other Gemini action (``:embedContent``, ``:batchGenerateContent``, cached contents, files)
is a 404 too. A Gemini key given as ``?key=`` is checked and then removed from the query; the
real key goes upstream only as ``x-goog-api-key``.

Responses pass through to the client byte for byte (streamed or not) while the proxy reads
the ``usage`` out of them, and every request — forwarded, refused or failed — appends one JSON
line to the usage file (``record/llm_usage.jsonl`` in a run: ``RunPaths.llm_usage``).

Token accounting, normalised across providers into :class:`TokenCounts` (one record's fields):

- ``input_tokens``: every prompt token the provider processed. OpenAI's ``prompt_tokens`` /
  ``input_tokens`` already include cached tokens; for Anthropic it is ``input_tokens +
  cache_read_input_tokens + cache_creation_input_tokens``.
- ``cached_tokens``: prompt tokens read from the provider's cache (a subset of input);
  ``cache_write_tokens``: Anthropic's cache creation tokens (a subset of input; 0 for OpenAI).
- ``output_tokens``: completion tokens (reasoning included).
- Gemini: ``input`` is ``promptTokenCount`` (cached content included) plus
  ``toolUsePromptTokenCount``; ``cached`` is ``cachedContentTokenCount``; ``output`` is
  ``candidatesTokenCount + thoughtsTokenCount`` (thinking tokens are billed as output).
- ``usage``: the provider's own usage object, unmodified, for anything not normalised here.

Streaming usage. Anthropic streams always carry usage (``message_start`` and the cumulative
``message_delta``); a Responses-API stream carries it in ``response.completed``; a Gemini SSE
stream (``:streamGenerateContent?alt=sse``) carries ``usageMetadata`` in its events, and the
last event that has it counts. A Chat Completions stream carries it only when the request asks
for ``stream_options.include_usage``; when the client did not ask, the proxy adds that option
upstream and then *drops* the extra usage-only chunk (``choices: []``) before it reaches the
client, so a client that indexes ``chunk.choices[0]`` keeps working. The other chunks then carry
``"usage": null``, which every client ignores; that field is the only byte difference from an
unmetered stream. When the client asked for usage itself, the stream is untouched. A Gemini
``:streamGenerateContent`` without ``alt=sse`` answers one JSON array; the proxy relays it
whole once it has ended (same bytes, no increments) and meters its last element with usage.

Token budget (``--max-total-tokens``): once the recorded ``input_tokens + output_tokens`` reach
the budget, metered requests are refused with a provider-shaped 429 ("token budget of N
exhausted"; Gemini's ``RESOURCE_EXHAUSTED``) carrying ``x-should-retry: false`` (the OpenAI and
Anthropic SDKs honour it and do not retry), and recorded with ``refused: true``. Requests
already in flight when the budget runs out finish, so the total can overshoot by them. The
running total starts from the usage file, so a restarted proxy keeps counting.

Failures. Upstream HTTP responses of any status (4xx, 5xx) pass through unchanged — they are
already provider-shaped — and are recorded with their status. When no response comes at all,
the client gets a provider-shaped 502 (connection refused, protocol error) or 504 (timeout).
If the upstream fails in the middle of a stream, the proxy ends the stream with a
provider-shaped error event. None of this stops the proxy.

Keys come from the environment (never the command line): ``AGENT2RL_PROXY_KEY`` (required),
``AGENT2RL_UPSTREAM_OPENAI_KEY``, ``AGENT2RL_UPSTREAM_ANTHROPIC_KEY``,
``AGENT2RL_UPSTREAM_GEMINI_KEY`` (any may be empty, e.g. for a local OpenAI-compatible server
without auth).

The package, one noun a module (each readable alone)::

    usage.py       TokenCounts (the one token-count type), UsageRecord, the usage file's
                   writer (append_record) and reader (read_usage, summarize_usage)
    pricing.py     Price, PRICES, price_for, estimate_cost (list prices, for reports only)
    providers/     one class per provider API (openai.py, anthropic.py, gemini.py on the
                   Provider base in base.py) and the PROVIDERS registry: routes, keys,
                   usage normalisation, response and stream usage, error shapes
    stream.py      SSE splitting and relay, the same for every provider
    proxy.py       the FastAPI relay app: ProxyConfig, create_app
    process.py     the proxy process: start_metering_proxy, its MeteringProxy handle, main
                   (``python -m agent2rl.metering``)

Dependencies point one way: usage <- pricing <- providers <- proxy <- process, and stream
below providers.
"""

from agent2rl.metering.pricing import PRICES, Price, estimate_cost, price_for
from agent2rl.metering.process import PROXY_KEY_ENV, MeteringProxy, start_metering_proxy
from agent2rl.metering.providers import PROVIDERS, Endpoint, Provider, Route, Upstream
from agent2rl.metering.proxy import ProxyConfig, create_app
from agent2rl.metering.stream import StreamMeter
from agent2rl.metering.usage import (
    TokenCounts,
    UsageRecord,
    append_record,
    read_usage,
    summarize_usage,
    token_count,
)

__all__ = [
    "PRICES",
    "PROVIDERS",
    "PROXY_KEY_ENV",
    "Endpoint",
    "MeteringProxy",
    "Price",
    "Provider",
    "ProxyConfig",
    "Route",
    "StreamMeter",
    "TokenCounts",
    "Upstream",
    "UsageRecord",
    "append_record",
    "create_app",
    "estimate_cost",
    "price_for",
    "read_usage",
    "start_metering_proxy",
    "summarize_usage",
    "token_count",
]
