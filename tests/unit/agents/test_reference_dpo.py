"""reference-dpo's training code (``agents/reference/dpo_train.py`` with ``common.dpo`` and
``common.sample``), run as it runs in a workspace: a real subprocess with ``DATA_PATH`` and
``MODEL_PATH`` set, on alpaca-lite's public rows and prompt format with the tiny model."""

from __future__ import annotations

import json
from pathlib import Path

from support.agentcode import run_agent_code

from agent2rl.tasks.alpaca_lite import AlpacaLite, make_splits

# One round's pairs from the untrained tiny model, then 30 DPO steps on them (with the agent's
# NLL term, trl's combined loss): prints the pairs and the policy's mean log-probability
# margin (chosen minus rejected, summed over the completion's tokens) before and after.
_SCRIPT = """
import json, torch
from common import MODEL_PATH, load, prompt_completion_rows, dpo
from dpo_train import pairs

def margin(model, tok, batch):
    model.eval()
    total = 0.0
    for r in batch:
        n = len(tok(r["prompt"])["input_ids"])
        out = []
        for side in ("chosen", "rejected"):
            ids = tok(r["prompt"] + r[side], return_tensors="pt")["input_ids"]
            with torch.no_grad():
                logp = torch.log_softmax(model(ids).logits[0, :-1], -1)
            picked = logp.gather(1, ids[0, 1:, None])[n - 1 :, 0]
            out.append(float(picked.sum()))
        total += out[0] - out[1]
    return total / len(batch)

class ChatTokenizer:  # a chat model's tokenizer, as far as prompt_completion_rows looks
    chat_template = "chat"

    def apply_chat_template(self, messages, tokenize, add_generation_prompt):
        return "".join(f"<{m['role']}>{m['content']}" for m in messages) + "<assistant>"

chat_row = prompt_completion_rows(ChatTokenizer())[0]
model, tok = load(MODEL_PATH)
rows = prompt_completion_rows(tok)
batch = pairs(model, tok, rows, 48, seed=0)
again = pairs(model, tok, rows, 48, seed=0)
before = margin(model, tok, batch)
model, stats = dpo(model, tok, batch, 600.0, 1e-3, max_steps=30, batch_size=8, nll_weight=1.0)
print(json.dumps({"chat_row": chat_row, "pairs": batch, "again": again, "before": before,
                  "after": margin(model, tok, batch), "steps": stats["steps"]}))
"""


def test_self_play_pairs_and_dpo_raise_the_chosen_margin(tmp_path: Path, tiny) -> None:
    task = AlpacaLite()
    data = tmp_path / "data"
    data.mkdir()
    public = make_splits()["public"][:200]
    (data / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in public))
    (data / "eval_format.json").write_text(json.dumps(task.prompt_format(None).to_dict()))
    out = run_agent_code(tmp_path, data, tiny.path, _SCRIPT, timeout=600)

    answers: dict[str, set[str]] = {}
    for p in public:
        answers.setdefault(f"Instruction: {p['instruction']}\nResponse:", set()).add(
            f" {p['output']}\n"
        )
    batch = out["pairs"]
    # an untrained model's samples are never the answer: nearly every drawn row makes a pair
    assert 40 <= len(batch) <= 48
    for pair in batch:
        # chosen: a public answer of that very prompt, as the SFT rows complete it
        assert pair["chosen"] in answers[pair["prompt"]]
        # rejected: the model's own sample, cut at the stop string as the grader cuts it,
        # ending like the chosen one
        assert pair["rejected"].endswith("\n") and "\n" not in pair["rejected"][:-1]
        assert pair["rejected"] not in answers[pair["prompt"]]
    assert out["again"] == batch, "a round's pairs are a function of its seed"
    # a chat model learns an instruction row's response (this raised KeyError before)
    assert out["chat_row"]["prompt"] == f"<user>{public[0]['instruction']}<assistant>"
    assert out["chat_row"]["completion"] == public[0]["output"]
    assert out["steps"] == 30
    # DPO moved the policy towards the public answers and away from its own samples
    assert out["after"] > out["before"] + 1.0, out
