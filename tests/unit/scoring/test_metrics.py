"""Declared metrics: a scorer's metric is the task's score, and every consumer (the grading
worker, the grading service's intervals, the per-run report, ``agent2rl eval``) asks it for
the value and the interval instead of averaging the items' ``score``.

The LC win rate is pinned on a small fixed fixture (a real judge over HTTP against the
scripted provider on loopback, and a synthetic ``df_gamed``): these numbers were computed by
the harness before the metrics were declared (the LC predictions were the items' scores
then), and a declared metric must print the very same score and intervals.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from support.fake_provider import Turn, start_fake_provider

from agent2rl.analysis.report.compute_metrics import group_scores
from agent2rl.dataset import Sample
from agent2rl.files import read_json, write_json_atomic, write_jsonl
from agent2rl.scoring import EvalResult, Judge
from agent2rl.scoring.judges import openai_judge
from agent2rl.scoring.metrics import declared_metrics, metric_for
from agent2rl.solvers.base import Output
from agent2rl.statistics import MEAN, compare_items, load_item_records

KEY = "judge-key"
N = 16
REFS = [f"Reference answer {i}." for i in range(N)]
OUTS = [f"Model {i}." + " and more" * (i % 5) for i in range(N)]

#: computed by the harness before metrics were declared (commit "test_metrics: pin ...")
LC_SCORE = 61.81924895319722
LC_CI95 = (59.07989355600977, 64.21626436240089)
#: against a baseline whose every item scored 0.5
LC_IMPROVEMENT_CI95 = (9.314140282535213, 14.132210570436204)
GROUP_A, GROUP_B = 61.83512147129292, 61.8033764351015


def _gamed(n: int = N, seed: int = 7) -> pd.DataFrame:
    """``df_gamed.csv``'s shape for ``n`` instructions: two gamed baselines' annotations."""
    rng = np.random.default_rng(seed)
    difficulty = rng.normal(0, 1, n)
    return pd.DataFrame(
        [
            {
                "index": i,
                "instruction_difficulty": difficulty[i],
                "preference": float(rng.uniform()),
                "std_delta_len": float(rng.normal()),
                "not_gamed_baseline": False,
                "model": model,
            }
            for model in ("verbose", "concise")
            for i in range(n)
        ]
    )


def _prefers_longer(body: dict) -> Turn:
    """A judge that likes length (and item ``i % 3`` a little more): the LC GLM has a length
    effect to take out."""
    user = body["messages"][1]["content"]
    i = next(i for i in range(N) if f"Instruction {i}:" in user)
    model_first = user.index(OUTS[i]) < user.index(REFS[i])
    p = 1 / (1 + math.exp(-(len(OUTS[i]) - len(REFS[i]) + 3 * (i % 3)) / 8))
    p_first = p if model_first else 1 - p
    return Turn(top_logprobs=[("m", math.log(p_first)), ("M", math.log(1 - p_first))])


@pytest.fixture
def lc_items(tmp_path: Path):
    """The Judge scorer's items over the fixture (LC_V1 GLM) and its scorer."""
    with start_fake_provider(api_key=KEY) as provider:
        provider.respond_with(_prefers_longer)
        judge = openai_judge(
            "gpt-4-1106-preview",
            provider.openai_base_url,
            cache_path=tmp_path / "cache.sqlite3",
            usage_path=tmp_path / "usage.jsonl",
            api_key=KEY,
            backoff_s=0.01,
        )
        samples = [
            Sample(f"id{i}", {"instruction": f"Instruction {i}: explain."}, REFS[i],
                   {"index": i, "group": "ab"[i % 2]})
            for i in range(N)
        ]  # fmt: skip
        scorer = Judge(judge, df_gamed=_gamed())
        yield scorer, scorer.score(samples, [Output(o) for o in OUTS])


def _record(tmp_path: Path, result: EvalResult, name: str = "eval") -> Path:
    """Write ``result`` as the grading worker does: ``items.jsonl`` and ``result.json``."""
    out = tmp_path / name
    out.mkdir()
    write_jsonl(out / "items.jsonl", [i.to_dict() for i in result.items])
    write_json_atomic(out / "result.json", {"score": result.score, "metrics": result.metrics})
    return out / "items.jsonl"


def test_lc_win_rate_and_its_intervals_are_pinned(lc_items, tmp_path: Path) -> None:
    scorer, items = lc_items
    result = EvalResult.from_items(items, declared_metrics(scorer))
    assert result.score == LC_SCORE
    assert list(result.metrics) == ["length_controlled_winrate", "win_rate"]
    # an item's score is the judge's preference (per-item displays), not the LC prediction
    assert all(i.score == pytest.approx(i.meta["preference"] - 1) for i in items)
    assert result.metrics["win_rate"] == pytest.approx(100 * sum(i.score for i in items) / N)
    path = _record(tmp_path, result)
    base_path = tmp_path / "base.jsonl"
    write_jsonl(base_path, [{"id": i.id, "score": 0.5} for i in items])
    metric = metric_for(path)
    assert metric is not None and metric.name == "length_controlled_winrate"
    iv = compare_items(load_item_records(path), load_item_records(base_path), metric=metric)
    assert iv.score_ci95 == LC_CI95
    assert iv.improvement_ci95 == LC_IMPROVEMENT_CI95
    details = scorer.details(items, [Output(o) for o in OUTS])
    assert details["length_controlled_winrate"] == pytest.approx(LC_SCORE, abs=1e-9)
    groups = group_scores(path)
    assert groups is not None
    assert groups["a"].score == GROUP_A and groups["b"].score == GROUP_B


