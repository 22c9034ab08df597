"""What judging one full ``alpacaeval`` submission costs: judge requests, tokens and list-price
cost for the 805 instructions, measured on the scripted OpenAI-compatible judge (the fake
provider of ``tests/support``, on loopback) through the grader's own scorer
(:class:`agent2rl.scoring.Judge` over :func:`agent2rl.scoring.judges.openai_judge`), then a
second grading of the same outputs (the judgment cache: no request).

The 805 reference outputs and a model's 805 outputs come from AlpacaEval's files
(``--eval-dir``, default ``../shared/data/alpaca_eval``: ``reference_outputs_gpt4_1106_preview
.json`` and ``models/<model>/model_outputs.json``). The scripted judge counts tokens with its
word-and-punctuation tokenizer; for comparison the official annotations (when present) give
what GPT-4-turbo's own tokenizer counted for the same model (``price_per_example`` is
``total_tokens * $0.01 / 1000`` there).

    python benchmarks/alpacaeval_judge.py [--eval-dir DIR] [--model gemma-2b-it]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from pathlib import Path

from agent2rl.dataset import Sample
from agent2rl.scoring import Judge
from agent2rl.scoring.judges import openai_judge
from agent2rl.solvers.base import Output

REPO = Path(__file__).resolve().parent.parent


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--eval-dir", type=Path, default=REPO.parent / "shared/data/alpaca_eval")
    ap.add_argument("--model", default="gemma-2b-it", help="whose outputs are judged")
    args = ap.parse_args(argv)
    ref_path = args.eval_dir / "reference_outputs_gpt4_1106_preview.json"
    out_path = args.eval_dir / "models" / args.model / "model_outputs.json"
    if not ref_path.is_file() or not out_path.is_file():
        print(f"needs {ref_path} and {out_path} (AlpacaEval's files): pass --eval-dir")
        return 2
    sys.path.insert(0, str(REPO / "tests"))
    from support.fake_provider import Turn, start_fake_provider

    reference = json.loads(ref_path.read_text())
    outputs = {r["instruction"]: r["output"] for r in json.loads(out_path.read_text())}
    samples = [
        Sample(f"alpacaeval-{i:03d}", {"instruction": r["instruction"]}, r["output"], {"index": i})
        for i, r in enumerate(reference)
    ]
    # a model without an output for an instruction (phi-2 has two gaps) answers ""
    answers = [Output(outputs.get(s.input["instruction"], "")) for s in samples]

    def verdict(body: dict) -> Turn:
        return Turn(top_logprobs=[("M", math.log(0.6)), ("m", math.log(0.4))])

    with start_fake_provider() as judge_server, tempfile.TemporaryDirectory() as tmp:
        judge_server.respond_with(verdict)
        rows = []
        for label in ("first grading", "same outputs again"):
            judge = openai_judge(
                "gpt-4-1106-preview",
                judge_server.openai_base_url,
                cache_path=Path(tmp) / "judgments.sqlite3",
                usage_path=Path(tmp) / f"{len(rows)}.jsonl",
                api_key="",
            )
            scorer = Judge(judge)
            started = time.perf_counter()
            items = scorer.score(samples, answers)
            seconds = time.perf_counter() - started
            totals = scorer.details(items, answers)["judge"]
            judge.close()
            rows.append((label, totals, seconds))
    print(f"alpacaeval judge cost, {len(samples)} items ({args.model}'s outputs), scripted judge:")
    for label, t, seconds in rows:
        print(
            f"  {label:<20} requests {t['requests']:>4}  cache hits {t['cache_hits']:>4}  "
            f"input tokens {t['input_tokens']:>8,}  output tokens {t['output_tokens']:>4}  "
            f"cost ${t['cost_usd']:.2f} (gpt-4-1106-preview list price)  "
            f"{len(samples) / seconds:.0f} pairs/s"
        )
    first = rows[0][1]
    print(
        f"  per submission: {first['total_tokens']:,} judge tokens "
        f"({first['total_tokens'] / max(first['requests'], 1):.0f} per request)"
    )
    official = (
        args.eval_dir / "models" / args.model / "weighted_alpaca_eval_gpt4_turbo_annotations.json"
    )
    if official.is_file():
        ann = json.loads(official.read_text())
        tokens = sum(round(a["price_per_example"] / 1e-5) for a in ann if a["raw_completion"])
        calls = sum(1 for a in ann if a["raw_completion"])
        print(
            f"  the official judge on the same outputs: {calls} requests, {tokens:,} tokens "
            f"(GPT-4-turbo's tokenizer; ${tokens * 1e-5:.2f} at $10/M input)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
