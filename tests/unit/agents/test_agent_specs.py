"""Agent specs as data: built-in specs, drivers, the launch behind the metering proxy, doctor.

No network and no LLM: launches are built, not run (the CLIs were checked by hand against the
scripted fake provider behind the real metering proxy; see the spec files' comments)."""

from __future__ import annotations

import json
import os
import re
import stat
import sys
from pathlib import Path

import pytest
import yaml
from support import AGENTS
from support.cli import run_cli

from agent2rl.agents import build_launch, driver_for, get_agent, load_spec
from agent2rl.agents.doctor import DOCTOR_COLUMNS, check_agent, doctor
from agent2rl.agents.drivers import COMPATIBLE_KEY_ENV, real_key, resolve_driver
from agent2rl.agents.launch import PROXIED_APIS, proxy_endpoints
from agent2rl.agents.logs import PARSERS
from agent2rl.agents.prompt import render_prompt
from agent2rl.agents.spec import AGENTS as REGISTERED
from agent2rl.agents.spec import PLACEHOLDERS, AgentSpec, fill
from agent2rl.errors import UserError

LLM_AGENTS = ("claude-code", "codex", "gemini-cli", "opencode", "openhands", "mini-swe-agent")
PROXY_URL = "http://127.0.0.1:43210"
PROXY_KEY = "a2r-proxy-0123456789abcdef"
REAL_KEYS = {
    "ANTHROPIC_API_KEY": "sk-ant-REAL-do-not-leak",
    "OPENAI_API_KEY": "sk-openai-REAL-do-not-leak",
    "GEMINI_API_KEY": "gemini-REAL-do-not-leak",
}
_LEFTOVER = re.compile(r"\{(" + "|".join(PLACEHOLDERS) + r")\}")


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "workspace"
    (ws / "code").mkdir(parents=True)
    (ws / "data").mkdir()
    (ws / "data" / "train.jsonl").write_text('{"question": "1+1?", "answer": "2"}\n')
    (ws / "description.md").write_text("# Arith\nAnswer arithmetic questions.\n")
    (ws / "instructions.md").write_text("Submit with POST /submit.\n")
    return ws


def _launch(spec: AgentSpec, ws: Path, driver_name: str | None = None, **kw):
    driver = driver_for(spec, driver_name)
    key = real_key(driver, REAL_KEYS)
    prompt = render_prompt(ws, "rl-oriented", 3600)
    return build_launch(
        spec,
        workspace=ws,
        prompt=prompt,
        prompt_file=ws / "prompt.md",
        driver=driver,
        proxy_url=PROXY_URL,
        proxy_key=PROXY_KEY,
        real_key=key,
        **kw,
    )


def _everything(launch) -> str:
    return "\n".join([*launch.argv, *launch.env.values(), *launch.files.values()])


# --------------------------------------------------------------------------------------------
# Specs


def test_every_builtin_spec_loads_and_is_complete() -> None:
    specs = REGISTERED
    assert {"reference-sft", "reference-grpo", *LLM_AGENTS} <= set(specs)
    for name in LLM_AGENTS:
        spec = specs[name]
        assert spec.kind == "cli" and spec.uses_llm
        assert spec.install and (spec.binary or spec.module)
        assert spec.log_format in PARSERS
        assert spec.command[0] == spec.binary
        # The default driver resolves and the CLI speaks its API.
        assert driver_for(spec).model
    assert not specs["reference-sft"].uses_llm


