"""AlpacaEval 2.0's metrics and judging protocol against the official data.

- :func:`win_rates` reproduces the leaderboard's numbers from the official judge's
  annotations of three models;
- the protocol (position swap seeded per instruction, logprob preference, flip back)
  reproduces *every* official preference from the judge's raw answer;
- the packaged annotator configuration is the one :mod:`protocol` implements.

Equality with the ``alpaca-eval`` package's own code is in ``test_alpaca_eval_library.py``;
the LC win rate against the leaderboard needs ``df_gamed.csv`` from the hub (``network``).
"""

from __future__ import annotations

import csv
import hashlib
import json
import lzma
import math
from importlib import metadata
from pathlib import Path

import pytest
import yaml
from support import FIXTURES

from agent2rl.scoring.judges import protocol
from agent2rl.scoring.judges.win_rates import read_df_gamed, win_rates

DATA = FIXTURES / "alpaca_eval"
MODELS = ("alpaca-7b", "gemma-2b-it", "phi-2")
#: sha256 of the official annotation files (uncompressed), see the fixture README
SHA256 = {
    "alpaca-7b": "41047c654c6c5ddc0290fb207367e3f458d22692045eb41927eb64103a2cb764",
    "gemma-2b-it": "d1237f2a044874650a93edb41ebab5983019e988fc0ba229051bc390b598a604",
    "phi-2": "b333fac4466be5318d8049b2b9ae71c377075e75c00bc83d13edf8dfca5aa5ad",
}


def annotations(model: str) -> list[dict]:
    raw = lzma.decompress((DATA / "annotations" / f"{model}.json.xz").read_bytes())
    assert hashlib.sha256(raw).hexdigest() == SHA256[model], "fixture differs from the original"
    return json.loads(raw)


def leaderboard() -> dict[str, dict[str, str]]:
    with open(DATA / "leaderboard_weighted_alpaca_eval_gpt4_turbo.csv", newline="") as fh:
        return {row[""]: row for row in csv.DictReader(fh)}


@pytest.mark.parametrize("model", MODELS)
def test_win_rates_equal_the_leaderboard(model: str) -> None:
    row = leaderboard()[model]
    got = win_rates(annotations(model))
    assert abs(got["win_rate"] - float(row["win_rate"])) < 1e-6
    assert abs(got["standard_error"] - float(row["standard_error"])) < 1e-6
    assert abs(got["discrete_win_rate"] - float(row["discrete_win_rate"])) < 1e-6
    for key in ("n_wins", "n_wins_base", "n_draws", "n_total"):
        assert got[key] == int(row[key]), key
    assert "length_controlled_winrate" not in got  # no GLM data given


def test_win_rates_edge_cases() -> None:
    def ann(*prefs):
        return [{"instruction": "", "output_1": "", "output_2": "", "preference": p} for p in prefs]

    got = win_rates(ann(2.0, 1.0, 1.5, 0, None, math.nan, 2.5))
    # 0 is the package's old draw; None/NaN/out-of-range are dropped from the rates
    assert got["n_total"] == 4 and got["n_draws"] == 2
    assert got["win_rate"] == pytest.approx(50.0) and got["n_wins"] == 1
    assert got["n_wins_base"] == 1
    # the discrete rule rounds 2.5 to 2 (half-to-even) and keeps it: 5 valid, 2 wins, 2 draws
    assert got["discrete_win_rate"] == pytest.approx(100 * (2 + 0 + 1) / 5)
    empty = win_rates([])
    assert empty["n_total"] == 0 and math.isnan(empty["win_rate"])
    assert math.isnan(win_rates(ann(1.7))["standard_error"])


