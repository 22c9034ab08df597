"""The reference's AlpacaEval annotator is public (issue #39 item 8): RD-Agent
``benchmarks/alpacaeval/annotators_gpt52_fn/`` at 471eb30d, a ``configs.yaml``, its
``alpaca_eval_fn.txt`` and 100 sample annotations (``annotations_seed0_configs.json``; the
fixture keeps each one's instruction, preference and raw completion). agent2rl's
``annotators_gpt52_fn`` judge is checked against all three."""

from __future__ import annotations

import json
from pathlib import Path

from agent2rl.scoring.judges import protocol, ranking

FIXTURE = Path(__file__).resolve().parents[2] / "support" / "fixtures" / "alpaca_eval"

#: sha256 of the reference's ``annotators_gpt52_fn/alpaca_eval_fn.txt``
REFERENCE_TEMPLATE_SHA256 = "12490d7306fcdcc6d3963ae03ea0d16c043cfbe2f2d10a7ff36762b6c1580b2e"
#: the reference's configs.yaml: its ``completions_kwargs`` (tools, tool_choice, model)
REFERENCE_TOOL = {
    "type": "function",
    "function": {
        "name": "make_partial_leaderboard",
        "description": "Make a leaderboard of models given a list of the models ordered by the "
        "preference of their outputs.",
        "strict": True,
        "parameters": {
            "type": "object",
            "properties": {
                "ordered_models": {
                    "type": "array",
                    "description": "A list of models ordered by the preference of their "
                    "outputs. The first model in the list has the best output.",
                    "items": {
                        "type": "object",
                        "properties": {
                            "model": {"type": "string", "description": "The name of the model"},
                            "rank": {
                                "type": "number",
                                "description": "Order of preference of the model, 1 has the "
                                "best output",
                            },
                        },
                        "additionalProperties": False,
                        "required": ["model", "rank"],
                    },
                }
            },
            "additionalProperties": False,
            "required": ["ordered_models"],
        },
    },
}


def test_template_and_function_are_the_reference_configs() -> None:
    assert ranking.TEMPLATE_SHA256 == REFERENCE_TEMPLATE_SHA256
    assert ranking.TOOL == REFERENCE_TOOL
    assert ranking.TOOL_CHOICE == {"type": "function", "function": {"name": ranking.FUNCTION}}
    assert ranking.JUDGE_CONFIGS[ranking.NAME][0] == "gpt-5.2"
    # configs.yaml: max_tokens 100, temperature 0 (sent as max_completion_tokens: GPT-5 models
    # refuse max_tokens)
    assert (ranking.MAX_COMPLETION_TOKENS, ranking.TEMPERATURE) == (100, 0)


def test_the_reference_samples_read_back_to_their_preferences() -> None:
    rows = json.loads((FIXTURE / "gpt52_fn_annotations.json").read_text())
    assert len(rows) == 100
    for r in rows:
        shown = ranking.preference_from_ranking(r["preference_raw_completion"])
        # the order the judge saw is alpaca_eval's seeded one; the preference is unswapped
        assert protocol.unswap(shown, protocol.is_swapped(r["instruction"])) == r["preference"]
