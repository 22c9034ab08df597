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

Routes: an allowlist of what the driver CLIs use, each provider module declaring its own
(``Provider.endpoints``). Anything else is a provider-shaped 404 that lists the allowed
endpoints, so the real key cannot reach other endpoints (files, batches, fine-tuning)::

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

Paths are checked as the client sent them, before any routing decision counts: a dot segment
(``..``, ``.``), an empty segment (``//``), a backslash, a control character, or a
percent-escape of anything but a model-id character (``%2e``, ``%2f``, ``%5c``, ``%25``,
``%3f``...) is a 400 listing the allowed endpoints, and a ``{model}`` part must be plain model
id segments. Otherwise ``models/../files`` would match ``models/{model}`` and reach the
upstream's ``/files`` once the URL is normalised on the way out.

Models (``ProxyConfig.allowed_models``, ``--restrict-models --allow-model M``): a run's proxy
relays a metered request only when the model it names (the body's ``model``; Gemini's is in
the path) is one of the run's driver models; any other, or a request naming none, is a
provider-shaped 403 naming the allowed models, recorded with ``refused: true`` and never sent
upstream. The agent's key then cannot call its task's judge model (AlpacaEval's) or anything
else billed to the run. Listing models and counting tokens are not model calls and pass.
``ProxyConfig.denied_prompts`` (``--denied-prompts FILE``, from the task's
``denied_llm_prompts``) refuses, the same way, a request that carries the task's judge prompt
to its judge model (AlpacaEval's template to ``gpt-4-1106-preview``), for a run whose driver is
that model; a paraphrase of the template is not caught.

Provider-side tools (:mod:`agent2rl.metering.provider_tools`): a metered request carrying a
tool the provider runs itself — Anthropic ``web_search``/``web_fetch``, ``mcp_servers``,
``url`` content sources; OpenAI ``web_search*``, ``mcp``, ``input_file`` ``file_url``, image
URLs, ``web_search_options`` and search models; Gemini ``google_search``/``url_context`` (every
spelling) and ``fileData`` URLs — is a provider-shaped 403 naming ``--allow-provider-tools``,
never sent upstream, unless ``ProxyConfig.allow_provider_tools`` (``--allow-provider-tools``).
Each use, refused or relayed, is a line of ``provider_tools.jsonl`` beside the usage file:
the tools and URLs the request declared, and the queries and URLs its answer (streamed or
not) shows the provider searched or fetched.

Request headers pass upstream from an allowlist (``Provider.forward_header``): the body's
type, ``accept``, ``user-agent``, ``idempotency-key``, ``x-stainless-*``, and per API
``openai-beta`` and Codex's session headers, ``anthropic-version``, ``x-app`` and
``anthropic-beta`` filtered to the betas of ``ANTHROPIC_BETAS`` (Claude Code's; none that
turns on a server tool, MCP, files or OAuth), ``x-goog-api-client``. Everything else —
``openai-organization``, ``openai-project``, ``x-goog-user-project``, cookies, credentials —
is dropped.

Modes the budget could not meter are refused (``Provider.refused_mode``): an OpenAI
Responses request with ``background: true`` (answered at once without usage, its work and
usage read later by ``GET /responses/{id}``, which is not relayed) is a 400.

Request bodies above 16 MiB (``ProxyConfig.max_body_bytes``) get a provider-shaped 413,
refused unread when ``Content-Length`` says so, else as soon as the body passes the limit.

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

Token budget (``--max-total-tokens``, :mod:`agent2rl.metering.budget`): before a metered
request is forwarded it reserves, under a lock, an estimate of its cost: its prompt at one
token per 4 body bytes (an over-estimate for JSON text) plus the output it asks for
(``max_tokens`` / ``max_completion_tokens`` / ``max_output_tokens`` /
``generationConfig.maxOutputTokens``) capped at 4096, or 4096 when it does not say. It is
refused with a provider-shaped 429 unless ``used + reserved + estimate`` fits the budget; when
the used tokens alone leave no room the message says "token budget of N exhausted" (Gemini's
``RESOURCE_EXHAUSTED``) and carries ``x-should-retry: false`` (the OpenAI and Anthropic SDKs
honour it and do not retry); when the room is held by requests in flight it carries
``Retry-After: 1`` instead. Refusals are recorded with ``refused: true``. When a request ends
its reservation is released and what it cost is added to the used tokens, so concurrent
requests cannot all pass a check none of them has paid for yet. The total can pass the budget
only by what a request used beyond its estimate (an answer longer than the 4096 reserved
when it asked for more). The used tokens start from the usage file, so a restarted proxy
keeps counting.

Unreported usage. A metered request the provider may have billed without saying how much is
charged its reservation, with ``estimated: true`` in its line, never 0: a 2xx answer without
usage (a server that reports none), a stream that ends without its final usage (cut by the
upstream, by the network, or by the client hanging up — otherwise an agent could cut every
stream just before its usage event to use tokens for free — or ended by an API that sent
none), or a response that timed out or broke off after the request went out. What the provider did
report counts (Anthropic reports the prompt as the stream starts); the reservation fills in
the rest: the prompt estimate, and all the reserved output, since the provider may have
generated it after the proxy stopped reading.

Failures. An upstream 429, 500, 502, 503, 504 or 529, or a refused connection, is retried up
to 2 times before anything reached the client (streams included: an error status comes before
any event), waiting 0.5 s then 1 s (with jitter), or what ``Retry-After`` /
``retry-after-ms`` asks up to 8 s; a response with ``x-should-retry: false`` or asking a longer
wait goes straight to the client, whose SDK honours it. The line records ``retries``, and the
tokens of a failed attempt that reported usage count. The last answer passes through
unchanged — it is already provider-shaped — and is recorded with its status, as are other
upstream errors (4xx). When no response comes at all, the client gets a provider-shaped 502
(connection refused, protocol error) or 504 (timeout). If the upstream fails in the middle of
a stream, or ends it before its last event, the proxy ends the stream with a provider-shaped
error event. None of this stops the proxy.

Keys come from the environment (never the command line): ``AGENT2RL_PROXY_KEY`` (required),
``AGENT2RL_UPSTREAM_OPENAI_KEY``, ``AGENT2RL_UPSTREAM_ANTHROPIC_KEY``,
``AGENT2RL_UPSTREAM_GEMINI_KEY`` (any may be empty, e.g. for a local OpenAI-compatible server
without auth).

The package, one noun a module (each readable alone)::

    usage.py       TokenCounts (the one token-count type), UsageRecord, the usage file's
                   writer (append_record) and reader (read_usage, summarize_usage)
    budget.py      the token budget: request estimates, reservations, settling
    pricing.py     Price, PRICES, price_for, estimate_cost (list prices, for reports only)
    providers/     one class per provider API (openai.py, anthropic.py, gemini.py on the
                   Provider base in base.py) and the PROVIDERS registry: routes, keys,
                   usage normalisation, response and stream usage, error shapes
    provider_tools.py  ToolUse, the provider-tool log (provider_tools_path, append_tool_uses,
                   read_tool_uses) and the refusal's message
    stream.py      SSE splitting and relay, the same for every provider
    proxy.py       the FastAPI relay app: ProxyConfig, create_app
    process.py     the proxy process: start_metering_proxy, its MeteringProxy handle, main
                   (``python -m agent2rl.metering``)

Dependencies point one way: usage <- pricing <- providers <- proxy <- process, and stream
and budget below providers and proxy.
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
