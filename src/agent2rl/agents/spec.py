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

Placeholders in ``command`` and ``env`` values: ``{python}`` (the harness's interpreter),
``{workspace}``, ``{prompt}`` (the rendered prompt), ``{prompt_file}``. Built-in specs live in
``agents/specs/``; ``--agent path/to/spec.toml`` runs any other.
"""

from __future__ import annotations

import sys
import tomllib
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from agent2rl.errors import UserError

DEFAULT_PROMPT = """You are an ML engineer. Improve the base model on the task below within the
time budget, by training it (SFT, RL, ...) and submitting models to the grading service.

{description}

{instructions}

Time left: {time_left}. Workspace: {workspace}
"""


@dataclass(frozen=True)
class AgentSpec:
    """An agent: how to launch it and what to give it."""

    name: str
    description: str
    command: list[str]
    kind: str = "custom"
    env: dict[str, str] = field(default_factory=dict)
    files: list[str] = field(default_factory=list)
    prompt_template: str = DEFAULT_PROMPT
    source: Path | None = None

    def render_command(self, workspace: Path, prompt: str, prompt_file: Path) -> list[str]:
        return [_fill(arg, workspace, prompt, prompt_file) for arg in self.command]

    def render_env(self, workspace: Path, prompt: str, prompt_file: Path) -> dict[str, str]:
        return {k: _fill(v, workspace, prompt, prompt_file) for k, v in self.env.items()}


def _fill(text: str, workspace: Path, prompt: str, prompt_file: Path) -> str:
    return (
        text.replace("{python}", sys.executable)
        .replace("{workspace}", str(workspace))
        .replace("{prompt_file}", str(prompt_file))
        .replace("{prompt}", prompt)
    )


def load_spec(path: Path) -> AgentSpec:
    """Parse one spec file; a malformed one raises :class:`UserError` naming the problem."""
    try:
        data = tomllib.loads(Path(path).read_text())
    except (OSError, tomllib.TOMLDecodeError) as err:
        raise UserError(f"cannot read agent spec {path}: {err}") from None
    missing = [k for k in ("name", "description", "command") if k not in data]
    if missing:
        raise UserError(
            f"agent spec {path} lacks {', '.join(missing)}: see agents/specs/ for examples"
        )
    cmd = data["command"]
    if not isinstance(cmd, list) or not cmd or not all(isinstance(c, str) for c in cmd):
        raise UserError(f"agent spec {path}: command must be a non-empty list of strings")
    known = {"name", "description", "command", "kind", "env", "files", "prompt_template"}
    unknown = set(data) - known
    if unknown:
        raise UserError(f"agent spec {path}: unknown keys {sorted(unknown)}")
    return AgentSpec(
        name=data["name"],
        description=data["description"],
        command=cmd,
        kind=data.get("kind", "custom"),
        env={k: str(v) for k, v in data.get("env", {}).items()},
        files=list(data.get("files", [])),
        prompt_template=data.get("prompt_template", DEFAULT_PROMPT),
        source=Path(path),
    )


def builtin_specs() -> dict[str, AgentSpec]:
    """The agents shipped in ``agents/specs/``, by name."""
    folder = resources.files("agent2rl.agents") / "specs"
    specs = [load_spec(Path(str(f))) for f in folder.iterdir() if f.name.endswith(".toml")]
    return {s.name: s for s in sorted(specs, key=lambda s: s.name)}


def get_agent(name_or_path: str) -> AgentSpec:
    """A built-in agent by name, or a spec file by path; else :class:`UserError`."""
    specs = builtin_specs()
    if name_or_path in specs:
        return specs[name_or_path]
    if name_or_path.endswith(".toml"):
        path = Path(name_or_path).expanduser()
        if not path.is_file():
            raise UserError(f"agent spec file {name_or_path} does not exist")
        return load_spec(path)
    raise UserError(
        f"unknown agent {name_or_path!r}: choose one of {', '.join(specs)} or pass "
        "a spec file (.toml)"
    )


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
