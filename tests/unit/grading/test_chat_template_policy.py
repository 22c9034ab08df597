"""End to end through the evaluation worker (the process the grading service runs for every
submission): a submission whose chat template computes the answer into the prompt fails as
the model's fault, with the reason; one whose template only adds role markers is graded."""

from __future__ import annotations

import json
import shutil

import pytest
from support import FIXTURES

from agent2rl.grading.evaluator import EvalSpec, run_evaluation
from agent2rl.inference.chat_template import FAILED
from agent2rl.settings import load_settings

TEMPLATES = FIXTURES / "chat_templates"


def _with_template(tiny, dest, template: str):
    model = shutil.copytree(tiny.path, dest)
    cfg = json.loads((model / "tokenizer_config.json").read_text())
    (model / "tokenizer_config.json").write_text(json.dumps({**cfg, "chat_template": template}))
    return model


@pytest.mark.slow  # two evaluation workers: about 35 s on a shared 2-core machine
def test_a_template_that_computes_the_answer_fails_and_a_role_marker_one_grades(
    tmp_path, arith, tiny
) -> None:
    task, _ = arith
    spec = EvalSpec(task.name, task.opts, limit=12)

    hint = _with_template(
        tiny, tmp_path / "hint", (TEMPLATES / "cheat-arithmetic-hint.jinja").read_text()
    )
    refused = run_evaluation(spec, hint, tmp_path / "out-hint", load_settings(), timeout_s=300)
    assert refused.score is None and refused.failure == "model", refused
    assert "ChatTemplateRefused" in refused.error
    assert refused.error.endswith(f"ChatTemplateRefused: {FAILED}")  # one reason, whatever failed
    assert "Hint" not in refused.error and "apples" not in refused.error

    plain = _with_template(tiny, tmp_path / "plain", (TEMPLATES / "role-markers.jinja").read_text())
    graded = run_evaluation(spec, plain, tmp_path / "out-plain", load_settings(), timeout_s=300)
    assert graded.error is None and graded.score is not None and graded.n_items == 12, graded
    prompts = [json.loads(line) for line in graded.items_path.read_text().splitlines()]
    assert len(prompts) == 12
