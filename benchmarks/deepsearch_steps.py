"""How much SFT the tiny model needs before it copies names from search results on
deepsearch-lite: fine-tune on the walkthrough rows the reference agent builds
(``episodes.sft_rows``) with a plain PyTorch loop (the agent's SFT settings without trl:
AdamW, the rate decaying linearly to 0, loss on the actions only, batch 8), and at each
checkpoint greedily replay the *validation* questions' expert steps (teacher-forced: the
expert's history, never the graded split) and count the actions reproduced exactly, per step
(0: the first search, which copies from the question; 1: the second, which copies a name
from the first results; 2: the answer, copied from the second results).

    python benchmarks/deepsearch_steps.py [--steps 1075] [--lr 2e-3] [--batch 8] [--seed 0]
        [--checkpoints 540,1075] [--variant "n_regions=100 history=0" ...]

Runs on CUDA when there is a GPU (a scan of several variants and seeds takes a few minutes
there), else on the CPU. Step accuracy is a proxy for the graded score: an episode also needs
its searches only close enough for BM25, and its answer exact. What the reference agent's
15-minute run on this 2-core VM trains on is about 1.4 million tokens (757 steps of 8 rows of
232 tokens in version 1's run), so compare variants at equal ``steps x batch x tokens/row``
(printed). Each variant runs in its own process (the agent's code reads its workspace from the
environment at import); ``--variant`` is as in ``interactive_sft.py``. Uses the default
AGENT2RL_HOME.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

from agent_workspace import enter_workspace, run_variant
from interactive_sft import parse_variant
from provenance import machine  # the machine every figure names


def one(options: dict, steps: int, lr: float, batch: int, seed: int, checkpoints: list[int]):
    import torch

    from agent2rl.files import read_jsonl
    from agent2rl.models import resolve_model
    from agent2rl.settings import load_settings
    from agent2rl.tasks import get_task, prepare_task
    from agent2rl.tasks.deepsearch.games import expert_walkthrough
    from agent2rl.tasks.deepsearch.search import BM25Backend

    settings = load_settings()
    task = get_task("deepsearch-lite", options)
    prepared = prepare_task(task, settings.task_store)
    model_ref = resolve_model("tiny", settings.model_store)
    enter_workspace(Path(tempfile.mkdtemp()), task, prepared, model_ref)
    import episodes
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_ref.path)
    prompter = episodes.Prompter(tok, episodes.episode_format())
    rows = episodes.sft_rows(prompter, random.Random(0))
    backend = BM25Backend(read_jsonl(prepared.public.parent / "corpus" / "corpus.jsonl"))
    val = []  # (step index, prompt, expected completion)
    for q in read_jsonl(prepared.validation / "questions.jsonl"):
        walk = expert_walkthrough(backend, q, task.episode_format(), task.opts["top_k"])
        steps_ = episodes.expert_steps(walk) if walk else []
        for t, (obs, action, adm) in enumerate(steps_):
            history = [(o, a) for o, a, _ in steps_[:t]]
            prompt = prompter(walk["goal"], history, obs, adm, walk.get("group"))
            val.append((t, prompt, prompter.completion(action).strip()))

    dev = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(seed)
    rng = random.Random(seed)
    model = AutoModelForCausalLM.from_pretrained(model_ref.path).to(dev).float()
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    decay = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: max(0.0, 1 - s / steps))
    pad = tok.pad_token_id
    limit = model.config.max_position_embeddings - 48

    def accuracy() -> dict[int, float]:
        model.eval()
        tok.padding_side = "left"
        hits: dict[int, list[bool]] = {}
        for i in range(0, len(val), 64):
            chunk = val[i : i + 64]
            enc = tok([p for _, p, _ in chunk], return_tensors="pt", padding=True,
                      add_special_tokens=False)  # fmt: skip
            enc = {k: v[:, -limit:].to(dev) for k, v in enc.items()}
            with torch.no_grad():
                out = model.generate(**enc, max_new_tokens=48, do_sample=False, pad_token_id=pad)
            for (t, _, want), o in zip(chunk, out, strict=True):
                text = tok.decode(o[enc["input_ids"].shape[1] :], skip_special_tokens=True)
                hits.setdefault(t, []).append(text.split("\n")[0].strip() == want)
        model.train()
        return {t: round(sum(h) / len(h), 3) for t, h in sorted(hits.items())}

    order: list[int] = []
    results = []
    started = time.time()
    model.train()
    for step in range(1, steps + 1):
        if not order:
            order = list(range(len(rows)))
            rng.shuffle(order)
        idx = [order.pop() for _ in range(min(batch, len(order)))]
        width = max(len(rows[i]["input_ids"]) for i in idx)
        ids = torch.full((len(idx), width), pad)
        labels = torch.full((len(idx), width), -100)
        mask = torch.zeros((len(idx), width), dtype=torch.long)
        for j, i in enumerate(idx):
            x, m = rows[i]["input_ids"], rows[i]["completion_mask"]
            ids[j, : len(x)] = torch.tensor(x)
            mask[j, : len(x)] = 1
            labels[j, : len(x)] = torch.tensor(
                [a if k else -100 for a, k in zip(x, m, strict=True)]
            )
        loss = model(input_ids=ids.to(dev), attention_mask=mask.to(dev), labels=labels.to(dev)).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        decay.step()
        opt.zero_grad()
        if step in checkpoints:
            results.append({"step": step, "loss": round(loss.item(), 3), "acc": accuracy(),
                            "s": round(time.time() - started)})  # fmt: skip
    tokens = sum(len(r["input_ids"]) for r in rows) / len(rows)
    return {"rows": len(rows), "tokens_per_row": round(tokens), "device": dev,
            "val_steps": len(val), "results": results}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--steps", type=int, default=1075)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seed", type=int, nargs="+", default=[0])
    ap.add_argument("--checkpoints", default="", help="comma-separated steps (default: the end)")
    ap.add_argument("--variant", action="append", default=None, help="key=value task options")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    args = ap.parse_args()
    marks = sorted({int(c) for c in args.checkpoints.split(",") if c} | {args.steps})
    if args.one:
        r = one(json.loads(args.one), args.steps, args.lr, args.batch, args.seed[0], marks)
        print("RESULT " + json.dumps(r))
        return
    print(f"machine: {machine()}")
    print(f"deepsearch-lite: {args.steps} steps at lr {args.lr:g}, batch {args.batch}")
    for variant in args.variant or [""]:
        for seed in args.seed:
            cmd = [sys.executable, __file__, "--one", json.dumps(parse_variant(variant))]
            cmd += ["--steps", str(args.steps), "--lr", str(args.lr), "--batch", str(args.batch)]
            cmd += ["--seed", str(seed), "--checkpoints", ",".join(map(str, marks))]
            r, error = run_variant(cmd)
            label = f"{variant or 'defaults'}, seed {seed}"
            if r is None:
                print(f"{label}: failed\n{error}")
                continue
            print(f"{label}: {r['rows']} rows of {r['tokens_per_row']} tokens, "
                  f"{r['val_steps']} validation steps, on {r['device']}")  # fmt: skip
            for c in r["results"]:
                acc = ", ".join(f"step {t}: {100 * a:.1f}%" for t, a in c["acc"].items())
                tokens = c["step"] * args.batch * r["tokens_per_row"] / 1e6
                print(f"  after {c['step']} steps ({tokens:.2f}M tokens, loss {c['loss']}): "
                      f"{acc}", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
