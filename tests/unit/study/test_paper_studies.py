"""The paper's study files (docs/studies/paper.toml, paper-lite.toml): they load, validate
with keys set, expand to the paper's matrix, and the export's main table has the paper's
wide shape (task rows; per stack best / delta)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from support.studyruns import make_run

from agent2rl.errors import UserError
from agent2rl.study.export import main_table_rows
from agent2rl.study.spec import load_study, validate

STUDIES = Path(__file__).parents[3] / "docs" / "studies"
KEYS = {"ANTHROPIC_API_KEY": "a" * 20, "OPENAI_API_KEY": "o" * 20, "GEMINI_API_KEY": "g" * 20}


@pytest.fixture
def keys(monkeypatch: pytest.MonkeyPatch) -> None:
    for k, v in KEYS.items():
        monkeypatch.setenv(k, v)


def test_paper_study_is_the_papers_matrix(keys: None) -> None:
    spec = load_study(STUDIES / "paper.toml")
    slots = validate(spec)
    assert spec.budget_s == 12 * 3600 and len(spec.tasks) == 6
    # issue #39 item 7: the reference's instructions; the paper's figures' base model
    assert spec.instructions == "reference" and spec.models == ["Qwen/Qwen3-8B-Base"]
    assert len(slots) == 6 * (8 + 3 + 1 + 6 + 6) * 3
    per_agent = Counter(s.agent for s in slots if s.task == "gsm8k" and s.repeat == 0)
    assert per_agent == {
        "claude-code": 8, "codex-paper": 3, "gemini-cli": 1, "openhands-paper": 6,
        "opencode-paper": 6,
    }  # fmt: skip
    modes = {s.mode for s in slots if s.agent == "claude-code"}
    assert modes == {"sft-only", "rl-oriented", "free", "multi"}
    assert {s.mode for s in slots if s.agent != "claude-code"} == {"free"}
    assert {s.driver for s in slots} == {
        "claude-opus-4-6", "claude-sonnet-4-5", "gpt-5.4", "gpt-5.2", "gpt-4o",
        "gemini-2.5-flash",
    }  # fmt: skip


def test_paper_lite_has_the_same_shape(keys: None) -> None:
    spec = load_study(STUDIES / "paper-lite.toml")
    slots = validate(spec)
    assert len(slots) == 3 * (4 + 1 + 1 + 3 + 3)
    paper = load_study(STUDIES / "paper.toml")
    assert spec.agents == paper.agents and set(spec.agent_cells) == set(paper.agent_cells)
    assert all(t.endswith("-lite") for t in spec.tasks) and spec.models == ["tiny"]


def test_agent_cells_for_an_agent_not_in_the_study_is_refused(tmp_path: Path, keys) -> None:
    f = tmp_path / "s.toml"
    f.write_text(
        'name = "s"\ntasks = ["arith-lite"]\nagents = ["codex"]\nbudget = "1m"\n'
        '[agent_cells."claude-code"]\nmodes = ["multi"]\n'
    )
    with pytest.raises(UserError, match="agent_cells for \\['claude-code'\\]"):
        validate(load_study(f))


def test_main_table_is_wide_task_rows_and_stack_columns() -> None:
    runs = [
        make_run(task="gsm8k", agent="claude-code", driver="opus", mode="free",
                 baseline=40.0, scores=[50.0, 60.0], repeat=0),
        make_run(task="gsm8k", agent="claude-code", driver="opus", mode="free",
                 baseline=40.0, scores=[44.0], repeat=1),
        make_run(task="gsm8k", agent="codex", driver="gpt-5.4", baseline=40.0,
                 scores=[], repeat=0),
        make_run(task="humaneval", agent="codex", driver="gpt-5.4", baseline=30.0,
                 scores=[35.0], repeat=0),
    ]  # fmt: skip
    rows = {r["task"]: r for r in main_table_rows(runs)}
    cc, cx = "claude-code · opus · free", "codex · gpt-5.4"
    g = rows["gsm8k"]
    assert g["baseline"] == 40.0
    assert g[f"{cc} best"] == pytest.approx(52.0) and g[f"{cc} delta"] == pytest.approx(12.0)
    # No valid submission: the base model stands (best = baseline, delta 0).
    assert g[f"{cx} best"] == 40.0 and g[f"{cx} delta"] == 0.0
    h = rows["humaneval"]
    assert h[f"{cx} delta"] == pytest.approx(5.0) and h[f"{cc} best"] is None
    assert list(g) == ["task", "baseline", f"{cc} best", f"{cc} delta", f"{cx} best",
                       f"{cx} delta", "flagged"]  # fmt: skip
    assert g["flagged"] == 0
