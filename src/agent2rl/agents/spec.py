"""AgentSpec: an agent described as data, and the registry of built-in agents.

A spec is a TOML file::

    name = "reference-sft"
    description = "SFT in rounds with trl, submitting after each round (no LLM)"
    kind = "reference"                     # reference | cli | custom
    command = ["{python}", "code/sft_train.py"]
    files = ["reference/common.py", "reference/sft_train.py"]   # copied into code/
    prompt_template = "..."                # rendered into {prompt} and prompt.md
    [env]
    SOME_VAR = "value"

An LLM agent system (a coding-agent CLI) adds how to install and find it, which provider API
it speaks and how its driver model, base URL and key are passed — all as data::

    install = "npm install -g @anthropic-ai/claude-code"   # the exact shell command
    binary = "claude"                      # looked up on PATH (or: module = "pkg")
    version_args = ["--version"]           # [] when asking for the version is not cheap
    tested_versions = ">=2.1,<2.2"         # PEP 440 range the adapter was tested with
    api = "anthropic"                      # anthropic | openai | gemini | any | none
    default_driver = "claude-sonnet-4-5"
    log_format = "claude-stream-json"      # agents/logs/ or an agent2rl.log_parsers entry point
    log_file = ""                          # a structured log the CLI writes (in workspace)
    command = ["claude", "-p", "{prompt}", "--model", "{driver}"]
    [env]
    ANTHROPIC_BASE_URL = "{anthropic_url}"
    ANTHROPIC_API_KEY = "{proxy_key}"
    [driver_format]                        # how {driver} is spelled, per driver API
    openai = "openai/{model}"
    [config_files]                         # written into the workspace before launch
    ".agent2rl/settings.json" = '{"model": "{driver}"}'

``tested_versions`` is the range of CLI versions whose flags, events and end-to-end run were
checked (PEP 440 specifiers; ``""``: none declared). ``agent2rl agents doctor`` warns when
the installed version is outside it; a run still starts (a newer CLI may well work).

An agent that turns on its provider's own tools (web search, URL fetches run by the
provider, past the run's deny lists) says so; its runs then allow them through the metering
proxy, each use recorded, and the run's identity says so (``provider_tools``)::

    provider_tools = true

A spec not yet shown to complete a real run here says so, and why; ``agent2rl agents`` shows
the note instead of "yes" and ``agent2rl run`` warns (but still runs it)::

    experimental = true
    experimental_note = "fails in the sandbox: ..."

Placeholders in ``command``, ``env`` and ``config_files`` values: ``{python}`` (the harness's
interpreter), ``{workspace}``, ``{prompt}`` (the rendered prompt), ``{prompt_file}``; and for
LLM agents (see :mod:`agent2rl.agents.launch`) ``{driver}`` (the driver model as this CLI
names it: ``driver_format[api]``, else the bare model), ``{model}`` (the bare model name),
``{api}``, ``{openai_url}``, ``{anthropic_url}``, ``{gemini_url}`` (the metering proxy's
endpoints), ``{base_url}`` (the proxy endpoint of the driver's API) and ``{proxy_key}`` (the
per-run key the proxy accepts; never the real key). Only these exact names are replaced, so
other braces (``{env:X}`` in an OpenCode config, ``{{task}}`` in a Jinja template) pass
through. Built-in specs live in ``agents/specs/``; ``--agent path/to/spec.toml`` runs any
other.
"""

from __future__ import annotations

import re
import sys
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from packaging.specifiers import InvalidSpecifier, SpecifierSet

from agent2rl.agents.logs import PARSERS
from agent2rl.errors import UserError
from agent2rl.metering import PROVIDERS
from agent2rl.registry import Registry

DEFAULT_PROMPT = """You are an ML engineer. Improve the base model on the task below within the
time budget, by training it (SFT, RL, ...) and submitting models to the grading service.

{description}

{instructions}

Time left: {time_left}. Workspace: {workspace}
"""


