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

Routes: an allowlist of what the driver CLIs use (chat completions, Responses, Messages,
generateContent and its stream, token counting, the model listings), each provider module
declaring its own (``Provider.endpoints``, metered or not). Anything else is a
provider-shaped 404 that lists the allowed endpoints, so the real key cannot reach other
endpoints (files, batches, fine-tuning). ``GET /healthz`` needs no key.

Paths are checked as the client sent them (``proxy.path_problem``: a 400), or
``models/../files`` would reach the upstream's ``/files`` once the URL is normalised.

Refused before anything goes upstream, each with a provider-shaped error and recorded with
``refused: true`` (see :class:`~agent2rl.metering.proxy.ProxyConfig`): a model other than the
run's driver models (403: the agent's key cannot call its task's judge model), the task's
judge prompt sent to its judge model (403; a paraphrase is not caught), provider-side tools
(403 naming ``--allow-provider-tools``: :mod:`agent2rl.metering.provider_tools`, which logs
each use, refused or relayed), a mode the budget could not meter (400: OpenAI's
``background: true``, ``Provider.refused_mode``) and a body above 16 MiB (413). Request
headers pass from an allowlist (``Provider.forward_header``): the account, project and billing
headers, cookies, credentials and ``anthropic-beta``'s server-tool betas are dropped.

Responses pass through to the client byte for byte (streamed or not) while the proxy reads
the ``usage`` out of them, and every request — forwarded, refused or failed — appends one JSON
line to the usage file (``record/llm_usage.jsonl`` in a run: ``RunPaths.llm_usage``).

Token accounting: each provider's ``normalize`` maps its usage object to a record's
:class:`TokenCounts` fields (input with cache reads and writes included, output with
reasoning; its docstring names the provider's fields); the line also keeps the provider's own
``usage`` object, unmodified, for anything not normalised here.

Streaming usage: each provider's ``observe`` reads it from its events. A Chat Completions
stream carries it only when the request asks for ``stream_options.include_usage``; when the
client did not ask, the proxy adds that option upstream and then *drops* the extra usage-only
chunk (``choices: []``), so a client that indexes ``chunk.choices[0]`` keeps working. The other
chunks then carry ``"usage": null``, which every client ignores: the only byte difference from
an unmetered stream. A Gemini ``:streamGenerateContent`` without ``alt=sse`` answers one JSON
array, relayed whole once it has ended and metered by its last element with usage.

Token budget (``--max-total-tokens``): a metered request first reserves an estimate of its
cost (:mod:`agent2rl.metering.budget`: how, and how far the total can pass the budget) and
is refused with a provider-shaped 429 unless ``used + reserved + estimate`` fits; when the
used tokens alone leave no room it says "token budget of N exhausted" (Gemini's
``RESOURCE_EXHAUSTED``) with ``x-should-retry: false`` (the OpenAI and Anthropic SDKs honour
it), when requests in flight hold the room, ``Retry-After: 1``. The used tokens start from
the usage file, so a restarted proxy keeps counting.

Unreported usage. A metered request the provider may have billed without saying how much is
charged its reservation (``_Proxy.charge_estimate``), with ``estimated: true``, never 0: a
2xx answer without usage, a stream that ends without its final usage (cut by the upstream,
the network, or the client hanging up — otherwise an agent could cut every stream just
before its usage event to use tokens for free), or a response that timed out or broke off
after the request went out.

Failures. An upstream 429/5xx/529 or a refused connection is retried a few times before
anything reached the client (``ProxyConfig``: how many, how long); the last answer passes
through unchanged, already provider-shaped. When no response comes at all the client gets a
provider-shaped 502 (connection refused, protocol error) or 504 (timeout); a stream the
upstream breaks off or ends early gets a provider-shaped error event. None of this stops the
proxy.

Keys come from the environment (never the command line): ``AGENT2RL_PROXY_KEY`` (required),
``AGENT2RL_UPSTREAM_OPENAI_KEY``, ``AGENT2RL_UPSTREAM_ANTHROPIC_KEY``,
``AGENT2RL_UPSTREAM_GEMINI_KEY`` (any may be empty, e.g. for a local OpenAI-compatible server
without auth).

The package, one noun a module (each readable alone): ``usage`` (TokenCounts, the usage
file), ``budget``, ``pricing`` (list prices, for reports only), ``providers/`` (one class per
API and the PROVIDERS registry), ``provider_tools`` (their log and refusal), ``stream`` (SSE
splitting and relay), ``transcript``, ``proxy`` (the FastAPI app: ProxyConfig, create_app)
and ``process`` (start_metering_proxy, ``python -m agent2rl.metering``). Dependencies point
one way: usage <- pricing <- providers <- proxy <- process, and stream and budget below
providers and proxy.
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
