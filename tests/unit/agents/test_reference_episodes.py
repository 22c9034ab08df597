"""The reference agents' training code for episodes (``agents/reference/episodes.py`` and
``common.py``), run as it runs in a workspace: a real subprocess with ``DATA_PATH`` and
``MODEL_PATH`` set, on the walkthroughs of a small generated alfworld-lite and the tiny
model's tokenizer."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from support.agentcode import run_agent_code

from agent2rl.rollout import client
from agent2rl.tasks.alfworld import protocol
from agent2rl.tasks.alfworld.protocol import EpisodeFormat, build_prompt, completion_for
from agent2rl.tasks.shared import protocol_core

# Prints, for every supervised span of every row, the text before it (from the row's start)
# and the span, decoded with the tiny model's tokenizer.
_SCRIPT = """
import json, random
import episodes
from transformers import AutoTokenizer
from common import MODEL_PATH
tok = AutoTokenizer.from_pretrained(MODEL_PATH)
rows = episodes.sft_rows(episodes.Prompter(tok, episodes.episode_format()), random.Random(0))
out = []
for r in rows:
    ids, mask = r["input_ids"], r["completion_mask"]
    spans, start = [], None
    for i, m in enumerate(mask + [0]):
        if m and start is None:
            start = i
        if not m and start is not None:
            spans.append((tok.decode(ids[:start]), tok.decode(ids[start:i])))
            start = None
    out.append(spans)
print(json.dumps(out))
"""


def _workspace_data(tmp_path: Path, public: Path, fmt: EpisodeFormat) -> Path:
    data = tmp_path / "data"
    data.mkdir()
    shutil.copyfile(public / "walkthroughs.jsonl", data / "walkthroughs.jsonl")
    shutil.copyfile(protocol.__file__, data / "protocol.py")
    shutil.copyfile(protocol_core.__file__, data / "protocol_core.py")
    shutil.copyfile(client.__file__, data / "env_client.py")
    (data / "eval_format.json").write_text(json.dumps(fmt.to_dict()))
    return data


# The learning rate of each optimizer step of a short SFT run with ``decay=True``, as the
# optimizer saw it when it stepped, and the time the run started.
_DECAY_SCRIPT = """
import json, time, torch
from transformers import AutoModelForCausalLM, AutoTokenizer
import common
seen = []
step = torch.optim.AdamW.step
def recording_step(self, *args, **kwargs):
    seen.append((time.time(), self.param_groups[0]["lr"]))
    return step(self, *args, **kwargs)
torch.optim.AdamW.step = recording_step
tok = AutoTokenizer.from_pretrained(common.MODEL_PATH)
model = AutoModelForCausalLM.from_pretrained(common.MODEL_PATH)
rows = [{"prompt": f"{a}+{a}=", "completion": f" {2 * a}."} for a in range(64)]
start = time.time()
common.sft(model, tok, rows, 10.0, 0.01, batch_size=4, decay=True)
print(json.dumps({"start": start, "seen": seen}))
"""


def test_sft_learning_rate_decays_to_zero_by_its_deadline(tmp_path, alfworld_lite, tiny) -> None:
    task, prepared = alfworld_lite
    data = _workspace_data(tmp_path, prepared.public, task.episode_format())
    out = run_agent_code(tmp_path, data, tiny.path, _DECAY_SCRIPT)
    steps = out["seen"]
    assert len(steps) >= 3, steps
    rates = [lr for _, lr in steps]
    assert all(a > b for a, b in zip(rates, rates[1:], strict=False)), rates
    assert rates[0] <= 0.01
    # each step's rate is the share of the 10 s left when it began (it stepped a little later)
    for t, lr in steps:
        assert lr >= 0.01 * (out["start"] + 10.0 - t) / 10.0 - 1e-9
    assert rates[-1] < 0.01 * 0.3  # training ran until close to the deadline


def test_transcript_windows_supervise_each_step_in_the_graders_prompt(
    tmp_path, alfworld_lite, tiny
) -> None:
    task, prepared = alfworld_lite
    fmt = EpisodeFormat(
        max_steps=20, history=3, max_prompt_chars=400, max_new_tokens=40, show_admissible=False
    )
    data = _workspace_data(tmp_path, prepared.public, fmt)
    games = [json.loads(line) for line in (data / "walkthroughs.jsonl").read_text().splitlines()]
    # Every (prompt, action) the grader could pose on an expert's path, with any history.
    # (A prompt with little history can fit several steps: "You arrive at microwave 1...")
    expected: dict[str, set[tuple[str, int, str]]] = {}
    for g in games:
        steps = [(s["observation"], s["action"]) for s in g["steps"]]
        steps = [(steps[0][0], steps[1][1]), *steps[2:]] if steps[0][1] == "look" else steps
        for t, (obs, action) in enumerate(steps):
            for k in range(fmt.history + 1):
                shown = EpisodeFormat.from_dict({**fmt.to_dict(), "history": k})
                p = build_prompt(g["goal"], steps[:t], obs, [], shown)
                if len(p) <= fmt.max_prompt_chars:
                    expected.setdefault(p, set()).add((g["game_id"], t, completion_for(action)))

    rows = run_agent_code(tmp_path, data, tiny.path, _SCRIPT)
    spans = [s for row in rows for s in row]
    assert len(spans) > len(rows) > 0  # windows supervise several steps each
    covered = set()
    for prompt, action in spans:
        steps = {e[:2] for e in expected.get(prompt, ()) if e[2] == action}
        assert steps, (prompt, action)
        covered |= steps
    # every expert step is supervised at least once
    assert covered == {e[:2] for es in expected.values() for e in es}
