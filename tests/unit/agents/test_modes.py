"""Operating modes: the agent's prompt per mode, method detection in code, contradictions."""

from __future__ import annotations

from pathlib import Path

import pytest
from support import REPO

from agent2rl.agents.methods import detect_methods, mode_contradictions
from agent2rl.agents.modes import MODES, get_mode
from agent2rl.agents.prompt import data_sample, render_prompt, workspace_listing
from agent2rl.errors import UserError

REFERENCE = REPO / "src" / "agent2rl" / "agents" / "reference"


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "workspace"
    for d in ("code", "output", "data", "models/base", ".home", ".agent2rl"):
        (ws / d).mkdir(parents=True)
    (ws / "description.md").write_text("# GSM8K\nSolve grade-school math word problems.\n")
    (ws / "instructions.md").write_text("Submit with POST $GRADING_SERVER_URL/submit.\n")
    rows = [f'{{"question": "q{i}", "answer": "{i}"}}' for i in range(10)]
    (ws / "data" / "train.jsonl").write_text("\n".join(rows) + "\n")
    (ws / "models" / "base" / "config.json").write_text("{}")
    (ws / ".home" / "secret-ish").write_text("x")
    return ws


def test_four_modes() -> None:
    assert list(MODES) == ["free", "sft-only", "rl-oriented", "multi"]
    assert len({m.text for m in MODES.values()}) == 4
    with pytest.raises(UserError, match="free, sft-only, rl-oriented, multi"):
        get_mode("rlhf")


def test_prompt_holds_every_piece(workspace: Path) -> None:
    prompt = render_prompt(workspace, "rl-oriented", 2 * 3600 + 5)
    assert "Solve grade-school math word problems." in prompt
    assert "POST $GRADING_SERVER_URL/submit" in prompt
    assert MODES["rl-oriented"].text in prompt and "GRPO" in prompt
    assert '{"question": "q0", "answer": "0"}' in prompt
    assert '"q2"' in prompt and '"q3"' not in prompt  # the first three lines only
    assert "data/" in prompt and "train.jsonl" in prompt and "config.json" in prompt
    assert ".home" not in prompt and ".agent2rl" not in prompt
    assert "2h00m05s" in prompt
    assert "GET /time" in prompt
    assert str(workspace) in prompt


@pytest.mark.parametrize("mode", list(MODES))
def test_each_mode_reaches_the_prompt(workspace: Path, mode: str) -> None:
    prompt = render_prompt(workspace, mode, 60)
    assert MODES[mode].text in prompt
    others = [m.text for name, m in MODES.items() if name != mode]
    assert not any(text in prompt for text in others)


def test_sft_only_prompt_forbids_rl(workspace: Path) -> None:
    text = render_prompt(workspace, "sft-only", 60)
    assert "supervised fine-tuning only" in text.lower() and "do not use reinforcement" in text


def test_custom_template_gets_the_mode_appended(workspace: Path) -> None:
    # The old default template (no mode placeholder) still renders, and the mode is added.
    template = "{description}\n{instructions}\nTime left: {time_left}. Workspace: {workspace}\n"
    prompt = render_prompt(workspace, "multi", 90, template=template)
    assert prompt.startswith("# GSM8K") and "1m30s" in prompt
    assert prompt.rstrip().endswith(MODES["multi"].text)
    with pytest.raises(UserError, match="bad prompt template"):
        render_prompt(workspace, "free", 60, template="{nope}")
    with pytest.raises(UserError, match="bad prompt template"):
        render_prompt(workspace, "free", 60, template="a JSON {brace}")


def test_missing_files_become_notes(tmp_path: Path) -> None:
    ws = tmp_path / "empty"
    ws.mkdir()
    prompt = render_prompt(ws, "free", 10)
    assert "(missing: description.md)" in prompt and "no data/train.jsonl" in prompt
    assert workspace_listing(tmp_path / "nope") == "(workspace not found)"


def test_data_sample_cuts_long_lines(workspace: Path) -> None:
    (workspace / "data" / "train.jsonl").chmod(0o644)
    (workspace / "data" / "train.jsonl").write_text("\n" + "x" * 5000 + "\n")
    sample = data_sample(workspace)
    assert len(sample) == 401 and sample.endswith("…")


def test_listing_is_bounded(tmp_path: Path) -> None:
    for i in range(100):
        (tmp_path / f"f{i:03d}.txt").write_text("x" * i)
    listing = workspace_listing(tmp_path)
    assert listing.count("\n") == 60 and listing.endswith("... 40 more")
    assert "f000.txt  (0 B)" in listing


# --------------------------------------------------------------------------------------------
# Method detection