@pytest.mark.parametrize("model", MODELS)
def test_protocol_reproduces_every_official_preference(model: str) -> None:
    """The official judge's raw answer (its top logprobs over the displayed order), run
    through our swap and parser, gives the published preference for all 805 (or 803)
    instructions: so the seed, the label mapping and the flip-back are AlpacaEval's."""
    rows = annotations(model)
    swapped = 0
    for a in rows:
        if a["raw_completion"] is None:
            # no request: identical outputs are a draw
            assert a["output_1"] == a["output_2"] and a["preference"] == 1.5
            continue
        first = a["raw_completion"]["logprobs"]["content"][0]
        top = [(t["token"], t["logprob"]) for t in first["top_logprobs"]]
        swap = protocol.is_swapped(a["instruction"])
        swapped += swap
        pref = protocol.unswap(protocol.preference_from_logprobs(top), swap)
        assert pref == pytest.approx(a["preference"], abs=1e-9), a["instruction"][:60]
    assert 0.4 < swapped / len(rows) < 0.6  # about half are shown the model's output first


def test_preference_from_logprobs_edge_cases() -> None:
    assert protocol.preference_from_logprobs([("m", -0.1), ("The", -3.0)]) == 1.0
    assert protocol.preference_from_logprobs([("M", -5.0)]) == 2.0
    assert math.isnan(protocol.preference_from_logprobs([("The", -0.1), ("A", -2)]))
    even = protocol.preference_from_logprobs([("M", math.log(0.25)), ("m", math.log(0.25))])
    assert even == pytest.approx(1.5)
    # a label listed twice counts with its last value (the package's dict)
    twice = protocol.preference_from_logprobs([("m", 0.0), ("M", 0.0), ("m", -100.0)])
    assert twice == pytest.approx(2.0)
    assert protocol.unswap(1.2, True) == pytest.approx(1.8)
    assert protocol.unswap(1.2, False) == 1.2


def test_prompt_fills_each_placeholder_once_in_order() -> None:
    msgs = protocol.messages("Say {output_1}", "REF", "MODEL")
    assert [m["role"] for m in msgs] == ["system", "user"]
    user = msgs[1]["content"]
    # AlpacaEval's make_prompts replaces the first occurrence, which here is the
    # instruction's own "{output_1}": the template's slot for output_1 stays as it is.
    assert '"instruction": """Say REF""",' in user
    assert '"output": """{output_1}"""' in user and '"output": """MODEL"""' in user
    assert msgs[0]["content"].startswith("You are a highly efficient assistant")
    assert user.endswith("## Best Model Identifier")


def test_the_packaged_annotator_config_is_the_one_implemented() -> None:
    root = Path(str(metadata.distribution("alpaca-eval").locate_file("alpaca_eval")))
    config = yaml.safe_load(
        (root / "evaluators_configs" / protocol.NAME / "configs.yaml").read_text()
    )[protocol.NAME]
    assert config["prompt_template"] == "alpaca_eval_clf_gpt4_turbo/alpaca_eval_clf.txt"
    assert (
        root.parent / protocol.TEMPLATE_PATH
        == root / "evaluators_configs" / (config["prompt_template"])
    )
    kw = config["completions_kwargs"]
    assert kw["model_name"] == protocol.DEFAULT_MODEL
    assert (kw["max_tokens"], kw["temperature"], kw["logprobs"], kw["top_logprobs"]) == (
        protocol.MAX_TOKENS,
        protocol.TEMPERATURE,
        True,
        protocol.TOP_LOGPROBS,
    )
    assert config["fn_completion_parser"] == "logprob_parser"
    parser = config["completion_parser_kwargs"]
    assert parser["numerator_token"] == protocol.FIRST
    assert tuple(parser["denominator_tokens"]) == protocol.LABELS
    assert parser["is_binarize"] is False
    assert protocol.template()  # the sha256 pin holds for the installed package


@pytest.mark.network
@pytest.mark.parametrize("model", MODELS)
def test_length_controlled_win_rate_equals_the_leaderboard(model: str) -> None:
    """Needs ``df_gamed.csv`` from the hub (``tatsu-lab/alpaca_eval``). The leaderboard's LC
    numbers come from the package's GLM on these annotations; scikit-learn versions may
    move them in the last digits, hence the tolerance."""
    from huggingface_hub import hf_hub_download

    path = Path(hf_hub_download("tatsu-lab/alpaca_eval", "df_gamed.csv", repo_type="dataset"))
    got = win_rates(annotations(model), read_df_gamed(path))
    want = float(leaderboard()[model]["length_controlled_winrate"])
    assert got["length_controlled_winrate"] == pytest.approx(want, abs=1e-3)
