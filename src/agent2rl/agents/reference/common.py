"""Shared helpers of the reference agents' training scripts.

This file is copied into the agent's ``code/`` directory and runs there like any script an
LLM agent would write: it reads the workspace contract from environment variables, talks to
the grading service over plain HTTP and uses only torch/transformers/trl and the standard
library (the harness package itself is not importable inside the sandbox).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import time
import urllib.error
import urllib.request
import warnings
from pathlib import Path

MODEL_PATH = os.environ["MODEL_PATH"]
DATA_PATH = Path(os.environ["DATA_PATH"])
OUTPUT_DIR = Path(os.environ["OUTPUT_DIR"])
SERVER = os.environ["GRADING_SERVER_URL"].rstrip("/")
TOKEN = os.environ["GRADING_TOKEN"]
DEADLINE = float(os.environ["DEADLINE"])

# Progress bars flood the agent's log: off before datasets/huggingface_hub are imported (and
# again in quiet(), for libraries imported before this module).
os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def time_left() -> float:
    return DEADLINE - time.time()


def eval_format() -> dict:
    return json.loads((DATA_PATH / "eval_format.json").read_text())


def read_jsonl(name: str) -> list[dict]:
    """The rows of ``data/<name>``."""
    with open(DATA_PATH / name) as fh:
        return [json.loads(line) for line in fh]


def is_chat(tokenizer) -> bool:
    """Whether the grader prompts ``tokenizer``'s model as a chat model."""
    return bool(getattr(tokenizer, "chat_template", None))


def chat_messages(fmt: dict, row: dict) -> list[dict]:
    """The conversation the grader gives a chat model for ``row``: the format's worked
    examples (``chat_shots``: user, assistant turns), then the user message."""
    shots = [
        {"role": role, "content": text}
        for user, assistant in fmt.get("chat_shots", [])
        for role, text in (("user", user), ("assistant", assistant))
    ]
    return [*shots, {"role": "user", "content": fmt["chat_template"].format(**row)}]


def prompt_completion_rows(tokenizer) -> list[dict]:
    """The training data in exactly the format the grader will prompt with."""
    fmt = eval_format()
    chat = is_chat(tokenizer)
    out = []
    for row in read_jsonl("train.jsonl"):
        if chat:
            prompt = tokenizer.apply_chat_template(
                chat_messages(fmt, row), tokenize=False, add_generation_prompt=True
            )
            # Math tasks answer with the worked solution, instruction following (alpaca) with
            # the response; code tasks with the whole function in the fenced block the grader
            # extracts.
            completion = row.get("answer", row.get("output"))
            if completion is None:
                completion = f"```python\n{row['prompt']}{row['canonical_solution']}```"
        else:
            prompt = fmt["template"].format(**row)
            completion = fmt["completion_template"].format(**row)
        out.append({"prompt": prompt, "completion": completion, "answer": row.get("answer", "")})
    return out


def grpo_rows(tokenizer) -> list[dict]:
    """The training prompts for GRPO, as the grader will ask them, with the ``answer`` column.

    Base models get the prompt text; chat models get the user message as a conversation (the
    trainer applies the chat template with the generation prompt, as the grader does).
    """
    fmt = eval_format()
    chat = is_chat(tokenizer)
    return [
        {
            "prompt": chat_messages(fmt, row) if chat else fmt["template"].format(**row),
            "answer": row["answer"],
        }
        for row in read_jsonl("train.jsonl")
    ]


@functools.cache
def _stops() -> tuple[str, ...]:
    return tuple(s for s in eval_format().get("stop", []) if s)


def completion_text(completion) -> str:
    """A sampled completion as plain text (conversational ones are lists of messages)."""
    if isinstance(completion, str):
        return completion
    return "".join(str(m.get("content", "")) for m in completion)


def graded_text(completion) -> str:
    """A sampled completion as the grader would read it: plain text cut at the first stop
    string (the grader stops generating there; sampling during training does not)."""
    completion = completion_text(completion)
    cuts = [i for stop in _stops() if (i := completion.find(stop)) != -1]
    return completion[: min(cuts, default=len(completion))]