SFT_TRL = """
from trl import SFTConfig, SFTTrainer
trainer = SFTTrainer(model=model, args=SFTConfig(output_dir="out"), train_dataset=ds)
"""
SFT_PLAIN = """
from transformers import Trainer
batch["labels"] = batch["input_ids"].clone()
trainer = Trainer(model=model, train_dataset=ds)
"""
GRPO = """
from trl import GRPOConfig, GRPOTrainer
def correctness_reward(completions, answer, **kw):
    return [1.0 if a in c else 0.0 for c, a in zip(completions, answer)]
trainer = GRPOTrainer(model=m, reward_funcs=[correctness_reward], args=GRPOConfig())
"""
PPO = "from trl import PPOTrainer, PPOConfig\nppo_trainer = PPOTrainer(config, model, ref)\n"
DPO = "from trl import DPOTrainer\ntrainer = DPOTrainer(model, ref_model, train_dataset=pairs)\n"
ONLINE_DPO = "from trl import OnlineDPOTrainer\nt = OnlineDPOTrainer(model, judge=judge)\n"
REINFORCE_LOOP = """
for step in range(n):
    obs = env.reset()
    while not done:
        action = policy.act(obs)
        obs, reward, done = env.step(action)
    rewards = torch.tensor(episode_rewards)
    advantages = rewards - rewards.mean()
    loss = -(advantages * logprobs).mean()
    loss.backward()
"""
ROLLOUT_SERVER = """
import requests
def reward_fn(traj): return traj["score"]
traj = requests.post(f"{url}/rollout", json={"policy": "output/v1"}).json()
"""


@pytest.mark.parametrize(
    ("code", "expected", "absent"),
    [
        (SFT_TRL, {"sft"}, {"rl", "grpo"}),
        (SFT_PLAIN, {"sft"}, {"rl"}),
        (GRPO, {"grpo", "reward", "rl"}, {"dpo"}),
        (PPO, {"ppo", "rl"}, {"sft"}),
        (DPO, {"dpo", "preference"}, {"rl", "online_dpo"}),
        (ONLINE_DPO, {"online_dpo", "preference", "rl"}, {"dpo"}),
        (REINFORCE_LOOP, {"reward", "rollout", "rl"}, {"grpo"}),
        (ROLLOUT_SERVER, {"reward", "rollout", "rl"}, set()),
        ("x = 1  # TODO: try GRPO or PPO later\n# no sft here", set(), {"grpo", "ppo", "sft"}),
        ("", set(), {"sft", "rl"}),
    ],
)
def test_detect_methods_in_code(code: str, expected: set[str], absent: set[str]) -> None:
    found = detect_methods(code)
    assert expected <= found, found
    assert not (absent & found), found


def test_detect_methods_in_a_folder(tmp_path: Path) -> None:
    code = tmp_path / "code"
    (code / "rl").mkdir(parents=True)
    (code / "sft.py").write_text(SFT_TRL)
    (code / "rl" / "train.py").write_text(GRPO)
    (code / "notes.md").write_text("I tried DPO")  # not code
    (code / "__pycache__").mkdir()
    (code / "__pycache__" / "ppo.py").write_text(PPO)
    assert detect_methods(code) == {"sft", "grpo", "reward", "rl"}
    assert detect_methods(tmp_path / "missing") == set()
    assert detect_methods(code / "sft.py") == {"sft"}


def test_detect_methods_on_the_reference_agents() -> None:
    assert detect_methods(REFERENCE / "sft_train.py") == {"sft"}
    grpo = detect_methods(REFERENCE / "grpo_train.py")
    assert {"sft", "grpo", "rl"} <= grpo  # an SFT warm-up, then GRPO
    # an SFT warm-up, then DPO on pairs it samples (it imports the round loop of grpo_train)
    assert {"sft", "dpo", "preference"} <= detect_methods(REFERENCE / "dpo_train.py")


# --------------------------------------------------------------------------------------------
# Contradictions


def test_sft_only_contradictions() -> None:
    [msg] = mode_contradictions("sft-only", detect_methods(GRPO))
    assert "GRPO" in msg and "sft-only" in msg
    [msg] = mode_contradictions("sft-only", detect_methods(DPO))
    assert "preference" in msg
    assert mode_contradictions("sft-only", detect_methods(SFT_TRL)) == []
    [msg] = mode_contradictions("sft-only", detect_methods(REINFORCE_LOOP))
    assert "reward-driven" in msg


def test_rl_oriented_contradictions() -> None:
    [msg] = mode_contradictions("rl-oriented", detect_methods(SFT_TRL))
    assert "no RL method" in msg and "found: sft" in msg
    assert mode_contradictions("rl-oriented", detect_methods(GRPO)) == []
    [msg] = mode_contradictions("rl-oriented", detect_methods(GRPO), 0, interactive=True)
    assert "no environment steps" in msg
    assert mode_contradictions("rl-oriented", detect_methods(GRPO), 12, interactive=True) == []
    assert len(mode_contradictions("rl-oriented", set(), interactive=True)) == 2


def test_free_and_multi_allow_everything() -> None:
    everything = detect_methods(GRPO + SFT_TRL + DPO)
    assert mode_contradictions("free", everything) == []
    assert mode_contradictions("multi", everything, 0, interactive=True) == []
    with pytest.raises(UserError):
        mode_contradictions("rl", everything)