# Which provider API an agent's CLI speaks: one API, ``any`` (litellm-style agents that pick
# the API from the driver), or ``none`` (no LLM: reference and test agents).
APIS = ("anthropic", "openai", "gemini", "any", "none")
KINDS = ("reference", "cli", "custom")
# Every placeholder a spec may use: those every agent gets (:func:`base_values`), then the LLM
# ones; anything else in braces is left alone.
BASE_PLACEHOLDERS = ("python", "workspace", "prompt_file", "prompt")
_URLS = tuple(f"{name}_url" for name in PROVIDERS)  # openai_url, anthropic_url, gemini_url
PLACEHOLDERS = (*BASE_PLACEHOLDERS, "driver", "model", "api", *_URLS, "base_url", "proxy_key")
_PLACEHOLDER = re.compile(r"\{(" + "|".join(PLACEHOLDERS) + r")\}")


@dataclass(frozen=True)
class AgentSpec:
    """An agent: how to launch it and what to give it (see the module docstring)."""

    name: str
    description: str
    command: list[str]
    kind: str = "custom"
    env: dict[str, str] = field(default_factory=dict)
    files: list[str] = field(default_factory=list)
    prompt_template: str = DEFAULT_PROMPT
    source: Path | None = None
    install: str = ""
    binary: str = ""
    module: str = ""
    version_args: list[str] = field(default_factory=lambda: ["--version"])
    tested_versions: str = ""
    api: str = "none"
    default_driver: str = ""
    driver_format: dict[str, str] = field(default_factory=dict)
    log_format: str = "text"
    log_file: str = ""
    config_files: dict[str, str] = field(default_factory=dict)
    experimental: bool = False
    experimental_note: str = ""
    #: the agent turns on its provider's own tools (web search, URL fetches): its runs allow
    #: them through the metering proxy, recorded (agent2rl.metering.provider_tools)
    provider_tools: bool = False

    @property
    def uses_llm(self) -> bool:
        """Whether this agent needs a driver model (and so a metering proxy)."""
        return self.api != "none"

    def placeholders(self) -> set[str]:
        """The placeholder names used anywhere in command, env and config files."""
        texts = [*self.command, *self.env.values(), *self.config_files.values()]
        return {m.group(1) for t in texts for m in _PLACEHOLDER.finditer(t)}


def base_values(workspace: Path, prompt: str, prompt_file: Path) -> dict[str, str]:
    """The placeholder values every agent gets (no LLM ones)."""
    return {
        "python": sys.executable,
        "workspace": str(workspace),
        "prompt_file": str(prompt_file),
        "prompt": prompt,
    }


def fill(text: str, values: Mapping[str, str]) -> str:
    """Replace ``{name}`` for each known placeholder that has a value, in one pass (so a
    value that itself contains ``{workspace}``, e.g. a prompt, is never expanded again).
    Placeholders without a value and unknown braces are left as they are."""
    return _PLACEHOLDER.sub(lambda m: values.get(m.group(1), m.group(0)), text)


