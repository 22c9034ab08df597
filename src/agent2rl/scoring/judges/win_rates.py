"""AlpacaEval 2.0's metrics: the win rate against the reference and the length-controlled
(LC) win rate, with the leaderboard's names.

These are the ``alpaca-eval`` package's own definitions (``alpaca_eval.metrics.get_winrate``
and ``alpaca_eval.metrics.glm_winrate.get_length_controlled_winrate``, version 0.6.6),
reimplemented here because the package cannot be used as a library: importing any part of it
imports ``pkg_resources``, which setuptools 81 and later no longer ship, and its LC GLM
downloads ``df_gamed.csv`` from the Hugging Face hub at run time. The tests import the
package with a stand-in ``pkg_resources`` and check that both give the same numbers
(``tests/unit/scoring/test_alpaca_eval.py``), and that :func:`win_rates` reproduces the
official leaderboard's ``win_rate`` and ``standard_error`` from the official annotations.

An *annotation* is a dict in the official format: ``instruction``, ``output_1`` (the
reference's output), ``output_2`` (the model's output) and ``preference``, a float in
[1, 2] where 1 means the reference is better, 2 the model, 1.5 a draw (``0`` is read as a
draw too, as the package does), None or NaN when the judge gave no usable answer. The LC
GLM also reads ``index``, the instruction's position in the 805-instruction eval set (the
row of ``df_gamed.csv`` holding its difficulty); without it an annotation's position in the
list is used, as the package does.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from agent2rl.scoring.metrics import MeanMetric, Record, item_score, metric

#: The LC GLM of AlpacaEval 2.0 (``GLM_INFO["length_controlled_v1"]`` in the package):
#: ``preference ~ tanh(std_delta_len) + instruction_difficulty + not_gamed_baseline - 1``,
#: fitted with the two gamed baselines of ``df_gamed.csv`` weighted by this lambda (/2).
LC_V1 = "length_controlled_v1"
#: The package's ``GLM_INFO["length_controlled_minimal"]``: ``preference ~
#: tanh(std_delta_len) + not_gamed_baseline - 1`` on the annotations alone (no instruction
#: difficulty, no gamed baselines), so it needs no ``df_gamed.csv``: for an eval set that
#: AlpacaEval's data does not cover (alpaca-lite's).
LC_MINIMAL = "length_controlled_minimal"
GLMS = (LC_V1, LC_MINIMAL)
REGULARIZE_TO_BASELINE_LAMBDA = 0.2
N_SPLITS = 5
#: ``fit_LogisticRegressionCV``'s settings in the package
_LOGREG = {"random_state": 123, "dual": False, "solver": "liblinear", "fit_intercept": False}
#: the columns of ``df_gamed.csv`` the GLM reads
DF_GAMED_COLUMNS = (
    "index",
    "instruction_difficulty",
    "preference",
    "std_delta_len",
    "not_gamed_baseline",
)


# -- the win rate --------------------------------------------------------------------------
def _preferences(annotations: Sequence[Mapping[str, Any]]) -> np.ndarray:
    """The ``preference`` column as floats: None -> NaN, 0 -> 1.5 (the package's old draw)."""
    out = np.array(
        [math.nan if a.get("preference") is None else float(a["preference"]) for a in annotations],
        dtype=float,
    )
    out[out == 0.0] = 1.5
    return out


def _head2head(prefs: np.ndarray) -> dict[str, Any]:
    """``BaseScoringRule.describe_head2head`` on already preprocessed preferences: draws are
    exact 1.5s, and only preferences in [1, 2] count (NaN and out-of-range ones are dropped,
    so ``n_total`` may be below the number of annotations)."""
    n_draws = int(np.sum(prefs == 1.5))
    valid = prefs[(prefs >= 1.0) & (prefs <= 2.0)] - 1.0
    n = valid.size
    return {
        "win_rate": float(valid.mean() * 100) if n else math.nan,
        # pandas' Series.sem: ddof=1, NaN for fewer than two values
        "standard_error": float(valid.std(ddof=1) / math.sqrt(n) * 100) if n > 1 else math.nan,
        "n_wins": int(np.sum(valid > 0.5)),
        "n_wins_base": int(np.sum(valid < 0.5)),
        "n_draws": n_draws,
        "n_total": n,
    }


def win_rates(
    annotations: Sequence[Mapping[str, Any]], df_gamed: pd.DataFrame | None = None
) -> dict[str, Any]:
    """The leaderboard's metrics of ``annotations`` (see the module docstring for the format).

    Returns ``win_rate`` (mean of ``preference - 1``, in percent), ``standard_error`` (its
    standard error, percent), ``n_wins`` / ``n_wins_base`` (preferences above / below 1.5),
    ``n_draws`` (exactly 1.5), ``n_total`` (the preferences in [1, 2]; NaN ones are
    dropped, as in the package) and ``discrete_win_rate`` (each preference rounded to 1, 2,
    or a draw counted as half a win). With ``df_gamed`` (:func:`read_df_gamed`) it adds
    ``length_controlled_winrate`` and ``lc_standard_error`` (:func:`length_controlled`).

    Edge cases: no valid preference gives NaN rates and zero counts; one gives a NaN
    standard error. Rounding is half-to-even as in pandas (1.5 itself is a draw first).
    """
    prefs = _preferences(annotations)
    out = _head2head(prefs)
    # ZeroOneScoringRule: 1.5 -> 0 (a draw), round, then 0 -> 1.5 again.
    discrete = np.round(np.where(prefs == 1.5, 0.0, prefs))
    discrete[discrete == 0.0] = 1.5
    out["discrete_win_rate"] = _head2head(discrete)["win_rate"]
    if df_gamed is not None:
        lc = length_controlled(annotations, df_gamed)
        out["length_controlled_winrate"] = lc.winrate
        out["lc_standard_error"] = lc.standard_error
    return out


# -- the declared metrics ---------------------------------------------------------------------
def lc_item(record: Record) -> float:
    """An item's LC preference (``meta["lc_preference"]``: the LC GLM's prediction for it at
    equal lengths, fitted once over the evaluation's items by the scorer); its ``score`` (the
    judge's preference) when it has none, as when the GLM could not be fitted."""
    meta = record.get("meta")
    lc = meta.get("lc_preference") if isinstance(meta, dict) else None
    if isinstance(lc, int | float) and not isinstance(lc, bool):
        return float(lc)
    return item_score(record)


#: AlpacaEval 2.0's headline: 100 x the mean LC preference, the package's
#: ``length_controlled_winrate``. Its interval is the bootstrap of that mean over the items,
#: the GLM held as fitted (the spread AlpacaEval's ``lc_standard_error`` measures: how
#: instructions differ, not the fit's own uncertainty; refitting per resample would cost
#: 2000 fits of a cross-validated regression).
LC_WIN_RATE = metric(MeanMetric("length_controlled_winrate", lc_item))
#: 100 x the mean preference ``p - 1``, an unjudged item counted as a draw (0.5);
#: AlpacaEval's own ``win_rate`` drops such items instead (the scorer's details report it)
WIN_RATE = metric(MeanMetric("win_rate"))


# -- the length-controlled win rate ----------------------------------------------------------
@dataclass(frozen=True)
class LengthControlled:
    """The LC GLM's result. ``predictions[i]`` is the GLM's probability that annotation
    ``i``'s model output beats the reference *had both been of equal length*; the LC win rate
    is their mean (percent) and ``standard_error`` their standard error (percent), as the
    package computes them. ``weights`` are the fitted coefficients by feature name."""

    predictions: np.ndarray
    winrate: float
    standard_error: float
    weights: dict[str, float]


def read_df_gamed(path: Path) -> pd.DataFrame:
    """``df_gamed.csv`` of the Hugging Face dataset ``tatsu-lab/alpaca_eval`` (instruction
    difficulty and the annotations of two length-gamed baselines), as the package reads it:
    its ``model`` column dropped. Raises ``ValueError`` naming a missing column."""
    df = pd.read_csv(path)
    missing = [c for c in DF_GAMED_COLUMNS if c not in df.columns]
    if missing:
        raise ValueError(f"{path} is not AlpacaEval's df_gamed.csv: no column {missing}")
    return df.drop(columns=["model"], errors="ignore")


def _features(df: pd.DataFrame, glm: str = LC_V1) -> pd.DataFrame:
    """The design matrix of ``glm``'s formula, in its column order (patsy's names)."""
    columns = {"np.tanh(std_delta_len)": np.tanh(df["std_delta_len"].astype(float))}
    if glm == LC_V1:
        columns["instruction_difficulty"] = df["instruction_difficulty"].astype(float)
    columns["not_gamed_baseline.astype(float)"] = df["not_gamed_baseline"].astype(float)
    return pd.DataFrame(columns, index=df.index)


def length_controlled(
    annotations: Sequence[Mapping[str, Any]],
    df_gamed: pd.DataFrame | None,
    glm: str = LC_V1,
) -> LengthControlled:
    """AlpacaEval 2.0's LC win rate of ``annotations`` with the package's GLM ``glm``.

    :data:`LC_V1` (the leaderboard's), as the package does: each annotation gets the length
    difference of its two outputs (in characters, standardised over the annotations) and its
    instruction's difficulty (the ``df_gamed`` row of its ``index``); a logistic regression
    (L1, liblinear, no intercept, ``C`` chosen by 5-fold group cross-validation on the log
    loss of the soft preference) is fitted on them plus the gamed baselines' rows (weight
    lambda / 2), and predicts each annotation at a length difference of zero.
    :data:`LC_MINIMAL` fits the length term and the model's own term on the annotations
    alone (``df_gamed`` is not read and may be None): every annotation then gets the same
    prediction, so ``standard_error`` is 0.

    Edge cases: annotations without a usable preference are left out of the fit but still
    predicted (the package's behaviour, so the LC win rate averages over all of them); an
    ``index`` outside ``df_gamed`` raises ``KeyError``; fewer than two annotations, or one
    length difference shared by all (nothing to standardise), raise ``ValueError``, as do an
    unknown ``glm`` and :data:`LC_V1` without ``df_gamed``. Needs scikit-learn (imported
    here: it takes a second, and only LC scoring needs it).
    """
    from sklearn import config_context
    from sklearn.linear_model import LogisticRegressionCV
    from sklearn.metrics import make_scorer
    from sklearn.model_selection import GroupKFold

    if glm not in GLMS:
        raise ValueError(f"unknown LC GLM {glm!r}: one of {', '.join(GLMS)}")
    if glm == LC_V1 and df_gamed is None:
        raise ValueError(f"the {LC_V1} GLM needs df_gamed.csv")
    if len(annotations) < 2:
        raise ValueError("the LC GLM needs at least two annotations")
    index = [a.get("index", i) for i, a in enumerate(annotations)]
    delta = pd.Series([len(a["output_1"]) - len(a["output_2"]) for a in annotations], dtype=float)
    if not delta.std() > 0:
        raise ValueError("the LC GLM needs outputs of different length differences")
    df = pd.DataFrame(
        {
            # [0, 1]: the probability that the model's output wins
            "preference": _preferences(annotations) - 1.0,
            "index": index,
            "std_delta_len": delta / delta.std(),
            "not_gamed_baseline": True,
        }
    )
    if glm == LC_V1:
        gamed = df_gamed.drop(columns=["model"], errors="ignore")  # type: ignore[union-attr]
        difficulty = gamed.drop_duplicates("index")["instruction_difficulty"]
        # label lookup, as the package does (df_gamed's first rows are indices 0..804)
        df["instruction_difficulty"] = [float(difficulty[i]) for i in index]
        train = pd.concat([gamed, df], axis=0)
        # The gamed baselines pull the weights toward theirs (two of them: lambda / 2 each).
        gamed_rows = ~train["not_gamed_baseline"].astype(bool)
        weight = (
            train["not_gamed_baseline"].astype(float)
            + (REGULARIZE_TO_BASELINE_LAMBDA * gamed_rows).astype(float) / 2
        )
    else:
        # no weights in the package: the same fit as weight 1 for every row
        train, weight = df, pd.Series(1.0, index=df.index)
    test = _features(df.assign(std_delta_len=0.0), glm)

    keep = train["preference"].notna().to_numpy()
    train, weight = train[keep], weight[keep].to_numpy()
    features = _features(train, glm).reset_index(drop=True)
    target = train["preference"].astype(float).to_numpy()

    # A soft label p is fitted as two rows, (x, 1) weighted p and (x, 0) weighted 1 - p, kept
    # in one cross-validation group; the folds score the log loss against the soft label.
    n = len(features)
    x = pd.concat([features, features], axis=0, ignore_index=True)
    y = np.concatenate([np.ones(n, dtype=int), np.zeros(n, dtype=int)])
    true_prob = np.concatenate([target, 1.0 - target])
    true_weight = np.concatenate([weight, weight])
    groups = np.concatenate([np.arange(n), np.arange(n)])
    # Metadata routing only inside this block (the package turns it on for the whole
    # process); set_score_request refuses to run without it, so the scorer is made here too.
    with config_context(enable_metadata_routing=True), warnings.catch_warnings():
        # scikit-learn >= 1.8 announces API changes that do not change this fit.
        warnings.simplefilter("ignore", FutureWarning)
        scorer = make_scorer(
            _soft_log_loss, response_method="predict_proba", greater_is_better=False
        ).set_score_request(true_sample_weight=True, true_prob=True)
        model = LogisticRegressionCV(
            cv=GroupKFold(n_splits=N_SPLITS), scoring=scorer, **_LOGREG, **_l1_penalty()
        )
        model.set_fit_request(sample_weight=True)
        model.fit(
            x,
            y,
            sample_weight=true_prob * true_weight,
            groups=groups,
            true_sample_weight=true_weight,
            true_prob=true_prob,
        )
        predictions = model.predict_proba(test)[:, 1]
    return LengthControlled(
        predictions=predictions,
        winrate=float(predictions.mean() * 100),
        standard_error=float(pd.Series(predictions).sem() * 100),
        weights=dict(zip(test.columns, (float(w) for w in model.coef_[0]), strict=True)),
    )


def _l1_penalty() -> dict[str, Any]:
    """L1 as the running scikit-learn spells it: ``l1_ratios=(1,)`` from 1.8 on (``penalty``
    is deprecated there and goes in 1.10), ``penalty="l1"`` before."""
    import sklearn

    major, minor = (int(p) for p in sklearn.__version__.split(".")[:2])
    return {"l1_ratios": (1.0,)} if (major, minor) >= (1, 8) else {"penalty": "l1"}


def _soft_log_loss(
    y_true: np.ndarray,
    y_pred: np.ndarray,
    true_prob: np.ndarray,
    true_sample_weight: np.ndarray,
) -> float:
    """The package's ``logloss_continuous``: the log loss of ``y_pred`` (the probability of
    class 1) against the soft label of each duplicated row, weighted (a plain mean of the
    weighted terms, as there)."""
    soft = np.where(y_true == 1, true_prob, 1 - true_prob)
    if y_pred.ndim == 2:
        y_pred = y_pred[:, 1]
    y_pred = np.clip(y_pred, 1e-15, 1 - 1e-15)
    terms = soft * np.log(y_pred) + (1 - soft) * np.log(1 - y_pred)
    return float(-np.mean(terms * true_sample_weight))