# -- a custom scorer's declared metric -----------------------------------------------------------
PLUGIN = '''
import numpy as np

from agent2rl.scoring.base import ItemResult
from agent2rl.scoring.metrics import ResampledMetric, metric
from agent2rl.tasks import task
from agent2rl.tasks.arith_lite import ArithLite


@metric
class Median(ResampledMetric):
    name = "plugin-median"

    def value(self, records):
        return 100.0 * float(np.median([r["score"] for r in records])) if records else 0.0


class Spread:
    """Item i scores 1.0 when i % 3 == 0, else 0.1, whatever the model says: mean and
    median far apart."""

    metrics = [Median()]

    def score(self, samples, outputs):
        return [
            ItemResult(s.id, o.text, str(s.target), i % 3 == 0, 1.0 if i % 3 == 0 else 0.1)
            for i, (s, o) in enumerate(zip(samples, outputs, strict=True))
        ]

    def settings(self):
        return {"scorer": "spread", "metric": "plugin-median"}

    def details(self, items, outputs):
        return {}


@task
class MedianArith(ArithLite):
    name = "plugin-median-arith"

    def scorer(self, prepared):
        return Spread()
'''


@pytest.fixture
def median_task(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """An installed plug-in (a module and its dist-info on the path of this process and of
    the grading worker) with a task whose scorer declares the plug-in's median metric."""
    from agent2rl.scoring.metrics import METRICS
    from agent2rl.tasks import TASKS

    root = tmp_path / "plugin"
    root.mkdir()
    (root / "a2r_plugin_median.py").write_text(PLUGIN)
    info = root / "a2r_plugin_median-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: a2r-plugin-median\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[agent2rl.tasks]\nplugin-median-arith = a2r_plugin_median\n"
        "[agent2rl.metrics]\nplugin-median = a2r_plugin_median:Median\n"
    )
    monkeypatch.syspath_prepend(str(root))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]))
    try:
        METRICS.reload_entry_points()
        TASKS.reload_entry_points()
        yield "plugin-median-arith"
    finally:
        TASKS.unregister("plugin-median-arith")
        METRICS.unregister("plugin-median")


def test_a_custom_scorer_s_declared_metric_is_what_the_grader_reports(
    median_task: str, tiny, tmp_path: Path
) -> None:
    from agent2rl.grading.evaluator import EvalSpec, run_evaluation
    from agent2rl.settings import load_settings
    from agent2rl.tasks import get_task, prepare_task

    settings = load_settings()
    task = get_task(median_task)
    prepare_task(task, settings.task_store)
    out = tmp_path / "eval"
    outcome = run_evaluation(
        EvalSpec(task.name, task.opts, limit=7), tiny.path, out, settings, timeout_s=300
    )
    assert outcome.error is None, (outcome.error, (out / "eval.log").read_text()[-2000:])
    # items 0, 3, 6 score 1.0, the other four 0.1: the median is 10, the mean would be 48.57
    assert outcome.score == pytest.approx(10.0)
    result = read_json(out / "result.json")
    assert result["metrics"] == {"plugin-median": pytest.approx(10.0)}
    # readers find the metric by the name recorded and ask it for the interval
    metric = metric_for(out / "items.jsonl")
    assert metric is not None and metric.name == "plugin-median"
    records = load_item_records(out / "items.jsonl")
    iv = compare_items(records, records, metric=metric)
    assert iv.score_ci95 is not None and iv.score_ci95[0] == pytest.approx(10.0)
    assert iv.improvement_ci95 == (0.0, 0.0)
    # a name nobody registered here: no interval rather than a wrong one
    write_json_atomic(out / "result.json", {**result, "metrics": {"nobody-registered": 1.0}})
    assert metric_for(out / "items.jsonl") is None


def test_an_evaluation_recorded_before_metrics_is_read_by_the_mean(tmp_path: Path) -> None:
    """An older result.json (or a cached baseline) names no metric: its score was the mean."""
    write_jsonl(tmp_path / "items.jsonl", [{"id": "a", "score": 0.25}, {"id": "b", "score": 1}])
    assert metric_for(tmp_path / "items.jsonl") is MEAN  # no result.json at all
    write_json_atomic(tmp_path / "result.json", {"score": 62.5})
    assert metric_for(tmp_path / "items.jsonl") is MEAN
    records = list((load_item_records(tmp_path / "items.jsonl") or {}).values())
    assert MEAN.value(records) == 62.5
