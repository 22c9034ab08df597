"""The report's grading latency section (issue #28 item 1): the budget share and a row per
evaluated submission, from the ledger's ``timings``."""

from __future__ import annotations

from support.studyruns import make_run, point

from agent2rl.analysis.report.render import grading_share, render_html, render_markdown
from agent2rl.grading.evaluator import grading_overhead_s

TIMINGS = {
    "grader": "warm",
    "load": "reload",
    "evaluated": True,
    "eval_s": 10.0,
    "queue_wait_s": 3.0,
    "staging_s": 1.0,
    "process_start_s": 0.01,
    "setup_s": 0.0,
    "lock_wait_s": 2.0,
    "load_s": 0.5,
    "generate_s": 6.0,
    "score_s": 1.0,
}


def test_overhead_excludes_generation_scoring_and_waits() -> None:
    # 10 s evaluation + 1 s staging - 6 s generation - 1 s scoring - 2 s device wait
    assert grading_overhead_s(TIMINGS) == 2.0
    assert grading_overhead_s({**TIMINGS, "evaluated": False}) is None
    assert grading_overhead_s({"evaluated": True, "eval_s": 4.0}) is None  # failed: no split
    assert grading_overhead_s(None) is None


def test_report_shows_each_submission_and_the_budget_share() -> None:
    run = make_run(scores=[12.0])
    first = point(1, 5, 12.0).model_copy(update={"eval_seconds": 10.0, "timings": TIMINGS})
    dup = point(2, 9, 12.0).model_copy(update={"eval_seconds": 0.0, "timings": None})
    m = run.metrics.model_copy(update={"trajectory": [first, dup], "budget_s": 110.0})
    spent, share = grading_share(m)
    assert spent == 11.0 and share == 0.1
    md = render_markdown(m)
    section = md.split("## Grading latency", 1)[1].split("\n## ", 1)[0]
    assert "(10.0% of the budget)" in section
    rows = [line for line in section.splitlines() if line.startswith("| 1 |")]
    assert rows == [
        "| 1 | warm | reload | 3.00 | 1.00 | 0.01 | 0.00 | 2.00 | 0.50 | 6.00 | 1.00 | 2.00 |"
    ]
    assert "| 2 |" not in section  # not evaluated: no breakdown row
    assert "Grading latency" in render_html(m)


def test_dashboard_shows_each_runs_grading_time_and_share() -> None:
    from support.studyruns import make_run as study_run

    from agent2rl.analysis.dashboard.page import Overview, render_dashboard

    run = study_run(scores=[12.0])
    first = point(1, 5, 12.0).model_copy(update={"eval_seconds": 10.0, "timings": TIMINGS})
    m = run.metrics.model_copy(update={"trajectory": [first], "budget_s": 110.0})
    page = render_dashboard([type(run)(metrics=m)], Overview("t"), [], {})
    assert "grading (budget share)" in page and "(10.0%)</td>" in page


def test_grader_and_load_names_are_escaped_once_per_format() -> None:
    # A name with Markdown's cell separator: escaped in the Markdown table, shown as it is
    # (HTML-escaped only) in the HTML one. The HTML table once showed `transformers\|cpu`.
    run = make_run(scores=[12.0])
    timings = {**TIMINGS, "grader": "transformers|cpu", "load": "<fresh>"}
    first = point(1, 5, 12.0).model_copy(update={"eval_seconds": 10.0, "timings": timings})
    m = run.metrics.model_copy(update={"trajectory": [first], "budget_s": 110.0})
    md = render_markdown(m).split("## Grading latency", 1)[1].split("\n## ", 1)[0]
    assert "| 1 | transformers\\|cpu | &lt;fresh&gt; |" in md
    html = render_html(m).split("Grading latency", 1)[1]
    assert "<td>transformers|cpu</td><td>&lt;fresh&gt;</td>" in html
    assert "\\|" not in html.split("</table>", 1)[0]
