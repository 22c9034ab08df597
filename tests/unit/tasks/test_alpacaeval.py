"""``alpacaeval``: the offline import, what the agent is told, and a full grading through the
real grading service with the scripted OpenAI-compatible judge on loopback — the exact judge
requests, the preferences read back in AlpacaEval's order, the judgment cache (a second
identical grading makes no judge call), and judge outages (5xx, refused connections) that
fail a submission as the harness's, after which the same weights are graded.

The fixture (``tests/support/fixtures/alpaca_eval/import``) holds 6 real eval rows with their
reference outputs and 30 synthetic Alpaca rows; nothing is downloaded.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import time

import httpx
import pytest
from safetensors.torch import load_file, save_file
from support import FIXTURES
from support.fake_provider import Turn, start_fake_provider
from support.rundirs import make_run, serve
from transformers import AutoTokenizer

from agent2rl.analysis import compute_metrics, render_markdown
from agent2rl.errors import UserError
from agent2rl.files import read_jsonl
from agent2rl.grading.ledger import Ledger
from agent2rl.metering.usage import read_usage
from agent2rl.scoring.judges import USAGE_FILE, protocol
from agent2rl.settings import load_settings
from agent2rl.tasks import get_task, prepare_task, task_root

FIXTURE = FIXTURES / "alpaca_eval" / "import"
KEY = "judge-secret-for-tests"
#: the judge always puts 0.7 on the output it is shown second ("M")
SECOND = 0.7


def second_wins(body: dict) -> Turn:
    return Turn(top_logprobs=[("M", math.log(SECOND)), ("m", math.log(1 - SECOND))])


def expected_preference(instruction: str) -> float:
    # Shown second is the model's output unless swapped: 2 - P(m) = 1.7, else flipped: 1.3.
    p = 2 - (1 - SECOND)
    return 3 - p if protocol.is_swapped(instruction) else p


@pytest.fixture(scope="module")
def judge_env():
    """The grader's environment: the judge key and fast retries (inherited by the grading
    service and its evaluation workers)."""
    values = {
        "AGENT2RL_JUDGE_API_KEY": KEY,
        "AGENT2RL_JUDGE_BACKOFF_S": "0.01",
        "AGENT2RL_JUDGE_MAX_ATTEMPTS": "2",
    }
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    yield
    for k, v in old.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture(scope="module")
def judge(judge_env):
    holder = {"provider": start_fake_provider(api_key=KEY)}
    holder["provider"].respond_with(second_wins)
    yield holder
    holder["provider"].stop()


@pytest.fixture(scope="module")
def alpacaeval(judge):
    options = {  # version 1's protocol: the logprob judge and the Alpaca prompt
        "judge": protocol.NAME,
        "base_prompt": "alpaca",
        "judge_base_url": judge["provider"].openai_base_url,
        "max_new_tokens": 12,
        "batch_size": 8,
        "metric": "raw",  # the fixture has no df_gamed.csv: the raw win rate, chosen
    }
    task = get_task("alpacaeval", options)
    summary = task.import_data(FIXTURE, task_root(task, load_settings().task_store))
    return task, prepare_task(task, load_settings().task_store), summary


def test_import_splits_and_description(alpacaeval, tmp_path) -> None:
    task, prepared, summary = alpacaeval
    assert "27 train / 3 validation / 6 eval" in summary and "raw win rate" in summary
    assert "not the official" in summary
    eval_rows = read_jsonl(prepared.private / "eval.jsonl")
    reference = json.loads((FIXTURE / "reference_outputs_gpt4_1106_preview.json").read_text())
    assert [r["instruction"] for r in eval_rows] == [r["instruction"] for r in reference]
    assert [r["reference"] for r in eval_rows] == [r["output"] for r in reference]
    samples = task.samples(prepared, "private")
    assert samples[0].target == reference[0]["output"] and samples[0].metadata["index"] == 0
    public = read_jsonl(prepared.public / "train.jsonl")
    assert set(public[0]) == {"id", "instruction", "input", "output"}
    assert not {r["instruction"] for r in public} & {r["instruction"] for r in eval_rows}
    val = task.samples(prepared, "validation")
    assert len(val) == 3 and val[0].input["instruction"].startswith("Add the two numbers.\n\n")
    assert task.metric(prepared) == "win_rate"
    assert task.scorer(prepared).settings()["metric"] == "win_rate"
    # the default metric (LC) without df_gamed.csv is refused, never the raw one in its
    # place (issue #39 item 4)
    lc = get_task("alpacaeval", {"judge": protocol.NAME})
    with pytest.raises(UserError, match="df_gamed.csv.*--task-opt metric=raw"):
        lc.metric(prepared)
    with pytest.raises(UserError, match="metric=raw"):
        lc.scorer(prepared)
    text = " ".join(task.description(prepared).split())
    for needle in (
        "may **not** use the grading judge",
        "its API key or its cache",
        "metering proxy",
        "token budget",
        "**win rate**",
        "at most 12 new tokens",
    ):
        assert needle in text, needle
    assert KEY not in text
    fmt = task.prompt_format(prepared)
    assert fmt.chat_template == "{instruction}" and "### Response:" in fmt.template
    # the judgment cache is masked in every agent sandbox
    assert load_settings().home / "cache" / "judge" in task.private_paths()
    # and so is the alpaca-eval package's README (its METADATA), which quotes a graded item
    readme = [p for p in task.private_paths() if p.name == "METADATA"]
    assert len(readme) == 1 and readme[0].parent.name.startswith("alpaca_eval-"), readme
    assert "How did US states get their names?" in readme[0].read_text()


def test_import_errors_name_the_fix(tmp_path) -> None:
    task = get_task("alpacaeval")
    (tmp_path / "only-alpaca").mkdir()
    shutil.copy(FIXTURE / "alpaca_data.json", tmp_path / "only-alpaca")
    with pytest.raises(UserError, match="alpaca_eval_gpt4_baseline.json"):
        task.import_data(tmp_path / "only-alpaca", tmp_path / "store")
    (tmp_path / "only-eval").mkdir()
    shutil.copy(FIXTURE / "reference_outputs_gpt4_1106_preview.json", tmp_path / "only-eval")
    with pytest.raises(UserError, match="tatsu-lab/alpaca"):
        task.import_data(tmp_path / "only-eval", tmp_path / "store")
    bad = tmp_path / "bad-gamed"
    shutil.copytree(FIXTURE, bad)
    (bad / "df_gamed.csv").write_text("index,instruction_difficulty\n0,0.1\n")
    with pytest.raises(UserError, match="df_gamed.csv is not"):
        task.import_data(bad, tmp_path / "store")


def _served_by_instruction(provider) -> dict[str, list]:
    out: dict[str, list] = {}
    for s in provider.served:
        user = s.request["messages"][1]["content"]
        key = user.split('"instruction": """', 1)[1].split('""",', 1)[0]
        out.setdefault(key, []).append(s)
    return out


def _submit(client, rel: str) -> dict:
    r = client.post("/submit", json={"model_path": rel})
    assert r.status_code == 200, r.text
    return r.json()


def test_grading_end_to_end_cache_and_outages(alpacaeval, judge, tiny, tmp_path) -> None:
    task, prepared, _ = alpacaeval
    provider = judge["provider"]
    provider.load([])
    provider.respond_with(second_wins)
    paths = make_run(tmp_path / "run", task, prepared, tiny)

    # -- the baseline: one judge request per eval item, exactly AlpacaEval's -----------------
    base_dir = paths.baseline_dir
    items = read_jsonl(base_dir / "items.jsonl")
    assert len(items) == 6
    served = _served_by_instruction(provider)
    assert len(provider.served) == 6 and all(len(v) == 1 for v in served.values())
    for item, sample in zip(items, task.samples(prepared, "private"), strict=True):
        instruction = sample.input["instruction"]
        request = served[instruction][0]
        assert request.api_key == KEY
        swapped = protocol.is_swapped(instruction)
        shown = (
            (item["prediction"], item["target"])
            if swapped
            else (item["target"], item["prediction"])
        )
        assert request.request["messages"] == protocol.messages(instruction, *shown)
        assert request.request["max_tokens"] == 1 and request.request["top_logprobs"] == 5
        assert item["meta"]["preference"] == pytest.approx(expected_preference(instruction))
        assert item["score"] == pytest.approx(item["meta"]["preference"] - 1)
    result = json.loads((base_dir / "result.json").read_text())
    details = result["details"]
    assert details["metric"] == "win_rate" and details["n_total"] == 6
    assert result["score"] == pytest.approx(details["win_rate"])
    assert details["judge"]["requests"] == 6 and details["judge"]["cache_hits"] == 0
    assert details["judge"]["input_tokens"] == sum(s.input_tokens for s in provider.served)
    assert details["reference_avg_length"] > details["avg_length"]  # 12 tokens vs GPT-4
    usage = read_usage(base_dir / "judge_usage.jsonl")
    assert len(usage) == 6 and {u["model"] for u in usage} == {"gpt-4-1106-preview"}
    assert not (paths.record / "llm_usage.jsonl").exists(), "the judge is not the agent's usage"
    # the key never reaches the agent's workspace
    for f in paths.workspace.rglob("*"):
        if f.is_file() and f.stat().st_size < 2**20:
            assert KEY.encode() not in f.read_bytes(), f

    handle, token = serve(paths, tiny.path)
    client = httpx.Client(
        base_url=handle.url, timeout=300, headers={"Authorization": f"Bearer {token}"}
    )
    try:
        # -- a second identical grading makes zero judge calls ------------------------------
        same = paths.output / "same-outputs"
        shutil.copytree(tiny.path, same)
        gen = same / "generation_config.json"
        gen.write_text(json.dumps({**json.loads(gen.read_text()), "repetition_penalty": 1.3}))
        before = len(provider.served)
        again = _submit(client, "output/same-outputs")
        assert again["status"] == "graded" and again["eval_seconds"] > 0, again
        assert len(provider.served) == before, "identical outputs must come from the cache"
        assert again["score"] == pytest.approx(again["baseline"])
        with Ledger(paths.ledger) as ledger:
            sub_dir = paths.root / ledger.submission(again["submission_id"]).items_path
        sub_result = json.loads((sub_dir.parent / "result.json").read_text())
        assert sub_result["details"]["judge"]["requests"] == 0
        assert sub_result["details"]["judge"]["cache_hits"] == 6

        # -- the judge answers 503: failed, the harness's, one line; then graded on retry ---
        _speaks(tiny, paths.output / "other", "x")
        provider.respond_with(lambda body: Turn(error_status=503, error_message="overloaded"))
        failed = _submit(client, "output/other")
        assert failed["status"] == "failed" and failed["failure_kind"] == "harness", failed
        assert failed["score"] is None and "\n" not in failed["error"]
        assert "JudgeUnavailable" in failed["error"] and "HTTP 503" in failed["error"]
        provider.respond_with(second_wins)
        shutil.copytree(paths.output / "other", paths.output / "other-again")
        retried = _submit(client, "output/other-again")
        assert retried["status"] == "graded" and retried["retry_of"] == failed["submission_id"]
        assert retried["score"] is not None
        with Ledger(paths.ledger) as ledger:
            row = ledger.submission(retried["submission_id"])
        outputs = [i["prediction"] for i in read_jsonl(paths.root / row.items_path)]
        assert any("x" in o for o in outputs), "the submission's outputs were new ones"

        # -- the judge refuses connections: failed; back on the same port: graded ----------
        port = provider.port
        provider.stop()
        _speaks(tiny, paths.output / "third", "Z")
        down = _submit(client, "output/third")
        assert down["status"] == "failed" and down["failure_kind"] == "harness", down
        assert "ConnectError" in down["error"] and "unreachable after 2 attempts" in down["error"]
        provider = judge["provider"] = _restart(port)
        shutil.copytree(paths.output / "third", paths.output / "third-again")
        back = _submit(client, "output/third-again")
        assert back["status"] == "graded" and back["retry_of"] == down["submission_id"]
        assert len(provider.served) >= 1
    finally:
        client.close()
        handle.stop()

    # -- the run report: the judge's cost over every grading and the judged metrics ---------
    metrics = compute_metrics(paths)
    judge_summary = metrics.judge
    lines = [u for f in paths.grading.rglob(USAGE_FILE) for u in read_usage(f)]
    assert judge_summary is not None and judge_summary.metric == "win_rate"
    assert judge_summary.requests == len(lines) and judge_summary.errors >= 2
    assert judge_summary.input_tokens == sum(u["input_tokens"] or 0 for u in lines)
    assert judge_summary.cache_hits >= 6
    assert judge_summary.baseline["win_rate"] == pytest.approx(details["win_rate"])
    assert judge_summary.baseline["reference_avg_length"] > judge_summary.baseline["avg_length"]
    markdown = render_markdown(metrics)
    assert "## Judge" in markdown and "Score: the raw win rate" in markdown
    assert f"Judge: {judge_summary.requests:,} requests" in markdown


def _speaks(tiny, dest, token: str) -> None:
    """A submission whose outputs differ from the base model's (which writes only newlines):
    ``token``'s (tied) embedding becomes twice the newline's, so greedy decoding picks it
    wherever it picked a newline — new outputs, so the judge must be asked."""
    shutil.copytree(tiny.path, dest)
    tok = AutoTokenizer.from_pretrained(dest)
    (newline,), (tid,) = tok.encode("\n"), tok.encode(token)
    tensors = load_file(dest / "model.safetensors")
    emb = tensors["model.embed_tokens.weight"].clone()
    emb[tid] = 2 * emb[newline]
    tensors["model.embed_tokens.weight"] = emb
    save_file(tensors, dest / "model.safetensors", metadata={"format": "pt"})


def _restart(port: int):
    """The fake judge again on ``port`` (the run's judge_base_url names it)."""
    deadline = time.time() + 30
    while True:
        try:
            p = start_fake_provider(api_key=KEY, port=port)
            break
        except OSError:
            if time.time() > deadline:
                raise
            time.sleep(0.2)
    p.respond_with(second_wins)
    return p
