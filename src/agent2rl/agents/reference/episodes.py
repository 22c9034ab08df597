"""The reference agents' code for interactive (level-3) tasks: episodes as training data, and
multi-turn GRPO with rollouts collected from the rollout service.

Like ``common.py`` this file is copied into the agent's ``code/`` and uses only what a
workspace offers: ``data/protocol.py`` (the grader's prompt and action protocol),
``data/env_client.py`` (the rollout service), torch and transformers.
"""

from __future__ import annotations

import inspect
import math
import random
import sys
import time
from dataclasses import dataclass, field

from common import DATA_PATH, eval_format, is_chat, log, read_jsonl, sampled_texts

sys.path.insert(0, str(DATA_PATH))

import protocol as proto  # noqa: E402  (lives in data/, found through sys.path)
from env_client import EnvClient, EnvError  # noqa: E402


def episode_format() -> proto.EpisodeFormat:
    return proto.EpisodeFormat.from_dict(eval_format())


class Prompter:
    """Builds the grader's prompt for the tokenizer's model: the text prompt for a base
    model (and for every model under a protocol that uses no chat template, such as react),
    the chat-templated user message for a chat model."""

    def __init__(self, tokenizer, fmt: proto.EpisodeFormat) -> None:
        self.tokenizer, self.fmt = tokenizer, fmt
        self.chat = is_chat(tokenizer) and fmt.use_chat_template

    def __call__(self, goal: str, steps, observation: str, admissible, group=None) -> str:
        if not self.chat:
            return proto.build_prompt(goal, steps, observation, admissible, self.fmt, group)
        message = proto.build_chat_message(goal, steps, observation, admissible, self.fmt, group)
        return self.tokenizer.apply_chat_template(
            [{"role": "user", "content": message}], tokenize=False, add_generation_prompt=True
        )

    def completion(self, action: str) -> str:
        return proto.completion_for(action) if not self.chat else action


def expert_steps(game: dict) -> list[tuple[str, str, list[str]]]:
    """(observation, action, admissible actions) per step of a walkthrough, without the
    expert's opening ``look`` (it only repeats the room's description)."""
    steps = game["steps"]
    if len(steps) > 1 and steps[0]["action"] == "look":
        steps = [{**steps[1], "observation": steps[0]["observation"]}, *steps[2:]]
    return [(s["observation"], s["action"], s["admissible_actions"]) for s in steps]


#: In per-step rows, each step after the first gets, with this probability, a twin where the
#: previous action was repeated and failed ("Nothing happens."): the model learns to move on
#: instead of repeating a failing action, which greedy decoding would do forever. (Transcript
#: windows have none: on alfworld-lite with the tiny model they did not help.)
RECOVERY_SHARE = 0.5
#: Transcript windows start every WINDOW_STRIDE steps of an episode (sooner where a window
#: ends early): each action is supervised in a few contexts, with more or less history.
WINDOW_STRIDE = 2


def sft_rows(prompter: Prompter, rng: random.Random) -> list[dict]:
    """Training rows from the expert walkthroughs, prompted exactly as the grader prompts.

    For a base model whose prompts list no admissible actions, each row is a window of an
    episode's transcript (``input_ids`` and a ``completion_mask`` over every action in it):
    each prompt is a stretch of the transcript, so one sequence supervises several steps at
    once, each in the context the grader would give it. Otherwise (a chat model, or action
    lists, which only the current step shows) each row is one step's prompt and completion,
    plus the failed-repeat twins of :data:`RECOVERY_SHARE`.
    """
    if prompter.chat or prompter.fmt.show_admissible or prompter.fmt.protocol == "react":
        rows = _step_rows(prompter, rng)
    else:
        rows = _window_rows(prompter)
    rng.shuffle(rows)
    return rows


def _step_rows(prompter: Prompter, rng: random.Random) -> list[dict]:
    rows = []
    for game in read_jsonl("walkthroughs.jsonl"):
        steps = expert_steps(game)
        for t, (obs, action, adm) in enumerate(steps):
            history = [(o, a) for o, a, _ in steps[:t]]
            # (history, observation) per row: the step, then its failed-repeat twin, only
            # where repeating the previous action would fail
            contexts = [(history, obs)]
            if t > 0 and steps[t - 1][1] not in adm and rng.random() < RECOVERY_SHARE:
                contexts.append(([*history, (obs, steps[t - 1][1])], "Nothing happens."))
            rows += [
                {
                    "prompt": prompter(game["goal"], past, shown, adm, game.get("group")),
                    "completion": prompter.completion(action),
                }
                for past, shown in contexts
            ]
    return rows


