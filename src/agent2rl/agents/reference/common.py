"""Shared helpers of the reference agents' training scripts.

This file is copied into the agent's ``code/`` directory and runs there like any script an
LLM agent would write: it reads the workspace contract from environment variables, talks to
the grading service over plain HTTP and uses only torch/transformers/trl and the standard
library (the harness package itself is not importable inside the sandbox).
"""

from __future__ import annotations

import json
import os
import re
import time
import urllib.error
import urllib.request
from pathlib import Path

MODEL_PATH = os.environ["MODEL_PATH"]
DATA_PATH = Path(os.environ["DATA_PATH"])
OUTPUT_DIR = Path(os.environ["OUTPUT_DIR"])
SERVER = os.environ["GRADING_SERVER_URL"].rstrip("/")
TOKEN = os.environ["GRADING_TOKEN"]
DEADLINE = float(os.environ["DEADLINE"])


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def time_left() -> float:
    return DEADLINE - time.time()


def eval_format() -> dict:
    return json.loads((DATA_PATH / "eval_format.json").read_text())


def train_rows() -> list[dict]:
    with open(DATA_PATH / "train.jsonl") as fh:
        return [json.loads(line) for line in fh]


def prompt_completion_rows(tokenizer) -> list[dict]:
    """The training data in exactly the format the grader will prompt with."""
    fmt = eval_format()
    chat = bool(getattr(tokenizer, "chat_template", None))
    out = []
    for row in train_rows():
        if chat:
            prompt = tokenizer.apply_chat_template(
                [{"role": "user", "content": fmt["chat_template"].format(**row)}],
                tokenize=False, add_generation_prompt=True)
            completion = row["answer"]
        else:
            prompt = fmt["template"].format(**row)
            completion = fmt["completion_template"].format(**row)
        out.append({"prompt": prompt, "completion": completion, "answer": row["answer"]})
    return out


def final_answer(text: str) -> str | None:
    """The number after the last '####', else the last number in the text."""
    if "####" in text:
        found = re.findall(r"-?\d[\d,]*(?:\.\d+)?", text.rsplit("####", 1)[1])
        if found:
            return found[0].replace(",", "")
    found = re.findall(r"-?\d[\d,]*(?:\.\d+)?", text)
    return found[-1].replace(",", "") if found else None


def next_output_dir() -> Path:
    """output/v1, output/v2, ... (the first that does not exist)."""
    n = 1
    while (OUTPUT_DIR / f"v{n}").exists():
        n += 1
    return OUTPUT_DIR / f"v{n}"


def save(model, tokenizer) -> Path:
    out = next_output_dir()
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    return out


def submit(path: Path) -> dict | None:
    """POST the model to the grading service; returns its JSON answer, or None on error."""
    req = urllib.request.Request(
        f"{SERVER}/submit", data=json.dumps({"model_path": str(path)}).encode(),
        headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
        method="POST")
    try:
        with urllib.request.urlopen(req, timeout=max(60.0, time_left() + 600)) as resp:
            result = json.loads(resp.read())
    except urllib.error.HTTPError as err:
        log(f"submission of {path} refused: {err.code} {err.read().decode(errors='replace')}")
        return None
    except OSError as err:
        log(f"submission of {path} failed: {err}")
        return None
    log(f"submitted {path.name}: score={result.get('score')} baseline={result.get('baseline')}"
        f" best={result.get('best_score')} remaining={result.get('remaining_s')}")
    return result


def time_callback(stop_at: float):
    """A TrainerCallback that ends training at the epoch-seconds ``stop_at``."""
    from transformers import TrainerCallback

    class StopAtTime(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if time.time() >= stop_at:
                control.should_training_stop = True
            return control

    return StopAtTime()


def sft(model, tokenizer, rows: list[dict], seconds: float, lr: float, seed: int = 0):
    """Supervised fine-tuning on prompt/completion rows for about ``seconds``; returns model."""
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    stop_at = time.time() + seconds
    args = SFTConfig(
        output_dir=str(Path("code") / ".trainer"), max_steps=1_000_000, learning_rate=lr,
        lr_scheduler_type="constant", per_device_train_batch_size=32, max_length=192,
        logging_steps=50, save_strategy="no", report_to=[], seed=seed, use_cpu=not _cuda(),
        bf16=False, gradient_checkpointing=False, dataloader_num_workers=0,
        completion_only_loss=True, disable_tqdm=True,
    )
    data = Dataset.from_list([{"prompt": r["prompt"], "completion": r["completion"]}
                              for r in rows])
    trainer = SFTTrainer(model=model, args=args, train_dataset=data,
                         processing_class=tokenizer, callbacks=[time_callback(stop_at)])
    trainer.train()
    log(f"SFT: {trainer.state.global_step} steps, loss {_last_loss(trainer):.3f}")
    return trainer.model


def _last_loss(trainer) -> float:
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    return losses[-1] if losses else float("nan")


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def load(path: str):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path)
    return model, tokenizer
