"""Our reimplementation of AlpacaEval's metrics and protocol equals the ``alpaca-eval``
package's own code, run here on the same inputs.

The package cannot be imported as it is on a current setuptools (its ``utils`` imports
``pkg_resources``, removed in setuptools 81), so this module gives it a stand-in
``pkg_resources`` with the two functions it calls; and its LC GLM downloads ``df_gamed.csv``
from the hub, so the test puts a synthetic one (seeded) where ``huggingface_hub`` looks in
offline mode. Nothing of ours is replaced: the comparison is their code against ours.
"""

from __future__ import annotations

import importlib.metadata
import math
import sys
import types
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from packaging.version import parse as parse_version
from test_alpaca_eval import MODELS, annotations

from agent2rl.scoring.judges import protocol
from agent2rl.scoring.judges.win_rates import (
    LC_MINIMAL,
    length_controlled,
    read_df_gamed,
    win_rates,
)


@pytest.fixture(scope="module")
def ae(tmp_path_factory):
    """The alpaca_eval package, imported with a stand-in pkg_resources if there is none."""
    added = False
    try:
        import pkg_resources  # noqa: F401
    except ImportError:
        shim = types.ModuleType("pkg_resources")
        shim.parse_version = parse_version  # type: ignore[attr-defined]
        shim.get_distribution = lambda name: types.SimpleNamespace(  # type: ignore[attr-defined]
            version=importlib.metadata.version(name)
        )
        sys.modules["pkg_resources"] = shim
        added = True
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import alpaca_eval.completion_parsers as parsers
        import alpaca_eval.constants as constants
        import alpaca_eval.metrics.glm_winrate as glm
        import alpaca_eval.utils as utils
        from alpaca_eval.metrics import get_winrate
    yield types.SimpleNamespace(
        parsers=parsers, constants=constants, glm=glm, utils=utils, get_winrate=get_winrate
    )
    if added:
        sys.modules.pop("pkg_resources", None)


def synthetic_df_gamed(n: int = 805, seed: int = 0) -> pd.DataFrame:
    """``df_gamed.csv``'s shape: two gamed baselines' annotations of the ``n`` instructions
    (index, instruction_difficulty, preference, std_delta_len, not_gamed_baseline=False)."""
    rng = np.random.default_rng(seed)
    difficulty = rng.normal(0, 1, n)
    rows = [
        {
            "index": i,
            "instruction_difficulty": difficulty[i],
            "preference": float(rng.uniform()),
            "std_delta_len": float(rng.normal()),
            "not_gamed_baseline": False,
            "model": model,
        }
        for model in ("gpt4_1106_preview_verbose", "gpt4_1106_preview_concise")
        for i in range(n)
    ]
    return pd.DataFrame(rows)


@pytest.mark.parametrize("model", MODELS)
def test_win_rates_equal_the_package(ae, model: str) -> None:
    rows = annotations(model)
    theirs, ours = ae.get_winrate(rows), win_rates(rows)
    assert set(theirs) == set(ours)
    for key, value in theirs.items():
        assert ours[key] == pytest.approx(float(value), abs=1e-12), key


def test_parser_and_prompt_equal_the_package(ae) -> None:
    rows = annotations("gemma-2b-it")
    for a in rows:
        top = a["raw_completion"]["logprobs"]["content"][0]["top_logprobs"]
        theirs = ae.parsers.logprob_parser(
            a["raw_completion"],
            numerator_token="m",
            denominator_tokens=["m", "M"],
            is_binarize=False,
        )[0]
        ours = protocol.preference_from_logprobs([(t["token"], t["logprob"]) for t in top])
        assert ours == pytest.approx(theirs, abs=1e-12)
    template = protocol.template()
    for a in rows[:40]:
        df = pd.DataFrame([{k: a[k] for k in ("instruction", "output_1", "output_2")}])
        prompts, _ = ae.utils.make_prompts(df, template)
        theirs = ae.utils.prompt_to_chatml(prompts[0].strip())
        assert protocol.messages(a["instruction"], a["output_1"], a["output_2"]) == theirs


def _offline_df_gamed(ae, tmp_path, monkeypatch, gamed: pd.DataFrame) -> Path:
    """Put ``gamed`` where the package's hf_hub_download finds df_gamed.csv offline."""
    repo = tmp_path / "datasets--tatsu-lab--alpaca_eval"
    (repo / "snapshots" / "0000").mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0000")
    gamed.to_csv(repo / "snapshots" / "0000" / "df_gamed.csv", index=False)
    monkeypatch.setattr(ae.constants, "DEFAULT_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(ae.glm.constants, "DEFAULT_CACHE_DIR", str(tmp_path))
    return repo


@pytest.mark.parametrize("model", MODELS)
def test_length_controlled_win_rate_equals_the_package(ae, tmp_path, monkeypatch, model) -> None:
    """The package's GLM reads df_gamed.csv through hf_hub_download; offline, that returns
    the file from the cache, where the synthetic one is put."""
    gamed = synthetic_df_gamed(seed=len(model))
    repo = _offline_df_gamed(ae, tmp_path, monkeypatch, gamed)
    rows = annotations(model)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = ae.glm.get_length_controlled_winrate(rows, save_weights_dir=None)
    ours = win_rates(rows, read_df_gamed(repo / "snapshots" / "0000" / "df_gamed.csv"))
    for key, value in theirs.items():
        assert ours[key] == pytest.approx(float(value), abs=1e-9), key
    assert not math.isnan(ours["length_controlled_winrate"])
    # the LC rate is the mean of the per-item predictions the scorer uses as item scores
    lc = length_controlled(rows, gamed)
    assert lc.predictions.mean() * 100 == pytest.approx(ours["length_controlled_winrate"])


@pytest.mark.parametrize("model", MODELS)
def test_minimal_glm_equals_the_package(ae, tmp_path, monkeypatch, model) -> None:
    """``length_controlled_minimal`` (alpaca-lite's LC) reads no df_gamed.csv of ours; the
    package still downloads one (for a column its formula does not use), hence the file."""
    _offline_df_gamed(ae, tmp_path, monkeypatch, synthetic_df_gamed(seed=1))
    # a shorter, unbalanced subset: the GLM must not depend on the eval set's size
    rows = annotations(model)[: 300 + 50 * len(model)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = ae.glm.get_length_controlled_winrate(
            rows, glm_name=LC_MINIMAL, save_weights_dir=None
        )
    ours = length_controlled(rows, None, LC_MINIMAL)
    assert ours.winrate == pytest.approx(float(theirs["length_controlled_winrate"]), abs=1e-9)
    assert ours.standard_error == pytest.approx(float(theirs["lc_standard_error"]), abs=1e-9)
    # the length term is fitted, and moves the rate away from the raw one
    assert ours.weights["np.tanh(std_delta_len)"] != 0.0
    assert ours.winrate != pytest.approx(win_rates(rows)["win_rate"], abs=0.1)


def test_length_controlled_refuses_what_it_cannot_fit() -> None:
    rows = annotations("phi-2")[:20]
    with pytest.raises(ValueError, match="needs df_gamed"):
        length_controlled(rows, None)
    with pytest.raises(ValueError, match="unknown LC GLM"):
        length_controlled(rows, None, "length_controlled_v2")