def _window_rows(prompter: Prompter) -> list[dict]:
    fmt, tok = prompter.fmt, prompter.tokenizer
    rows = []
    for game in read_jsonl("walkthroughs.jsonl"):
        steps = expert_steps(game)
        task, pieces = _transcript(game["goal"], [(o, a) for o, a, _ in steps], fmt)
        j = 0
        while j < len(steps):
            # Segments of (text, supervised); the grader's prompt at step t is the text from
            # the task line up to t's observation, so it must fit in max_prompt_chars.
            segments: list[tuple[str, bool]] = [(task, False)]
            chars, end = len(task), j
            for t in range(j, min(len(steps), j + fmt.history + 1)):
                obs_text, action_text = pieces[t]
                if chars + len(obs_text) > fmt.max_prompt_chars:
                    break
                segments += [(obs_text, False), (action_text, True)]
                chars, end = chars + len(obs_text) + len(action_text), t + 1
            if end > j:
                rows.append(_tokenize(tok, segments))
            # the next window starts within this one, or right after it: no step is skipped
            j = min(j + WINDOW_STRIDE, max(end, j + 1))
    return rows


def _transcript(goal: str, pairs: list[tuple[str, str]], fmt):
    """``proto.transcript``, given the format when the protocol's pages depend on it
    (WebShop's cuts each page to ``max_observation_chars``)."""
    if "fmt" in inspect.signature(proto.transcript).parameters:
        return proto.transcript(goal, pairs, fmt)
    return proto.transcript(goal, pairs)


def _tokenize(tokenizer, segments: list[tuple[str, bool]]) -> dict:
    """``input_ids`` and ``completion_mask`` of text segments tokenized one by one (so that
    token boundaries fall where a prompt ends, as when the grader tokenizes a prompt); the
    first gets the tokenizer's special tokens, as a prompt does."""
    ids: list[int] = []
    mask: list[int] = []
    for i, (text, supervised) in enumerate(segments):
        part = tokenizer(text, add_special_tokens=i == 0)["input_ids"]
        ids += part
        mask += [int(supervised)] * len(part)
    return {"input_ids": ids, "completion_mask": mask}


@dataclass
class Turn:
    prompt: str
    completion: str


@dataclass
class Trajectory:
    game_id: str
    turns: list[Turn] = field(default_factory=list)
    won: bool = False
    reward: float = 0.0


def sample_actions(model, tokenizer, prompts: list[str], fmt, temperature: float) -> list[str]:
    """One sampled reply per prompt (cut at the protocol's stop strings)."""
    tokenizer.padding_side = "left"
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    batch = tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
    limit = getattr(model.config, "max_position_embeddings", None)
    if limit and batch["input_ids"].shape[1] + fmt.max_new_tokens > limit:
        keep = limit - fmt.max_new_tokens
        batch = {k: v[:, -keep:] for k, v in batch.items()}
    texts = sampled_texts(model, tokenizer, batch, temperature, fmt.max_new_tokens, list(fmt.stop))
    return [t.split("\n", 1)[0] for t in texts]


#: reward lost per action the game did not admit ("Nothing happens."), as a share of the
#: episode: wins are rare for a small model, and this gives GRPO a signal before the first
#: one (fewer wasted actions) without ever ranking a loss above a win.
INVALID_PENALTY = 0.5


def rollout_group(
    model, tokenizer, client: EnvClient, prompter: Prompter, game_id: str, size: int, temp: float
) -> list[Trajectory]:
    """``size`` episodes of one game played side by side through the rollout service with
    sampled actions. A trajectory's reward: the episode's return (1 for an ALFWorld win,
    the purchase reward in WebShop), minus :data:`INVALID_PENALTY` times the share of its
    actions that the game did not admit ("Nothing happens.") or refused (HTTP 400: like
    the grader, the turn is used and the next prompt shows ``Refused: <why>``)."""
    sessions = [client.session(game_id=game_id) for _ in range(size)]
    trajs = [Trajectory(game_id) for _ in sessions]
    # (observation, action) per step played, as the protocol's prompts show history
    played: list[list[tuple[str, str]]] = [[] for _ in sessions]
    shown = [s.observation for s in sessions]
    returns = [0.0] * size
    invalid = [0] * size
    try:
        while True:
            # A refused action uses no step on the service but a turn, as in grading.
            live = [
                (i, s)
                for i, s in enumerate(sessions)
                if not s.done and len(played[i]) < prompter.fmt.max_steps
            ]
            if not live:
                break
            prompts = [
                prompter(
                    s.goal, played[i], shown[i], s.admissible_actions, getattr(s, "group", None)
                )
                for i, s in live
            ]
            replies = sample_actions(model, tokenizer, prompts, prompter.fmt, temp)
            for (i, s), prompt, reply in zip(live, prompts, replies, strict=True):
                # the grader's reading of the reply; the service takes one non-empty line
                # of at most 256 characters (a long react "think:" is cut there)
                action = (prompter.fmt.parse(reply, None) or "look")[:256]
                trajs[i].turns.append(Turn(prompt, prompter.completion(action)))
                played[i].append((shown[i], action))
                try:
                    s.step(action)
                except EnvError as err:
                    if err.status != 400:
                        raise
                    shown[i], invalid[i] = f"Refused: {err.message}", invalid[i] + 1
                    continue
                shown[i] = s.observation
                returns[i] += float(s.reward)
                invalid[i] += shown[i] == "Nothing happens."
    finally:
        for s in sessions:
            s.close()
    for i, (s, t) in enumerate(zip(sessions, trajs, strict=True)):
        t.won = bool(s.won)
        t.reward = returns[i] - INVALID_PENALTY * invalid[i] / max(1, len(played[i]))
    return trajs


