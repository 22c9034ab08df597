"""The report names the evaluation protocol that graded the run: the task's options, as
run.json records them, are a row of the Markdown report and a line of the HTML one."""

from __future__ import annotations

from support.rundirs import run_stub

from agent2rl.analysis.report.compute_metrics import compute_metrics
from agent2rl.analysis.report.render import render_html, render_markdown, task_options_text
from agent2rl.tasks import get_task


def test_report_shows_the_task_options_protocol_first(tmp_path) -> None:
    task = get_task("gsm8k", {"max_new_tokens": "64"})
    metrics = compute_metrics(run_stub(tmp_path / "run", task))
    assert metrics.task_options == task.opts
    text = task_options_text(metrics)
    assert text.startswith("protocol=opencompass, ") and "max_new_tokens=64" in text
    row = next(r for r in render_markdown(metrics).splitlines() if r.startswith("| Task options"))
    assert row.startswith("| Task options | protocol=opencompass, ")
    assert "max\\_new\\_tokens=64" in row  # Markdown-escaped
    assert f"task options: {text}" in render_html(metrics)


def test_a_run_without_recorded_options_shows_a_dash(tmp_path) -> None:
    metrics = compute_metrics(run_stub(tmp_path / "run", get_task("humaneval")))
    assert task_options_text(metrics.model_copy(update={"task_options": None})) == "—"
    assert task_options_text(metrics).startswith("protocol=opencompass, ")