def gold_number(answer: str) -> str:
    """The reference's final number: what follows the last '####' in a GSM8K-style answer."""
    return answer.rsplit("####", 1)[-1].strip().replace(",", "")


def same_number(a: str | None, b: str | None) -> bool:
    if a is None or b is None:
        return False
    try:
        return float(a) == float(b)
    except ValueError:
        return a.strip() == b.strip()


def final_answer(text: str) -> str | None:
    """The number after the last '####', else the last number in the text."""
    number = r"-?\d[\d,]*(?:\.\d+)?"
    tail = text.rsplit("####", 1)[1] if "####" in text else ""
    found = re.findall(number, tail)[:1] or re.findall(number, text)[-1:]
    return found[0].replace(",", "") if found else None


def save(model, tokenizer) -> Path:
    """Save to output/v1, output/v2, ... (the first that does not exist)."""
    n = 1
    while (OUTPUT_DIR / f"v{n}").exists():
        n += 1
    out = OUTPUT_DIR / f"v{n}"
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    return out


def submit(path: Path) -> dict | None:
    """POST the model to the grading service; returns its JSON answer, or None on error."""
    req = urllib.request.Request(
        f"{SERVER}/submit",
        data=json.dumps({"model_path": str(path)}).encode(),
        headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(req, timeout=max(60.0, time_left() + 600)) as resp:
            result = json.loads(resp.read())
    except urllib.error.HTTPError as err:
        log(f"submission of {path} refused: {err.code} {err.read().decode(errors='replace')}")
        return None
    except OSError as err:
        log(f"submission of {path} failed: {err}")
        return None
    log(
        f"submitted {path.name}: score={result.get('score')} baseline={result.get('baseline')}"
        f" best={result.get('best_score')} remaining={result.get('remaining_s')}"
    )
    return result


def time_callback(stop_at: float, decay_s: float | None = None):
    """A TrainerCallback that ends training at the epoch-seconds ``stop_at``. With
    ``decay_s`` it also sets the learning rate to decay linearly to zero over the last
    ``decay_s`` seconds before ``stop_at``: training stops on time, not after a step count a
    scheduler could count down. (The trainer's own log then shows the undecayed rate.)"""
    from transformers import TrainerCallback

    class StopAtTime(TrainerCallback):
        def on_step_begin(self, args, state, control, optimizer=None, **kwargs):
            if decay_s and optimizer is not None:
                # after the trainer's constant scheduler reset it, before this step's update
                share = min(1.0, max(0.0, stop_at - time.time()) / decay_s)
                for group in optimizer.param_groups:
                    group["lr"] = args.learning_rate * share
            return control

        def on_step_end(self, args, state, control, **kwargs):
            if time.time() >= stop_at:
                control.should_training_stop = True
            return control

    return StopAtTime()


def _row_length(tokenizer, row: dict) -> int:
    """A row's tokens: tokenized rows as they are, prompt/completion rows joined, preference
    rows with the longer of their two answers plus the end-of-sequence token trl's DPO
    appends."""
    if "input_ids" in row:
        return len(row["input_ids"])
    if "chosen" in row:
        return 1 + max(
            len(tokenizer(row["prompt"] + row[side])["input_ids"])
            for side in ("chosen", "rejected")
        )
    return len(tokenizer(row["prompt"] + row["completion"])["input_ids"])


def _max_length(model, tokenizer, rows: list[dict]) -> int:
    """The longest row in tokens, capped by the model's context (and 1024 to bound memory):
    long rows are truncated rather than dropped."""
    longest = max(_row_length(tokenizer, r) for r in rows[:2000])
    context = getattr(model.config, "max_position_embeddings", None) or 1024
    return max(16, min(longest, context, 1024))


def sft(
    model,
    tokenizer,
    rows: list[dict],
    seconds: float,
    lr: float,
    seed: int = 0,
    batch_size: int = 32,
    decay: bool = False,
    max_steps: int | None = None,
    callbacks: tuple = (),
    shuffle: bool = True,
):
    """Supervised fine-tuning for about ``seconds``; returns the model. ``rows`` are either
    prompt/completion pairs or already tokenized (``input_ids`` with a ``completion_mask``
    of the tokens to learn), not a mix. ``decay``: the learning rate falls linearly from
    ``lr`` to zero over the ``seconds`` (constant otherwise). ``max_steps`` also ends
    training after that many optimizer steps (benchmarks compare variants by steps, which a
    shared machine does not skew; with ``decay`` the rate then falls to zero by that step
    instead); ``callbacks`` are more ``TrainerCallback``s. ``shuffle=False`` reads the rows
    in order (a curriculum), where the installed transformers can (``train_sampling_strategy``
    exists since 5.0; older versions shuffle anyway)."""
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    stop_at = time.time() + seconds
    args = SFTConfig(
        **_trainer_args(SFTConfig, seed, max_steps, lr),
        lr_scheduler_type="linear" if decay and max_steps else "constant",
        per_device_train_batch_size=batch_size,
        max_length=_max_length(model, tokenizer, rows),
        logging_steps=50,
        completion_only_loss=True,
        **({} if shuffle else _if_field(SFTConfig, "train_sampling_strategy", "sequential")),
    )
    keys = ("input_ids", "completion_mask") if "input_ids" in rows[0] else ("prompt", "completion")
    data = Dataset.from_list([{k: r[k] for k in keys} for r in rows])
    trainer = SFTTrainer(
        model=model,
        args=args,
        train_dataset=data,
        processing_class=tokenizer,
        callbacks=[
            time_callback(stop_at, seconds if decay and not max_steps else None),
            *callbacks,
        ],
    )
    trainer.train()
    log(f"SFT: {trainer.state.global_step} steps, loss {_last_loss(trainer):.3f}")
    return trainer.model


def grpo(
    model,
    tokenizer,
    rows: list[dict],
    reward_funcs,
    seconds: float,
    lr: float,
    seed: int = 0,
    num_generations: int = 8,
    prompts_per_step: int = 4,
    max_completion_length: int = 40,
    temperature: float = 1.0,
    beta: float = 0.0,
    max_steps: int | None = None,
):
    """GRPO with trl for about ``seconds`` on ``rows`` (``prompt`` plus extra columns, which
    reach the reward functions as keyword arguments); returns ``(model, stats)``.

    ``stats``: ``steps``, ``seconds``, ``rewards`` (the mean reward of each logging window),
    ``logs`` (trl's metrics of each logging window: ``frac_reward_zero_std``, ``kl``, ...).
    ``max_steps`` also ends training after that many steps (benchmarks compare by steps).
    Constant learning rate and CPU-safe settings. ``beta > 0`` adds a KL penalty towards the
    weights ``model`` has when this call starts (``beta=0``: no reference model, cheaper).
    ``prompts_per_step * num_generations`` completions are sampled and trained on per step.
    """
    from datasets import Dataset
    from transformers import PrinterCallback
    from trl import GRPOConfig, GRPOTrainer

    started = time.time()
    stop_at = started + seconds
    args = GRPOConfig(
        **_trainer_args(GRPOConfig, seed, max_steps, lr),
        lr_scheduler_type="constant",
        warmup_steps=0,
        per_device_train_batch_size=num_generations * prompts_per_step,
        num_generations=num_generations,
        max_completion_length=max_completion_length,
        temperature=temperature,
        beta=beta,
        logging_steps=10,
        log_completions=False,
    )
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=reward_funcs,
        args=args,
        train_dataset=Dataset.from_list(rows),
        processing_class=tokenizer,
        callbacks=[time_callback(stop_at)],
    )
    if beta and getattr(trainer, "ref_model", None) is not None:
        # trl loads the reference model from the policy's original path (its config's
        # name_or_path): the base model when ``model`` was trained in memory. The KL term
        # should anchor to the weights this GRPO run starts from instead.
        ref = trainer.accelerator.unwrap_model(trainer.ref_model)
        ref.load_state_dict(trainer.accelerator.unwrap_model(trainer.model).state_dict())
    # The default printer writes every metric of every log; one short line per log instead.
    trainer.remove_callback(PrinterCallback)
    rewards: list[float] = []
    logs: list[dict] = []
    trainer.add_callback(_grpo_log_callback(rewards, logs))
    trainer.train()
    spent = time.time() - started
    steps = trainer.state.global_step
    trend = " -> ".join(f"{r:.3f}" for r in _sparse(rewards, 8))
    log(
        f"GRPO: {steps} steps in {spent:.0f}s ({steps / max(spent, 1e-9):.2f} steps/s),"
        f" mean reward per window: {trend or 'n/a'}"
    )
    return trainer.model, {"steps": steps, "seconds": spent, "rewards": rewards, "logs": logs}