def load_spec(path: Path) -> AgentSpec:
    """Parse one spec file; a malformed one raises :class:`UserError` naming the problem: a
    file that cannot be read or is not UTF-8, bad TOML, a missing or unknown key, a value of
    the wrong type, a ``name`` that is not a plain name (:data:`NAME_PATTERN`: it becomes
    part of the run directory's name, so ``../x`` or ``a/b`` would put the run outside
    ``--runs-dir``)."""
    try:
        data = tomllib.loads(Path(path).read_bytes().decode("utf-8"))
    except UnicodeDecodeError as err:
        raise UserError(
            f"agent spec {path} is not UTF-8 text (byte {err.start}): save it as UTF-8"
        ) from None
    except (OSError, tomllib.TOMLDecodeError) as err:
        raise UserError(f"cannot read agent spec {path}: {err}") from None
    if missing := [k for k in ("name", "description", "command") if k not in data]:
        raise UserError(
            f"agent spec {path} lacks {', '.join(missing)}: see agents/specs/ for examples"
        )
    _check_types(path, data)
    cmd = data["command"]
    if not isinstance(cmd, list) or not cmd or not all(isinstance(c, str) for c in cmd):
        raise UserError(f"agent spec {path}: command must be a non-empty list of strings")
    known = set(AgentSpec.__dataclass_fields__) - {"source"}
    if unknown := set(data) - known:
        raise UserError(f"agent spec {path}: unknown keys {sorted(unknown)}")
    if not isinstance(data.get("experimental_note", ""), str):
        raise UserError(f"agent spec {path}: experimental_note must be a string")
    spec = AgentSpec(
        # text keys as written (types checked above); an absent key keeps AgentSpec's default
        **{k: data[k] for k in (*_TEXT_KEYS, *_TEXT_LIST_KEYS) if k in data},
        name=data["name"],
        command=cmd,
        env=_str_table(path, data, "env"),
        source=Path(path),
        tested_versions=data.get("tested_versions", "").strip(),
        driver_format=_str_table(path, data, "driver_format"),
        config_files=_str_table(path, data, "config_files"),
        # a string such as "false" is refused rather than read as truthy
        experimental=_flag(path, data, "experimental", " (a TOML boolean, unquoted)"),
        experimental_note=data.get("experimental_note", "").strip(),
        provider_tools=_flag(path, data, "provider_tools"),
    )
    _validate(path, spec)
    return spec


#: what an agent's ``name`` may be: it is part of every run directory's name
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
# keys whose value must be TOML text, and keys whose value must be a list of TOML texts
_TEXT_KEYS = (
    "description", "kind", "prompt_template", "install", "binary", "module", "api",
    "default_driver", "log_format", "log_file",
)  # fmt: skip
_TEXT_LIST_KEYS = ("files", "version_args")


def _check_types(path: Path, data: dict) -> None:
    """The keys' TOML types, the name's form and the ``tested_versions`` range (PEP 440),
    each with one message naming the fix."""
    name = data["name"]
    if not isinstance(name, str):
        raise UserError(f'agent spec {path}: name must be a string (name = "my-agent")')
    if not NAME_PATTERN.fullmatch(name) or ".." in name:
        raise UserError(
            f"agent spec {path}: name {name!r} must be 1-64 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit, without '..' (it names the run directories)"
        )
    for key in (*_TEXT_KEYS, "tested_versions"):
        if key in data and not isinstance(data[key], str):
            raise UserError(f"agent spec {path}: {key} must be a string, not {data[key]!r}")
    for key in _TEXT_LIST_KEYS:
        value = data.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise UserError(f"agent spec {path}: {key} must be a list of strings")
    tested = data.get("tested_versions", "").strip()
    try:
        SpecifierSet(tested)  # "" too: no range declared
    except InvalidSpecifier:
        raise UserError(
            f"agent spec {path}: tested_versions {tested!r} is not a version range: write PEP "
            'specifiers such as ">=0.169,<0.170"'
        ) from None


def _str_table(path: Path, data: dict, key: str) -> dict[str, str]:
    """A table of text values (numbers and booleans are written out as TOML has them)."""
    table = data.get(key, {})
    scalar = (str, int, float, bool)
    if not isinstance(table, dict) or not all(isinstance(v, scalar) for v in table.values()):
        raise UserError(f"agent spec {path}: [{key}] must be a table of strings")
    return {str(k): str(v) for k, v in table.items()}


def _flag(path: Path, data: dict, key: str, hint: str = "") -> bool:
    """A TOML boolean key (default false); anything else is a :class:`UserError`."""
    flag = data.get(key, False)
    if not isinstance(flag, bool):
        raise UserError(f"agent spec {path}: {key} must be true or false{hint}, not {flag!r}")
    return flag


