"""reference-grpo: an SFT warm-up, then GRPO with a rule-based reward, submitting after each.

The plan:

1. Supervised fine-tuning for about half the time left, then save and submit: this teaches
   the model the answer format ("a + b = c\\n#### c"), which a random or base model lacks
   and which GRPO alone would take long to discover.
2. GRPO rounds (trl's ``GRPOTrainer``) from the best checkpoint so far, sampling
   ``num_generations`` completions per prompt and rewarding them by rule: 1.0 when the final
   answer equals the reference's number after '####', plus a small bonus for using the
   '####' format. Each round is saved and submitted; a round that scored below the best is
   undone (the next round restarts from the best checkpoint) with half the learning rate.

Every round ends early enough that its submission is graded before the deadline.
"""

from __future__ import annotations

import time

from common import (
    MODEL_PATH,
    final_answer,
    gold_number,
    graded_text,
    grpo,
    grpo_rows,
    load,
    log,
    prompt_completion_rows,
    same_number,
    save,
    sft,
    submit,
    time_left,
)

SFT_SHARE = 0.5  # of the time left at the start
SFT_LR = 2e-3
GRPO_LR = 1e-4
GRPO_ROUNDS = 2
MIN_GRPO_ROUND_S = 20.0  # a shorter round is not worth a submission
SAFETY_S = 10.0  # stop early enough that the last submission is graded before the deadline
OVERHEAD_S = 10.0  # per round: trainer set-up, saving, loading a checkpoint back
FORMAT_BONUS = 0.1


def reward(completions, answer, **kwargs) -> list[float]:
    """1.0 for the right final number (read as the grader reads it), plus a format bonus."""
    out = []
    for completion, ref in zip(completions, answer, strict=True):
        text = graded_text(completion)
        score = 1.0 if same_number(final_answer(text), gold_number(ref)) else 0.0
        out.append(score + (FORMAT_BONUS if "####" in text else 0.0))
    return out


class Tracker:
    """The best submission so far, and how long a submission's grading takes."""

    def __init__(self) -> None:
        self.best_score: float | None = None
        self.best_path = None
        self.eval_estimate = 20.0  # refined from each submission's round trip

    def submit(self, path) -> float | None:
        t0 = time.time()
        result = submit(path)
        self.eval_estimate = max(self.eval_estimate, time.time() - t0)
        score = result.get("score") if result else None
        if self.best_path is None:
            self.best_path = path  # something to restart from, even if ungraded
        if score is not None and (self.best_score is None or score >= self.best_score):
            self.best_score, self.best_path = score, path
        return score


def plan_rounds(left: float, rounds: int, per_submission: float) -> tuple[int, float]:
    """The most rounds (up to ``rounds``) that fit in ``left`` seconds, each at least
    ``MIN_GRPO_ROUND_S`` of training plus a submission; returns (rounds, seconds each)."""
    for n in range(rounds, 0, -1):
        per_round = left / n - per_submission
        if per_round >= MIN_GRPO_ROUND_S:
            return n, per_round
    return 0, 0.0


def main() -> None:
    model, tokenizer = load(MODEL_PATH)
    track = Tracker()

    # 1. SFT warm-up: about SFT_SHARE of the training time, i.e. of the time left net of the
    # submissions (one after SFT, one per GRPO round).
    per_submission = track.eval_estimate + OVERHEAD_S
    left = time_left() - SAFETY_S
    train_s = left - (1 + GRPO_ROUNDS) * per_submission
    sft_s = train_s * SFT_SHARE
    if train_s * (1 - SFT_SHARE) < MIN_GRPO_ROUND_S:  # no time for GRPO: SFT only
        sft_s = left - per_submission
    if sft_s < 5:
        log(f"{left:.0f}s left: not enough time to train")
        return
    log(f"SFT warm-up: {sft_s:.0f}s at lr={SFT_LR:g}")
    model = sft(model, tokenizer, prompt_completion_rows(tokenizer), sft_s, SFT_LR)
    track.submit(save(model, tokenizer))

    # 2. GRPO rounds from the best checkpoint; fewer, longer rounds if grading is slow.
    rows = grpo_rows(tokenizer)
    lr, done = GRPO_LR, 0
    while True:
        left = time_left() - SAFETY_S
        rounds, per_round = plan_rounds(left, GRPO_ROUNDS - done,
                                        track.eval_estimate + OVERHEAD_S)
        if rounds == 0:
            log(f"{left:.0f}s left: no time for another GRPO round")
            break
        done += 1
        log(f"GRPO round {done} ({rounds - 1} more planned): {per_round:.0f}s at lr={lr:g}")
        try:
            model, _ = grpo(model, tokenizer, rows, [reward], per_round, lr, seed=done)
        except Exception as err:  # keep what was submitted; report and stop here
            log(f"GRPO round {done} failed: {type(err).__name__}: {err}")
            break
        path = save(model, tokenizer)
        score = track.submit(path)
        if score is not None and track.best_path != path:
            log(f"score {score} < best {track.best_score}: back to {track.best_path.name},"
                f" lr halved")
            model, _ = load(str(track.best_path))
            lr /= 2
    log(f"done: best score {track.best_score} ({track.best_path})")


if __name__ == "__main__":
    main()