def policy_loss(model, tokenizer, trajs: list[Trajectory], advantages: list[float], micro: int):
    """Backpropagate the GRPO objective: each turn's completion log-likelihood weighted by its
    trajectory's advantage (averaged over turns). Returns the mean loss."""
    import torch

    items = [(t, a) for traj, a in zip(trajs, advantages, strict=True) if a for t in traj.turns]
    if not items:
        return 0.0
    total = 0.0
    tokenizer.padding_side = "right"
    for start in range(0, len(items), micro):
        chunk = items[start : start + micro]
        prompts = [tokenizer(t.prompt, add_special_tokens=False)["input_ids"] for t, _ in chunk]
        comps = [tokenizer(t.completion, add_special_tokens=False)["input_ids"] for t, _ in chunk]
        limit = getattr(model.config, "max_position_embeddings", 4096)
        pairs = list(zip(prompts, comps, strict=True))
        seqs = [(p + c)[-limit:] for p, c in pairs]
        masks = [([0] * len(p) + [1] * len(c))[-limit:] for p, c in pairs]
        ids = _padded(seqs, tokenizer.pad_token_id or 0, model.device)
        mask = _padded(masks, 0, model.device)
        attn = _padded([[1] * len(s) for s in seqs], 0, model.device)
        logits = model(input_ids=ids, attention_mask=attn).logits[:, :-1]
        logp = torch.log_softmax(logits.float(), -1).gather(-1, ids[:, 1:, None])[..., 0]
        m = mask[:, 1:].float()
        seq_logp = (logp * m).sum(-1) / m.sum(-1).clamp(min=1)
        adv = torch.tensor([a for _, a in chunk], device=model.device)
        loss = -(adv * seq_logp).sum() / len(items)
        loss.backward()
        total += float(loss.detach()) * len(items)
    return total / len(items)


def _padded(rows: list[list[int]], value: int, device):
    """``rows`` right-padded with ``value`` to the longest, as a tensor on ``device``."""
    import torch

    width = max(map(len, rows))
    return torch.tensor([r + [value] * (width - len(r)) for r in rows], device=device)


#: the rollouts' sampling temperature, and the turns per forward and backward pass of an update
TEMPERATURE = 1.0
MICRO_BATCH = 16


def grpo(
    model, tokenizer, seconds: float, lr: float, group_size: int = 8, seed: int = 0
) -> tuple[object, dict]:
    """Multi-turn GRPO for about ``seconds``: each step plays ``group_size`` episodes of one
    random public game through the rollout service, scores each by its return, and
    raises the likelihood of the actions of better-than-average episodes (group-normalised
    advantages; groups where all episodes agree teach nothing and are skipped). Returns
    ``(model, stats)`` with ``steps``, ``episodes``, ``won`` and ``updates``."""
    import torch

    client = EnvClient()
    games = [g["game_id"] for g in client.games()]
    rng = random.Random(seed)
    prompter = Prompter(tokenizer, episode_format())
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    stop_at = time.time() + seconds
    stats = {"steps": 0, "episodes": 0, "won": 0, "updates": 0}
    while time.time() < stop_at:
        model.eval()
        trajs = rollout_group(
            model, tokenizer, client, prompter, rng.choice(games), group_size, TEMPERATURE
        )
        rewards = [t.reward for t in trajs]
        stats["steps"] += 1
        stats["episodes"] += len(trajs)
        stats["won"] += sum(t.won for t in trajs)
        mean = sum(rewards) / len(rewards)
        std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / len(rewards))
        if std < 1e-6:
            continue
        model.train()
        optimizer.zero_grad()
        loss = policy_loss(
            model, tokenizer, trajs, [(r - mean) / std for r in rewards], MICRO_BATCH
        )
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        stats["updates"] += 1
        log(
            f"GRPO step {stats['steps']}: {sum(t.won for t in trajs)}/{len(trajs)} won, "
            f"mean reward {mean:.3f}, loss {loss:.4f}"
        )
    model.eval()
    log(
        f"GRPO: {stats['steps']} groups, {stats['episodes']} episodes "
        f"({stats['won']} won), {stats['updates']} updates"
    )
    return model, stats