def sample(model, tokenizer, prompts: list[str], temperature: float, seed: int = 0) -> list[str]:
    """One completion per prompt (text, as the grader prompts: a chat model's prompt already
    has its template applied), sampled at ``temperature`` up to the format's
    ``max_new_tokens`` and read as the grader reads it (:func:`graded_text`: cut at the first
    stop string). Batches of 64, left-padded; the model is left in eval mode."""
    import torch

    torch.manual_seed(seed)
    model.eval()
    side, tokenizer.padding_side = tokenizer.padding_side, "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    max_new = int(eval_format().get("max_new_tokens", 64))
    out: list[str] = []
    try:
        for start in range(0, len(prompts), 64):
            enc = tokenizer(prompts[start : start + 64], return_tensors="pt", padding=True)
            out += map(graded_text, sampled_texts(model, tokenizer, enc, temperature, max_new))
    finally:
        tokenizer.padding_side = side
    return out


def sampled_texts(model, tokenizer, enc, temperature: float, max_new_tokens: int, stop=None):
    """The text ``model.generate`` samples (at ``temperature``, no top-k) after each prompt
    of the left-padded batch ``enc``, special tokens dropped; ``stop``: its stop strings."""
    import torch

    enc = {k: v.to(model.device) for k, v in enc.items()}
    with torch.inference_mode():
        ids = model.generate(
            **enc,
            do_sample=True,
            temperature=temperature,
            top_k=0,
            max_new_tokens=max_new_tokens,
            pad_token_id=tokenizer.pad_token_id,
            **({} if stop is None else {"stop_strings": stop, "tokenizer": tokenizer}),
        )
    return tokenizer.batch_decode(ids[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)


def dpo(
    model,
    tokenizer,
    rows: list[dict],
    seconds: float,
    lr: float,
    beta: float = 0.1,
    seed: int = 0,
    batch_size: int = 16,
    max_steps: int | None = None,
    nll_weight: float = 0.0,
):
    """Direct preference optimisation (trl's ``DPOTrainer``) for about ``seconds`` on rows
    of ``prompt`` / ``chosen`` / ``rejected`` text; returns ``(model, stats)``.

    ``nll_weight > 0`` adds the chosen completions' negative log-likelihood to the DPO loss
    with that weight (trl's ``loss_type=["sigmoid", "sft"]``; RPO, Pang et al., 2024): DPO
    alone may lower the chosen answers' likelihood as long as the rejected ones fall faster.

    The reference model is a copy of ``model`` as this call gets it (trl would otherwise
    load the base weights from the config's path: the wrong anchor for a model trained in
    memory). Constant learning rate, CPU-safe settings; ``max_steps`` also ends training
    after that many steps. ``stats``: ``steps``, and trl's last logged ``rewards/accuracies``
    and ``rewards/margins`` (NaN before its first log).
    """
    import copy

    from datasets import Dataset
    from trl import DPOConfig, DPOTrainer

    stop_at = time.time() + seconds
    args = DPOConfig(
        **_trainer_args(DPOConfig, seed, max_steps, lr),
        lr_scheduler_type="constant",
        per_device_train_batch_size=batch_size,
        max_length=_max_length(model, tokenizer, rows),
        beta=beta,
        **(
            {"loss_type": ["sigmoid", "sft"], "loss_weights": [1.0, nll_weight]}
            if nll_weight
            else {}
        ),
        logging_steps=10,
    )
    ref = copy.deepcopy(model).eval()
    trainer = DPOTrainer(
        model=model,
        ref_model=ref,
        args=args,
        train_dataset=Dataset.from_list(
            [{k: r[k] for k in ("prompt", "chosen", "rejected")} for r in rows]
        ),
        processing_class=tokenizer,
        callbacks=[time_callback(stop_at)],
    )
    trainer.train()
    logged = [h for h in trainer.state.log_history if "rewards/margins" in h]
    last, nan = logged[-1] if logged else {}, float("nan")
    stats = {
        "steps": trainer.state.global_step,
        "accuracy": last.get("rewards/accuracies", nan),
        "margin": last.get("rewards/margins", nan),
    }
    log(
        f"DPO: {stats['steps']} steps on {len(rows)} pairs, loss {_last_loss(trainer):.3f},"
        f" reward accuracy {stats['accuracy']:.2f}, margin {stats['margin']:.3f}"
    )
    return trainer.model, stats


def _trainer_args(config_cls, seed: int, max_steps: int | None, lr: float) -> dict:
    """The config kwargs every trainer here shares: the learning rate ``lr``, scratch output
    under ``code/.trainer``, no checkpoints, no reporting, no progress bars, the CPU when
    there is no CUDA (fp32, no dataloader workers, no gradient checkpointing), and
    ``max_steps`` (None: stop on time only, via :func:`time_callback`). Calls :func:`quiet`
    first: every trainer here builds its config with this before anything else."""
    import torch

    quiet()
    return {
        "output_dir": str(Path("code") / ".trainer"),
        "max_steps": max_steps or 1_000_000,
        "seed": seed,
        "learning_rate": lr,
        "save_strategy": "no",
        "report_to": [],
        "use_cpu": not torch.cuda.is_available(),
        "bf16": False,
        "dataloader_num_workers": 0,
        "disable_tqdm": True,
        # trl turns it on by default; it only slows small models down. transformers 5
        # renamed it activation_checkpointing: setting both avoids its deprecation warning.
        "gradient_checkpointing": False,
        **_if_field(config_cls, "activation_checkpointing", False),
    }


def _if_field(config_cls, name: str, value) -> dict:
    """``{name: value}`` where ``config_cls`` (a trainer config) has that field, else ``{}``."""
    return {name: value} if name in getattr(config_cls, "__dataclass_fields__", {}) else {}


def _grpo_log_callback(rewards: list[float], history: list[dict]):
    from transformers import TrainerCallback

    nan = float("nan")

    class GRPOLog(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and "reward" in logs:
                rewards.append(float(logs["reward"]))
                history.append(dict(logs, step=state.global_step))
                parts = [f"reward {logs['reward']:.3f} (std {logs.get('reward_std', nan):.3f})"]
                parts += [
                    f"{key.split('/')[1]} {value:.3f}"
                    for key, value in logs.items()
                    if key.startswith("rewards/") and key.endswith("/mean")
                ]
                parts.append(f"completion length {logs.get('completions/mean_length', nan):.1f}")
                if "kl" in logs:
                    parts.append(f"kl {logs['kl']:.4f}")
                parts.append(f"loss {logs.get('loss', nan):.4f}")
                log(f"GRPO step {state.global_step}: " + ", ".join(parts))
            return control

    return GRPOLog()


def _sparse(values: list[float], n: int) -> list[float]:
    """At most ``n`` values spread evenly over ``values``, first and last included."""
    if len(values) <= n:
        return values
    return [values[round(i * (len(values) - 1) / (n - 1))] for i in range(n)]


def quiet() -> None:
    """Turn off the datasets/transformers progress bars (they flood the agent's log), and
    the warning trl gives once per trainer for a renamed transformers API (nothing to act on)."""
    warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing", category=FutureWarning)
    with contextlib.suppress(ImportError):
        import datasets

        datasets.disable_progress_bars()
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()


def _last_loss(trainer) -> float:
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    return losses[-1] if losses else float("nan")


def load(path: str):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    quiet()
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path)
    return model, tokenizer