def _validate(path: Path, spec: AgentSpec) -> None:
    """One clear message per mistake a spec author can make."""
    if spec.kind not in KINDS:
        raise UserError(f"agent spec {path}: kind must be one of {', '.join(KINDS)}")
    if spec.api not in APIS:
        raise UserError(f"agent spec {path}: api must be one of {', '.join(APIS)}")
    # PARSERS includes installed agent2rl.log_parsers entry points: a spec may name its own.
    if spec.log_format not in PARSERS:
        known = ", ".join(PARSERS.names())
        raise UserError(f"agent spec {path}: log_format must be one of {known}")
    # The note is what users see in place of "ready": an experimental agent must say why,
    # and a note on a non-experimental agent would be shown nowhere (a likely typo).
    if spec.experimental and not spec.experimental_note:
        raise UserError(
            f"agent spec {path}: experimental = true needs experimental_note saying why"
        )
    if spec.experimental_note and not spec.experimental:
        raise UserError(f"agent spec {path}: experimental_note is set but experimental is not")
    bad_formats = set(spec.driver_format) - {"anthropic", "openai", "openai-compatible", "gemini"}
    if bad_formats:
        raise UserError(
            f"agent spec {path}: driver_format keys must be anthropic, openai, "
            f"openai-compatible or gemini, not {sorted(bad_formats)}"
        )
    for rel in [*spec.config_files, *([spec.log_file] if spec.log_file else [])]:
        p = Path(rel)
        # Config files and logs live inside the workspace: the agent's sandbox sees only it.
        if p.is_absolute() or ".." in p.parts or not p.parts:
            raise UserError(
                f"agent spec {path}: {rel!r} must be a relative path inside the workspace"
            )
    if spec.api == "none":
        if llm := spec.placeholders() - set(BASE_PLACEHOLDERS):
            raise UserError(
                f"agent spec {path}: uses {', '.join(sorted(llm))} but has no api: "
                "set api = anthropic | openai | gemini | any"
            )
    elif not spec.default_driver:
        raise UserError(f"agent spec {path}: an LLM agent (api = {spec.api}) needs default_driver")


#: the agents by name: those shipped in ``agents/specs/`` (read when this module is
#: imported), then any an installed distribution adds through the ``agent2rl.agents`` entry
#: points (an :class:`AgentSpec`)
AGENTS: Registry[AgentSpec] = Registry("agents", "agent")
for _spec in sorted(
    (
        load_spec(Path(str(f)))
        for f in (resources.files("agent2rl.agents") / "specs").iterdir()
        if f.name.endswith(".toml")
    ),
    key=lambda s: s.name,
):
    AGENTS.register(_spec.name, _spec)


def get_agent(name_or_path: str) -> AgentSpec:
    """A registered agent by name, or a spec file by path (``.toml``); else
    :class:`UserError` listing the agents."""
    if name_or_path in AGENTS:
        return AGENTS[name_or_path]
    if name_or_path.endswith(".toml"):
        path = Path(name_or_path).expanduser()
        if not path.is_file():
            raise UserError(f"agent spec file {name_or_path} does not exist")
        return load_spec(path)
    raise UserError(f"{AGENTS.unknown_message(name_or_path)} or pass a spec file (.toml)")


def install_files(spec: AgentSpec, code_dir: Path) -> list[Path]:
    """Copy the spec's ``files`` (package resources under ``agents/``, or paths relative to
    the spec file) into the workspace's ``code/``; returns the copied paths."""
    out = []
    pkg = resources.files("agent2rl.agents")
    for rel in spec.files:
        src = pkg.joinpath(rel)
        if not src.is_file() and spec.source is not None:
            src = spec.source.parent / rel
        if not src.is_file():
            raise UserError(f"agent {spec.name}: file {rel} not found")
        dest = code_dir / Path(rel).name
        dest.write_bytes(src.read_bytes())
        out.append(dest)
    return out
