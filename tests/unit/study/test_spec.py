"""Study files: parsing, expansion into slots, and the checks made before any run."""

from __future__ import annotations

import pytest
from support import AGENTS

from agent2rl.errors import UserError
from agent2rl.study.spec import expand, load_study, validate

#: a valid study's first lines (a budget still to add)
HEAD = 'name = "x"\ntasks = ["arith-lite"]\n'
SFT = HEAD + 'agents = ["reference-sft"]\n'


def write(tmp_path, text: str):
    path = tmp_path / "study.toml"
    path.write_text(text)
    return path


def test_issue_example_expands(tmp_path) -> None:
    spec = load_study(
        write(
            tmp_path,
            """
name = "modes-x-tasks"
tasks = ["arith-lite", "alfworld-lite"]
agents = ["reference-sft", "reference-grpo"]
models = ["tiny"]
drivers = []
modes = ["free"]
repeats = 3
budget = "3m"
[task_options."alfworld-lite"]
n_train = 60
show_admissible = true
""",
        )
    )
    assert spec.budget_s == 180
    assert spec.options_for("alfworld-lite") == {"n_train": "60", "show_admissible": "true"}
    slots = validate(spec)
    assert len(slots) == 2 * 2 * 3
    assert slots[0].key == "arith-lite/tiny/reference-sft/-/-#r0"
    assert [s.seed for s in slots[:3]] == [0, 1, 2]
    assert slots[0].driver is None and slots[0].mode is None  # no LLM: no driver, no mode
    assert len({s.key for s in slots}) == len(slots)


def test_llm_agents_get_drivers_x_modes(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    spec = load_study(
        write(
            tmp_path,
            'name = "m"\ntasks = ["arith-lite"]\nagents = ["claude-code", "reference-sft"]\n'
            'drivers = ["claude-sonnet-4-5"]\nmodes = ["free", "sft-only"]\nbudget = "1h"\n',
        )
    )
    slots = validate(spec)
    assert [(s.agent, s.mode) for s in slots] == [
        ("claude-code", "free"),
        ("claude-code", "sft-only"),
        ("reference-sft", None),
    ]
    assert slots[0].label == "arith-lite claude-code claude-sonnet-4-5 free r0"


def test_agent_spec_paths_are_made_absolute(tmp_path) -> None:
    (tmp_path / "agents").mkdir()
    (tmp_path / "agents" / "quick.toml").write_text((AGENTS / "quick.toml").read_text())
    (tmp_path / "agents" / "quick.py").write_text((AGENTS / "quick.py").read_text())
    spec = load_study(
        write(
            tmp_path,
            HEAD + 'agents = ["agents/quick.toml"]\nbudget = "1m"\n',
        )
    )
    assert spec.agents == [str(tmp_path / "agents" / "quick.toml")]
    assert validate(spec)[0].label == "arith-lite quick r0"


@pytest.mark.parametrize(
    "text, message",
    [
        (SFT, "budget"),
        (
            SFT + 'budget = "3m"\nrepeat = 2\n',
            "repeat",
        ),
        (
            SFT + 'budget = "soon"\n',
            "duration",
        ),
        (
            'name = "x"\ntasks = ["nope"]\nagents = ["reference-sft"]\nbudget = "3m"\n',
            "unknown task",
        ),
        (HEAD + 'agents = ["nope"]\nbudget = "3m"\n', "nope"),
        (
            SFT + 'modes = ["lazy"]\nbudget = "3m"\n',
            "unknown mode",
        ),
        (
            'tasks = ["arith-lite", "arith-lite"]\nagents = ["reference-sft"]\n'
            'budget = "3m"\nname = "x"\n',
            "twice",
        ),
        (
            SFT + 'budget = "3m"\n[task_options.gsm8k]\nbatch_size = 2\n',
            "not in tasks",
        ),
        (
            SFT + 'budget = "3m"\n[task_options.arith-lite]\nbogus = 1\n',
            "bogus",
        ),
        ("name = [", "not valid TOML"),
    ],
)
def test_mistakes_are_one_clear_error(tmp_path, text, message) -> None:
    with pytest.raises(UserError, match=message):
        validate(load_study(write(tmp_path, text)))


def test_missing_file(tmp_path) -> None:
    with pytest.raises(UserError, match="no study file"):
        load_study(tmp_path / "absent.toml")


def test_settings_hash_ignores_the_matrix(tmp_path) -> None:
    a = load_study(
        write(
            tmp_path,
            SFT + 'budget = "3m"\n',
        )
    )
    b = load_study(
        write(
            tmp_path,
            HEAD + 'agents = ["reference-sft", "reference-grpo"]\nrepeats = 5\nbudget = "3m"\n',
        )
    )
    c = load_study(
        write(
            tmp_path,
            SFT + 'budget = "4m"\n',
        )
    )
    assert a.settings_hash() == b.settings_hash() != c.settings_hash()
    assert len(expand(b)) == 10


def test_protocol_feedback_instructions_and_provider_tools_reach_each_run(tmp_path) -> None:
    """A study sets the grader's decoding protocol, the feedback protocol and the agent's
    instructions for every run; a study directory made before these keys existed keeps its
    settings hash (its value pinned here from the code before them), and a study using them
    gets another hash (runs under other protocols are not comparable)."""
    from agent2rl.study.executor import _request

    plain = load_study(write(tmp_path, SFT + 'budget = "3m"\n'))
    assert plain.settings_hash() == "2611d080badb52e9"
    spec = load_study(
        write(
            tmp_path,
            SFT + 'budget = "3m"\nprotocol = "reference"\nfeedback = "validation"\n'
            'instructions = "reference"\nallow_provider_tools = true\n',
        )
    )
    assert spec.settings_hash() != plain.settings_hash()
    request = _request(spec, expand(spec)[0], tmp_path, 0.0)["request"]
    assert (request["protocol"], request["feedback"], request["instructions"]) == (
        "reference",
        "validation",
        "reference",
    )
    assert request["allow_provider_tools"] is True  # as --allow-provider-tools
    assert spec.run_settings()["allow_provider_tools"] is True  # part of the settings hash
    with pytest.raises(UserError, match="feedback"):
        load_study(write(tmp_path, SFT + 'budget = "3m"\nfeedback = "private-split"\n'))
