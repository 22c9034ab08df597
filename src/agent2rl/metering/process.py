"""The proxy process: start it (:func:`start_metering_proxy`), its handle, its entry point.

``python -m agent2rl.metering --usage-file F --ready-file R [--max-total-tokens N]
[--<provider>-base-url URL ...]``; the keys come only through the environment (see the
package docstring), never the command line.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from agent2rl.child_process import serve_on_free_port, start_announcing, stop_child
from agent2rl.files import write_json_atomic
from agent2rl.metering.providers import PROVIDERS, Upstream
from agent2rl.metering.proxy import ProxyConfig, create_app
from agent2rl.metering.transcript import REDACT_ENV

PROXY_KEY_ENV = "AGENT2RL_PROXY_KEY"


@dataclass
class MeteringProxy:
    """A running proxy process."""

    proc: subprocess.Popen
    port: int
    key: str
    usage_file: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def base_url(self, provider: str) -> str:
        """The base URL a client of ``provider``'s SDK is given (``/openai/v1``,
        ``/anthropic``, ``/gemini``: the SDKs add the rest, e.g. ``/v1beta/models/...``).
        KeyError for a provider the proxy does not relay."""
        return self.url + PROVIDERS[provider].client_path

    def agent_env(self) -> dict[str, str]:
        """Environment variables that point the usual SDKs and CLIs at this proxy:
        ``OPENAI_BASE_URL``/``OPENAI_API_KEY``, ``ANTHROPIC_BASE_URL``/``ANTHROPIC_API_KEY``,
        ``GOOGLE_GEMINI_BASE_URL``/``GEMINI_API_KEY``, each key being the proxy key."""
        env = {}
        for name, provider in PROVIDERS.items():
            env[provider.base_url_env] = self.base_url(name)
            env[provider.key_envs[0]] = self.key
        return env

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM (in-flight requests get a few seconds), then SIGKILL; idempotent."""
        stop_child(self.proc, timeout)


def start_metering_proxy(
    usage_file: Path,
    *,
    upstreams: Mapping[str, Upstream] | None = None,
    proxy_key: str | None = None,
    max_total_tokens: int | None = None,
    upstream_timeout_s: float = 600.0,
    allowed_models: Sequence[str] | None = None,
    denied_prompts: Mapping[str, Sequence[str]] | None = None,
    allow_provider_tools: bool = False,
    redact: Sequence[str] = (),
) -> MeteringProxy:
    """Start a proxy process recording to ``usage_file`` and wait until it serves.

    ``upstreams`` maps a provider name to its upstream URL and real key; a provider left out
    gets this host's (:meth:`~agent2rl.metering.providers.Provider.host_base_url` and
    ``host_key``). Keys reach the child through its environment only. ``proxy_key`` is the
    key the agent gets (a fresh random one when None). ``llm_proxy.json`` beside the usage
    file receives ``{"port", "pid"}`` once the proxy accepts connections (within 30 s),
    ``llm_proxy.log`` its output. ``allowed_models`` (None: every model), ``denied_prompts``
    (handed over in ``llm_proxy_denied.json`` beside the usage file) and
    ``allow_provider_tools``: as in :class:`~agent2rl.metering.proxy.ProxyConfig`.
    ``redact``: the run's other secrets (its grading token), never written to the transcript
    (handed over in the environment, as the keys are:
    :data:`~agent2rl.metering.transcript.REDACT_ENV`). Raises RuntimeError, naming the log,
    if the process exits or is not ready in time.
    """
    usage_file = Path(usage_file).resolve()
    usage_file.parent.mkdir(parents=True, exist_ok=True)
    ready_file = usage_file.with_name("llm_proxy.json")
    key = proxy_key or secrets.token_urlsafe(24)
    env = {**os.environ, PROXY_KEY_ENV: key, REDACT_ENV: "\n".join(redact)}
    cmd = [sys.executable, "-m", "agent2rl.metering", "--usage-file", str(usage_file)]
    cmd += ["--ready-file", str(ready_file), "--timeout", str(upstream_timeout_s)]
    for name, provider in PROVIDERS.items():
        given = (upstreams or {}).get(name)
        upstream = given or Upstream(provider.host_base_url(), provider.host_key())
        env[provider.upstream_key_env] = upstream.api_key
        cmd += [f"--{name}-base-url", upstream.base_url]
    if max_total_tokens is not None:
        cmd += ["--max-total-tokens", str(max_total_tokens)]
    if allowed_models is not None:
        cmd += ["--restrict-models", *(f"--allow-model={m}" for m in allowed_models)]
    if allow_provider_tools:
        cmd.append("--allow-provider-tools")
    if denied_prompts:
        denied_file = usage_file.with_name("llm_proxy_denied.json")
        write_json_atomic(denied_file, {m: list(t) for m, t in denied_prompts.items()})
        cmd += ["--denied-prompts", str(denied_file)]
    proc, port = start_announcing(
        cmd,
        env=env,
        ready_file=ready_file,
        log_file=usage_file.with_name("llm_proxy.log"),
        name="metering proxy",
        ready_timeout=30.0,
    )
    return MeteringProxy(proc, port, key, usage_file)


def main(argv: Iterable[str] | None = None) -> int:
    """The proxy process: serve until SIGTERM; 2 when the proxy key is missing."""
    ap = argparse.ArgumentParser(description="agent2rl LLM metering proxy")
    ap.add_argument("--usage-file", type=Path, required=True)
    ap.add_argument("--ready-file", type=Path, required=True)
    for name, provider in PROVIDERS.items():
        ap.add_argument(f"--{name}-base-url", dest=name, default=provider.default_base_url)
    ap.add_argument("--max-total-tokens", type=int, default=None)
    ap.add_argument("--timeout", type=float, default=600.0, help="upstream read timeout (s)")
    ap.add_argument("--no-inject-stream-usage", action="store_true")
    ap.add_argument(
        "--restrict-models", action="store_true", help="relay only the --allow-model models"
    )
    ap.add_argument("--allow-model", action="append", default=[], metavar="MODEL")
    ap.add_argument("--denied-prompts", type=Path, help="JSON: model -> texts refused")
    ap.add_argument(
        "--allow-provider-tools",
        action="store_true",
        help="relay provider-side web search / URL fetch tools (recorded)",
    )
    args = ap.parse_args(None if argv is None else list(argv))
    # Pop the keys so nothing this process starts could inherit them.
    proxy_key = os.environ.pop(PROXY_KEY_ENV, "")
    if not proxy_key:
        print(f"{PROXY_KEY_ENV} is not set", file=sys.stderr)
        return 2
    upstreams = {
        name: Upstream(getattr(args, name), os.environ.pop(provider.upstream_key_env, ""))
        for name, provider in PROVIDERS.items()
    }
    cfg = ProxyConfig(
        usage_file=args.usage_file.resolve(),
        proxy_key=proxy_key,
        upstreams=upstreams,
        max_total_tokens=args.max_total_tokens,
        upstream_timeout_s=args.timeout,
        inject_stream_usage=not args.no_inject_stream_usage,
        allowed_models=tuple(args.allow_model) if args.restrict_models else None,
        denied_prompts=(
            {m: tuple(t) for m, t in json.loads(args.denied_prompts.read_text()).items()}
            if args.denied_prompts
            else {}
        ),
        allow_provider_tools=args.allow_provider_tools,
    )
    ready = args.ready_file
    serve_on_free_port(
        create_app(cfg), lambda port: write_json_atomic(ready, {"port": port, "pid": os.getpid()})
    )
    return 0