def test_reference_and_test_specs_still_load() -> None:
    for path in sorted(AGENTS.glob("*.toml")):
        spec = load_spec(path)
        assert spec.api == "none" and spec.log_format == "text"
    late = load_spec(AGENTS / "late.toml")
    launch = build_launch(late, workspace=Path("/ws"), prompt="p", prompt_file=Path("/ws/p.md"))
    assert launch.argv == [sys.executable, "code/late.py"] and launch.driver is None


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ('api = "cohere"', "api must be one of"),
        ('log_format = "xml"', "log_format must be one of"),
        ('kind = "robot"', "kind must be one of"),
        ('[config_files]\n"../x.json" = "{}"', "relative path inside the workspace"),
        ('log_file = "/tmp/x.log"', "relative path inside the workspace"),
        ('[env]\nKEY = "{proxy_key}"', "has no api"),
        ('api = "anthropic"', "needs default_driver"),
        ('api = "any"\ndefault_driver = "gpt-5"\n[driver_format]\nmistral = "m/{model}"', "keys"),
        ("colour = 3", "unknown keys"),
        ('experimental = "false"', "experimental must be true or false"),
        ("experimental = 1", "experimental must be true or false"),
        ("experimental = true", "needs experimental_note"),
        ('experimental = true\nexperimental_note = "  "', "needs experimental_note"),
        ('experimental_note = "why"', "experimental is not"),
        ("experimental = true\nexperimental_note = 3", "experimental_note must be a string"),
    ],
)
def test_bad_spec_is_one_clear_user_error(tmp_path: Path, extra: str, message: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(f'name = "x"\ndescription = "d"\ncommand = ["x"]\n{extra}\n')
    with pytest.raises(UserError, match=message):
        load_spec(path)


def test_experimental_flag_parses_and_defaults_off(tmp_path: Path) -> None:
    path = tmp_path / "exp.toml"
    path.write_text(
        'name = "x"\ndescription = "d"\ncommand = ["x"]\n'
        'experimental = true\nexperimental_note = " never run: no Docker "\n'
    )
    spec = load_spec(path)
    assert spec.experimental and spec.experimental_note == "never run: no Docker"
    specs = REGISTERED
    # OpenHands' 30-stage pipeline has not run whole here; the agents that have (the stock
    # OpenHands CLI among them, tests/e2e/test_openhands.py) are not flagged.
    oh = specs["openhands-paper"]
    assert oh.experimental and "30-stage pipeline" in oh.experimental_note
    for name in ("claude-code", "openhands", "mini-swe-agent", "reference-sft", "reference-grpo"):
        assert not specs[name].experimental and specs[name].experimental_note == ""


def test_fill_replaces_known_placeholders_once() -> None:
    values = {"workspace": "/ws", "prompt": "see {workspace} and {proxy_key}", "model": "m"}
    assert fill("{prompt}", values) == "see {workspace} and {proxy_key}"
    # Unknown braces survive: OpenCode's {env:X}, Jinja's {{task}}, JSON objects.
    assert fill('{"k": "{env:X}"} {{task}} {model}', values) == '{"k": "{env:X}"} {{task}} m'
    assert fill("{driver}", values) == "{driver}"  # no value: left for a later pass


# --------------------------------------------------------------------------------------------
# Drivers


@pytest.mark.parametrize(
    ("name", "api", "model", "key_env"),
    [
        ("claude-sonnet-4-5", "anthropic", "claude-sonnet-4-5", "ANTHROPIC_API_KEY"),
        ("claude-opus-4-1-20250805", "anthropic", "claude-opus-4-1-20250805", "ANTHROPIC_API_KEY"),
        ("gpt-5", "openai", "gpt-5", "OPENAI_API_KEY"),
        ("o3", "openai", "o3", "OPENAI_API_KEY"),
        ("o4-mini", "openai", "o4-mini", "OPENAI_API_KEY"),
        ("codex-mini-latest", "openai", "codex-mini-latest", "OPENAI_API_KEY"),
        ("gemini-2.5-pro", "gemini", "gemini-2.5-pro", "GEMINI_API_KEY"),
        ("anthropic/claude-haiku-4-5", "anthropic", "claude-haiku-4-5", "ANTHROPIC_API_KEY"),
        ("openai/gpt-4.1", "openai", "gpt-4.1", "OPENAI_API_KEY"),
        (" gemini/gemini-2.5-flash ", "gemini", "gemini-2.5-flash", "GEMINI_API_KEY"),
    ],
)
def test_driver_names_map_to_api_and_key(name: str, api: str, model: str, key_env: str) -> None:
    d = resolve_driver(name)
    assert (d.api, d.model, d.key_env, d.compatible) == (api, model, key_env, False)


def test_openai_compatible_driver_has_its_own_optional_key() -> None:
    d = resolve_driver("openai/Qwen/Qwen3-8B", base_url="http://gpu-box:8000/v1/")
    assert d.api == "openai" and d.compatible and d.format_key == "openai-compatible"
    assert d.model == "Qwen/Qwen3-8B" and d.base_url == "http://gpu-box:8000/v1"
    # Never the user's OpenAI key for another host; a local server may need none.
    assert d.key_env == COMPATIBLE_KEY_ENV
    assert real_key(d, {"OPENAI_API_KEY": "sk-x"}) == ""
    assert real_key(d, {COMPATIBLE_KEY_ENV: "tok"}) == "tok"


def test_gemini_key_may_come_from_google_api_key() -> None:
    assert real_key(resolve_driver("gemini-2.5-pro"), {"GOOGLE_API_KEY": "g"}) == "g"


@pytest.mark.parametrize("name", ["llama-3-70b", "", "mistral/large", "claude sonnet", "gpt-5;rm"])
def test_unknown_driver_form_is_a_user_error_listing_the_forms(name: str) -> None:
    with pytest.raises(UserError) as err:
        resolve_driver(name)
    msg = str(err.value)
    assert "unknown driver" in msg and "claude-*" in msg and "--driver-base-url" in msg
    assert "\n" not in msg


@pytest.mark.parametrize(
    ("name", "url", "message"),
    [("gpt-5", "http://h/v1", "openai/<model>"), ("openai/m", "ftp://h", "http")],
)
def test_bad_driver_base_url_is_a_user_error(name: str, url: str, message: str) -> None:
    with pytest.raises(UserError, match=message):
        resolve_driver(name, base_url=url)


def test_missing_real_key_is_one_clear_user_error() -> None:
    driver = driver_for(get_agent("claude-code"), "claude-sonnet-4-5")
    with pytest.raises(UserError) as err:
        real_key(driver, {"OPENAI_API_KEY": "sk-other"})
    msg = str(err.value)
    assert "export ANTHROPIC_API_KEY=" in msg and "\n" not in msg
    with pytest.raises(UserError, match=r"GEMINI_API_KEY=\.\.\. \(or GOOGLE_API_KEY\)"):
        real_key(resolve_driver("gemini-2.5-pro"), {})


def test_agent_and_driver_api_must_match() -> None:
    with pytest.raises(UserError, match="speaks the anthropic API"):
        driver_for(get_agent("claude-code"), "gpt-5")
    with pytest.raises(UserError, match="uses no LLM"):
        driver_for(get_agent("reference-sft"), "gpt-5")
    # litellm-style agents take any API.
    assert driver_for(get_agent("mini-swe-agent"), "gpt-5").api == "openai"


# --------------------------------------------------------------------------------------------
# Launch


def test_claude_code_launch_goes_through_the_proxy_with_the_proxy_key(workspace: Path) -> None:
    launch = _launch(get_agent("claude-code"), workspace, "claude-sonnet-4-5")
    argv, env = launch.argv, launch.env
    assert argv[:2] == ["claude", "-p"]
    assert argv[argv.index("--model") + 1] == "claude-sonnet-4-5"
    assert argv[argv.index("--output-format") + 1] == "stream-json"
    assert "--dangerously-skip-permissions" in argv and "--verbose" in argv
    prompt = argv[2]
    assert "Answer arithmetic questions." in prompt and "GRPO" in prompt  # rl-oriented
    assert env["ANTHROPIC_BASE_URL"] == f"{PROXY_URL}/anthropic"
    assert env["ANTHROPIC_API_KEY"] == PROXY_KEY
    everything = _everything(launch)
    assert all(key not in everything for key in REAL_KEYS.values())
    assert launch.driver is not None and launch.driver.api == "anthropic"


@pytest.mark.parametrize("name", LLM_AGENTS)
def test_every_llm_launch_is_fully_filled_and_never_holds_a_real_key(
    workspace: Path, name: str
) -> None:
    spec = get_agent(name)
    launch = _launch(spec, workspace)
    everything = _everything(launch)
    assert not _LEFTOVER.search("\n".join([*launch.env.values(), *launch.files.values()]))
    assert not any(_LEFTOVER.fullmatch(a) for a in launch.argv)
    assert PROXY_KEY in everything
    assert all(key not in everything for key in REAL_KEYS.values())
    assert PROXY_URL in everything
    for path, text in launch.files.items():
        assert path.is_relative_to(workspace)
        if path.suffix == ".json":
            json.loads(text)
        elif path.suffix in (".yaml", ".yml"):
            assert isinstance(yaml.safe_load(text), dict)
    if spec.log_file:
        assert launch.log_path == workspace / spec.log_file


def test_driver_is_spelled_the_way_each_cli_wants(workspace: Path) -> None:
    def flag(launch, name: str) -> str:
        return launch.argv[launch.argv.index(name) + 1]

    assert flag(_launch(get_agent("codex"), workspace, "gpt-5"), "--model") == "gpt-5"
    mini = _launch(get_agent("mini-swe-agent"), workspace, "claude-sonnet-4-5")
    assert flag(mini, "--model") == "anthropic/claude-sonnet-4-5"
    assert mini.env["ANTHROPIC_BASE_URL"] == f"{PROXY_URL}/anthropic"
    assert mini.env["OPENAI_BASE_URL"] == f"{PROXY_URL}/openai/v1"
    oh = _launch(get_agent("openhands"), workspace, "gpt-5")
    assert oh.env["LLM_MODEL"] == "openai/gpt-5"
    assert oh.env["LLM_BASE_URL"] == f"{PROXY_URL}/openai/v1"
    assert oh.env["LLM_API_KEY"] == PROXY_KEY
    codex = _launch(get_agent("codex"), workspace)
    assert f"model_providers.agent2rl.base_url={PROXY_URL}/openai/v1" in codex.argv


def test_opencode_config_routes_an_openai_compatible_driver(workspace: Path) -> None:
    spec = get_agent("opencode")
    driver = driver_for(spec, "openai/qwen3-coder", "http://127.0.0.1:8000/v1")
    launch = build_launch(
        spec,
        workspace=workspace,
        prompt="do it",
        prompt_file=workspace / "prompt.md",
        driver=driver,
        proxy_url=PROXY_URL + "/",
        proxy_key=PROXY_KEY,
    )
    assert launch.argv[launch.argv.index("--model") + 1] == "agent2rl/qwen3-coder"
    written = launch.write_files()
    config = json.loads(written[0].read_text())
    provider = config["provider"]["agent2rl"]
    assert provider["options"] == {"baseURL": f"{PROXY_URL}/openai/v1", "apiKey": PROXY_KEY}
    assert "qwen3-coder" in provider["models"]
    assert config["provider"]["anthropic"]["options"]["baseURL"] == f"{PROXY_URL}/anthropic/v1"
    assert launch.env["OPENCODE_CONFIG"] == str(written[0])


def test_gemini_cli_launch_goes_through_the_proxy(workspace: Path) -> None:
    spec = get_agent("gemini-cli")
    assert "gemini" in PROXIED_APIS
    launch = _launch(spec, workspace)
    assert launch.driver is not None and launch.driver.api == "gemini"
    assert launch.argv[launch.argv.index("--model") + 1] == "gemini-2.5-pro"
    assert launch.env["GOOGLE_GEMINI_BASE_URL"] == f"{PROXY_URL}/gemini"
    assert launch.env["GEMINI_API_KEY"] == PROXY_KEY
    settings = json.loads(launch.files[workspace / ".agent2rl/gemini/.gemini/settings.json"])
    assert settings["security"]["auth"]["selectedType"] == "gemini-api-key"
    assert launch.env["GEMINI_CLI_HOME"] == str(workspace / ".agent2rl/gemini")
    assert all(key not in _everything(launch) for key in REAL_KEYS.values())
    # An API the proxy does not relay is still refused.
    with pytest.raises(UserError, match="does not relay the gemini API"):
        _launch(spec, workspace, proxied_apis={"anthropic", "openai"})


def test_a_spec_that_would_leak_the_real_key_is_refused(workspace: Path) -> None:
    leaky = AgentSpec(
        name="leaky",
        description="d",
        command=["x", "{model}"],
        api="anthropic",
        default_driver="claude-sonnet-4-5",
        env={"KEY": "sk-ant-REAL-do-not-leak"},
    )
    with pytest.raises(RuntimeError, match="real key"):
        _launch(leaky, workspace)


def test_reference_agent_launch_needs_no_driver(workspace: Path) -> None:
    launch = build_launch(
        get_agent("reference-sft"), workspace=workspace, prompt="p", prompt_file=workspace / "p"
    )
    assert launch.argv == [sys.executable, "code/sft_train.py"]
    assert launch.driver is None and launch.files == {}


def test_llm_launch_needs_a_driver(workspace: Path) -> None:
    with pytest.raises(UserError, match="needs a driver"):
        build_launch(get_agent("codex"), workspace=workspace, prompt="p", prompt_file=workspace)


def test_proxy_endpoints() -> None:
    assert proxy_endpoints("http://127.0.0.1:9/") == {
        "openai_url": "http://127.0.0.1:9/openai/v1",
        "anthropic_url": "http://127.0.0.1:9/anthropic",
        "gemini_url": "http://127.0.0.1:9/gemini",
    }


# --------------------------------------------------------------------------------------------
# Doctor


def _fake_binary(folder: Path, name: str, output: str) -> None:
    path = folder / name
    path.write_text(f"#!/bin/sh\necho '{output}'\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def test_doctor_reports_installed_version_and_key(tmp_path: Path) -> None:
    _fake_binary(tmp_path, "claude", "2.1.197 (Claude Code)")
    env = {"PATH": str(tmp_path), "ANTHROPIC_API_KEY": "sk"}
    row = check_agent(get_agent("claude-code"), env)
    assert row.installed and row.location == str(tmp_path / "claude")
    assert row.version == "2.1.197"
    assert row.configured and row.key_env == "ANTHROPIC_API_KEY" and row.ok
    assert row.readiness() == "yes"
    assert row.cells() == (
        "claude-code",
        "yes",
        "yes",
        "2.1.197",
        ">=2.1,<2.2",
        "claude-sonnet-4-5",
        "ANTHROPIC_API_KEY set",
        "",
    )
    assert len(row.cells()) == len(DOCTOR_COLUMNS)


def test_doctor_names_the_install_command_and_the_missing_key(tmp_path: Path) -> None:
    rows = {r.agent: r for r in doctor(environ={"PATH": str(tmp_path)})}
    assert set(LLM_AGENTS) <= set(rows)
    codex = rows["codex"]
    assert not codex.installed and not codex.configured and not codex.ok
    assert codex.cells()[-1] == "npm install -g @openai/codex@~0.169.0"
    assert codex.cells()[DOCTOR_COLUMNS.index("key")] == "OPENAI_API_KEY missing"
    assert codex.cells()[DOCTOR_COLUMNS.index("ready")] == "no"
    assert rows["openhands"].install.startswith("uv tool install openhands")
    gemini = rows["gemini-cli"]
    assert gemini.note == "" and gemini.key_env == "GEMINI_API_KEY" and not gemini.configured
    ref = rows["reference-sft"]
    assert ref.installed and ref.configured and ref.ok and ref.key_env == ""


def test_doctor_skips_versions_when_asked(tmp_path: Path) -> None:
    _fake_binary(tmp_path, "codex", "codex-cli 0.169.0")
    row = check_agent(get_agent("codex"), {"PATH": str(tmp_path)}, versions=False)
    assert row.installed and row.version == ""
    assert os.access(tmp_path / "codex", os.X_OK)


def test_doctor_shows_an_experimental_agent_whether_installed_or_not(tmp_path: Path) -> None:
    spec = get_agent("openhands-paper")
    flag = f"experimental: {spec.experimental_note}"
    missing = check_agent(spec, {"PATH": str(tmp_path)}, versions=False)
    assert not missing.ok and missing.readiness() == f"no; {flag}"
    _fake_binary(tmp_path, "openhands", "OpenHands CLI 1.16.0")
    ready = check_agent(spec, {"PATH": str(tmp_path), "ANTHROPIC_API_KEY": "sk"})
    # Installed and configured: it may well run, but the listing must not say a bare "yes".
    assert ready.ok and ready.experimental == spec.experimental_note
    assert ready.cells()[:3] == ("openhands-paper", flag, "yes")


# --------------------------------------------------------------------------------------------
# The CLI: `agents` listing and the warning of `run`


def _cli_env(tmp_path: Path) -> dict[str, str]:
    """This process's environment without provider keys (so no agent is configured and a
    run stops at the key check, before anything is written)."""
    env = {k: v for k, v in os.environ.items() if k not in REAL_KEYS}
    return {**env, "COLUMNS": "200", "AGENT2RL_HOME": str(tmp_path / "home")}


def _table(stdout: str) -> dict[str, list[str]]:
    """A rich table's rows by first cell, each cell's wrapped lines joined with a space."""
    rows: dict[str, list[str]] = {}
    last: list[str] = []
    for line in stdout.splitlines():
        if not line.startswith("│"):
            continue
        cells = [c.strip() for c in line.strip("│").split("│")]
        if cells[0]:
            last = rows.setdefault(cells[0], cells)
        else:  # a continuation line of the row above
            for i, c in enumerate(cells):
                last[i] = f"{last[i]} {c}".strip()
    return rows


def test_agents_listing_shows_the_experimental_note(tmp_path: Path) -> None:
    r = run_cli(["agents"], env=_cli_env(tmp_path), timeout=120)
    assert r.returncode == 0, r.stderr
    ready = {name: cells[2] for name, cells in _table(r.stdout).items()}
    note = get_agent("openhands-paper").experimental_note
    assert ready["openhands-paper"] == f"no; experimental: {note} (see `agent2rl agents doctor`)"
    assert ready["claude-code"] == "no (see `agent2rl agents doctor`)"
    assert ready["reference-sft"] == "yes"


def test_agents_doctor_shows_the_experimental_note(tmp_path: Path) -> None:
    r = run_cli(["agents", "doctor"], env=_cli_env(tmp_path), timeout=120)
    assert r.returncode == 0, r.stderr
    rows = _table(r.stdout)
    note = get_agent("openhands-paper").experimental_note
    assert rows["openhands-paper"][DOCTOR_COLUMNS.index("ready")] == f"no; experimental: {note}"
    assert rows["reference-sft"][DOCTOR_COLUMNS.index("ready")] == "yes"


def test_run_warns_once_about_an_experimental_agent_and_goes_on(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    args = ["run", "--task", "arith-lite", "--runs-dir", str(runs), "--agent"]
    r = run_cli([*args, "openhands-paper"], env=_cli_env(tmp_path), timeout=120)
    warnings = [line for line in r.stderr.splitlines() if line.startswith("warning:")]
    note = get_agent("openhands-paper").experimental_note
    assert warnings == [f"warning: agent openhands-paper is experimental ({note})"], r.stderr
    # The run went on past the warning to its own checks: here, the missing driver key.
    assert r.returncode == 2 and "export ANTHROPIC_API_KEY=" in r.stderr, r.stderr
    assert not runs.exists()
    plain = run_cli([*args, "claude-code"], env=_cli_env(tmp_path), timeout=120)
    assert plain.returncode == 2 and "warning:" not in plain.stderr, plain.stderr
