"""The episode-protocol core (agent2rl.tasks.shared.protocol_core) and the workspace copies
built on it.

Each task's ``protocol.py`` imports the core from the package inside agent2rl and from beside
itself in the workspace. These tests copy exactly the files a task ships
(``InteractiveTask.workspace_files``) into an empty directory, play the same states through
that copy in a clean interpreter with no site-packages (``python -I -S``: the standard
library alone, so neither agent2rl nor any third-party package can be reached) and check it
builds, parses and splits byte for byte what the package's module does. The prompts
themselves are pinned by the tasks' own tests (test_alfworld_react.py, test_webshop_*.py,
test_deepsearch*.py).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

from agent2rl.tasks.alfworld import AlfworldLite
from agent2rl.tasks.alfworld import protocol as alfworld_protocol
from agent2rl.tasks.deepsearch import DeepsearchLite
from agent2rl.tasks.deepsearch import protocol as deepsearch_protocol
from agent2rl.tasks.shared import protocol_core
from agent2rl.tasks.webshop import WebshopLite
from agent2rl.tasks.webshop import protocol as webshop_protocol

_LONG = "word " * 60
_STEPS = [
    ("You are in the middle of a room.\nLooking around you see a desk 1.", "go to desk 1"),
    ("You arrive at loc 3. On the desk 1, you see a pen 1.", "think: the pen is here"),
    (
        "WebShop [SEP] Instruction: [SEP] buy soap [SEP] Back to Search [SEP] B0X [SEP] " + _LONG,
        "click[b0x]",
    ),
]
_ADMISSIBLE = ["search[query]", "click[b0x]", "help", "take pen 1 from desk 1"]
_REPLIES = [
    "",
    "  \n> Take Pen 1 From Desk 1.\nmore",
    "Action 3: choose[B0X] extra",
    "Thought: look it up\nAction: search[ Amber Loom ]\nObservation: x",
    "answer[Ama Kell, Bo Rinn",
]
# (task, module, the settings each case overrides)
_CASES: list[tuple[type, ModuleType, list[dict[str, Any]]]] = [
    (
        AlfworldLite,
        alfworld_protocol,
        [
            {"protocol": "transcript", "history": 2, "max_prompt_chars": 10_000},
            {"protocol": "transcript", "history": 3, "max_prompt_chars": 150},
            {
                "protocol": "transcript",
                "history": 0,
                "max_prompt_chars": 0,
                "show_admissible": False,
            },
            {"protocol": "react", "history": 0, "max_prompt_chars": 0},
        ],
    ),
    (
        WebshopLite,
        webshop_protocol,
        [
            {
                "protocol": "transcript",
                "history": 2,
                "max_prompt_chars": 10_000,
                "max_observation_chars": 40,
                "separator": " | ",
            },
            {"protocol": "transcript", "history": 3, "max_prompt_chars": 120},
            {"protocol": "react", "history": 5, "max_prompt_chars": 0, "max_observation_chars": 2},
            {"protocol": "react", "history": 2, "max_prompt_chars": 900},
        ],
    ),
    (
        DeepsearchLite,
        deepsearch_protocol,
        [
            {
                "protocol": "transcript",
                "history": 2,
                "max_prompt_chars": 10_000,
                "max_observation_chars": 30,
            },
            {"protocol": "transcript", "history": 5, "max_prompt_chars": 100},
            {"protocol": "react", "history": 6, "max_prompt_chars": 0},
            {"protocol": "react", "history": 6, "max_prompt_chars": 700},
        ],
    ),
]

# Runs in the clean interpreter: imports the workspace's protocol.py as the agent's training
# code does (its directory on sys.path) and prints what it builds for every case.
_PLAY = """
import json, sys
from types import SimpleNamespace
cases = json.loads(sys.stdin.read())
sys.path.insert(0, cases.pop("dir"))
import protocol
print(json.dumps({
    "results": [play(protocol, c) for c in cases["cases"]],
    "modules": sorted(m for m in sys.modules if m.split(".")[0] in ("agent2rl", "pytest")),
    "core_file": protocol.core.__file__,
}))
"""


def play(proto: ModuleType, case: dict[str, Any]) -> dict[str, Any]:
    """What ``proto`` builds for one case: the format's JSON, the grader's prompt and chat
    message at every step of the episode, each reply parsed, and the transcript split."""
    base = {"max_steps": 7, "max_new_tokens": 9}
    fmt = proto.EpisodeFormat.from_dict({**base, **case["settings"]})
    out: dict[str, Any] = {"settings": fmt.to_dict(), "prompts": [], "parsed": []}
    steps = [tuple(s) for s in case["steps"]]
    for t in range(len(steps) + 1):
        state = SimpleNamespace(
            goal=case["goal"],
            steps=steps[:t],
            observation=steps[t][0] if t < len(steps) else "The last page.",
            admissible=case["admissible"],
            group=case["group"],
        )
        out["prompts"].append([fmt.prompt(state), fmt.chat_message(state)])
        out["parsed"].append([fmt.parse(r, state) for r in case["replies"]])
    out["transcript"] = proto.transcript(case["goal"], steps)
    out["completion"] = proto.completion_for("look")
    return out


def _cases(settings: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {
            "settings": s,
            "goal": "put a pen on the desk\nAnswer type: Set Answer",
            "steps": _STEPS,
            "admissible": _ADMISSIBLE,
            "group": "pick_and_place_simple",
            "replies": _REPLIES,
        }
        for s in settings
    ]


def _workspace(tmp_path: Path, task_cls: type) -> Path:
    """A directory holding exactly the files the task ships into ``data/``."""
    data = tmp_path / "data"
    data.mkdir()
    files = task_cls.workspace_files(task_cls.__new__(task_cls))
    for name, source in files.items():
        shutil.copyfile(source, data / name)
    return data


@pytest.mark.parametrize(
    ("task_cls", "module", "settings"), _CASES, ids=["alfworld", "webshop", "deepsearch"]
)
def test_workspace_copy_runs_standalone_and_matches_the_package(
    tmp_path: Path, task_cls: type, module: ModuleType, settings: list[dict[str, Any]]
) -> None:
    data = _workspace(tmp_path, task_cls)
    assert {"protocol.py", "protocol_core.py"} <= {p.name for p in data.iterdir()}
    cases = _cases(settings)
    source = "import json, sys\n" + _source_of_play() + _PLAY
    proc = subprocess.run(
        [sys.executable, "-I", "-S", "-c", source],
        input=json.dumps({"dir": str(data), "cases": cases}),
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    # the standard library alone: nothing of agent2rl (nor of any site-packages) was reached
    assert got["modules"] == []
    assert Path(got["core_file"]).resolve() == (data / "protocol_core.py").resolve()
    want = json.loads(json.dumps([play(module, c) for c in cases]))
    assert got["results"] == want


def test_workspace_copy_loads_by_path_without_its_directory_on_sys_path(tmp_path: Path) -> None:
    """Training code may load ``data/protocol.py`` by file path (importlib's recipe)
    rather than through sys.path; it still finds the core beside it."""
    data = _workspace(tmp_path, WebshopLite)
    path = str(data / "protocol.py")
    code = (
        "import importlib.util, sys\n"
        f"spec = importlib.util.spec_from_file_location('protocol', {path!r})\n"
        "m = sys.modules['protocol'] = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(m)\n"
        "print(m.parse_action('Action: Click[B0X] now'), m.core.__name__)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-I", "-S", "-c", code],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["click[b0x]", "protocol_core"]


def test_core_is_standard_library_only() -> None:
    """The core imports nothing outside the standard library (it is copied alone beside the
    task's protocol file), and every task's protocol is built on it."""
    text = Path(protocol_core.__file__).read_text()
    imports = {
        line.split()[1].split(".")[0]
        for line in text.splitlines()
        if line.startswith(("import ", "from "))
    }
    assert imports <= set(sys.stdlib_module_names) | {"__future__"}, imports
    for module in (alfworld_protocol, webshop_protocol, deepsearch_protocol):
        assert module.core is protocol_core
        assert issubclass(module.EpisodeFormat, protocol_core.FormatBase)


def test_render_history_trims_the_oldest_steps_to_fit() -> None:
    steps = [("first page", "a1"), ("second page", "a2"), ("third page", "a3")]
    full = protocol_core.render_history("H\n", steps, "now\n", 3, 1_000, str.upper)
    assert full == "H\nFIRST PAGE\n> a1\nSECOND PAGE\n> a2\nTHIRD PAGE\n> a3\nnow\n"
    # the limit counts the final ">": the text that fits it exactly keeps its steps
    assert protocol_core.render_history("H\n", steps, "now\n", 3, len(full) + 1, str.upper) == full
    trimmed = protocol_core.render_history("H\n", steps, "now\n", 3, len(full), str.upper)
    assert trimmed == "H\nSECOND PAGE\n> a2\nTHIRD PAGE\n> a3\nnow\n"
    # head and tail always stay, even over the limit; history 0 or a 0 limit shows no step
    assert protocol_core.render_history("H\n", steps, "now\n", 3, 1, str.upper) == "H\nnow\n"
    assert protocol_core.render_history("H\n", steps, "now\n", 0, 1_000, str) == "H\nnow\n"
    assert protocol_core.render_history("H\n", steps, "now\n", 1, 1_000, str) == (
        "H\nthird page\n> a3\nnow\n"
    )


def test_trim_oldest_and_text_rules() -> None:
    assert protocol_core.trim_oldest("h", ["1", "22", "333"], "t", 0) == "h122333t"
    assert protocol_core.trim_oldest("h", ["1", "22", "333"], "t", 5) == "h333t"
    assert protocol_core.trim_oldest("h", ["1", "22"], "t", 1) == "ht"
    assert protocol_core.cut("abcdefgh", 0) == "abcdefgh"
    assert protocol_core.cut("abcdefgh", 8) == "abcdefgh"
    assert protocol_core.cut("abc  defgh", 7) == "abc..."
    assert protocol_core.cut("abcdefgh", 2) == "..."
    assert protocol_core.first_line(" \n\t\n  x y \nz") == "x y"
    assert protocol_core.first_line(" \n ") == ""
    assert protocol_core.one_line(" a\n b\t c ") == "a b c"
    assert protocol_core.observations_after([], "now") == []
    assert protocol_core.observations_after([("o1", "a1"), ("o2", "a2")], "now") == ["o2", "now"]


def test_format_round_trips_through_its_json() -> None:
    fmt = webshop_protocol.EpisodeFormat(
        max_steps=3, history=2, max_prompt_chars=99, max_new_tokens=5, protocol="react"
    )
    d = fmt.to_dict()
    assert list(d)[-2:] == ["kind", "chat_instruction"]
    assert d["stop"] == ["\n"] and d["kind"] == "webshop-episode"
    assert webshop_protocol.EpisodeFormat.from_dict({**d, "unknown": 1}) == fmt
    react = alfworld_protocol.EpisodeFormat(
        max_steps=3, history=0, max_prompt_chars=0, max_new_tokens=5, protocol="react"
    )
    assert list(react.to_dict())[-3:] == ["instruction", "task_header", "examples"]


def _source_of_play() -> str:
    """:func:`play`'s source, for the clean interpreter (which cannot import this file)."""
    import inspect

    return "from typing import Any\nfrom types import ModuleType\n" + inspect.getsource(play)
