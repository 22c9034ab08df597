"""The per-run report: ``report/metrics.json``, ``report.md``, ``report.html`` and ``diffs/``.

``report.html`` is one self-contained file (inline CSS, interactive charts of
:mod:`agent2rl.analysis.report.charts` drawn by the inlined uPlot, each with a ``<noscript>``
table of its values, a few lines of inline JS; nothing fetched), so it can be mailed, archived
or opened from a sweep's result folder as is. Every string that could have come from
the agent (paths, error messages, rejection reasons, diffs) is escaped before it reaches
Markdown or HTML.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from agent2rl.analysis.rendering import chart_html, chart_runtime, chart_style, esc, md_cell
from agent2rl.analysis.report.charts import env_steps_chart, score_chart
from agent2rl.analysis.report.code_changes import snapshot_diff
from agent2rl.analysis.report.compute_metrics import compute_metrics
from agent2rl.analysis.report.judging import judge_text
from agent2rl.analysis.report.run_metrics import (
    CodeChange,
    EnvUsage,
    GroupScores,
    RunMetrics,
    TrajectoryPoint,
    run_flags,
)
from agent2rl.analysis.report.searching import search_text
from agent2rl.files import write_json_atomic, write_text_atomic
from agent2rl.formatting import DASH, format_bytes, format_duration, format_number, format_percent
from agent2rl.grading.comparison import improvement
from agent2rl.grading.evaluator import grading_overhead_s
from agent2rl.recording.snapshot import EMPTY_TREE
from agent2rl.rundir import RunPaths
from agent2rl.workspace.instructions import read_agent_summary, summary_html, summary_markdown

#: Diffs above this size are cut in report.html (the full text stays in diffs/<id>.diff) so an
#: agent committing a huge generated file cannot make the page unopenable.
DIFF_EMBED_LIMIT = 200_000
#: Rows of the rejected-attempts table; an agent hammering the API must not bloat the report.
MAX_REJECTION_ROWS = 200


# -- entry point -------------------------------------------------------------------------------
def write_report(paths: RunPaths, metrics: RunMetrics | None = None) -> RunMetrics:
    """Write every report file of a run into ``paths.report``; return the metrics written.

    ``metrics`` are computed from the run directory when not given, so a caller that also
    records the run's results row computes them once and passes them here. Writes
    ``metrics.json``, ``report.md``, ``report.html`` and ``diffs/<id>.diff`` (one per
    submission whose snapshot git can read) atomically. Idempotent: a second call rewrites the
    same bytes and removes ``.diff`` files no longer backed by a submission. Works for a run
    with no submissions, no baseline or no code snapshots.
    """
    if metrics is None:
        metrics = compute_metrics(paths)
    out = paths.report
    out.mkdir(parents=True, exist_ok=True)
    diffs = collect_diffs(paths, metrics)
    _write_diffs(out / "diffs", diffs)
    write_json_atomic(out / "metrics.json", metrics.to_json())
    # the agent's summary.md, when it wrote one, labelled as its own account (unchecked)
    summary = read_agent_summary(paths.workspace)
    write_text_atomic(out / "report.md", render_markdown(metrics) + summary_markdown(summary))
    page = render_html(metrics, diffs)
    cut = page.rfind("</body>")
    page = page[:cut] + summary_html(summary) + page[cut:] if cut >= 0 else page
    write_text_atomic(out / "report.html", page)
    return metrics


def collect_diffs(paths: RunPaths, metrics: RunMetrics) -> dict[int, str | None]:
    """Each submission's code diff against the snapshot its ``code_changes`` entry was compared
    with; None where there is no readable snapshot."""
    return {
        c.id: snapshot_diff(paths.code_git, c.base, c.snapshot) if c.base and c.snapshot else None
        for c in metrics.code_changes
    }


def _write_diffs(diff_dir: Path, diffs: Mapping[int, str | None]) -> None:
    wanted = {f"{sid}.diff": text for sid, text in diffs.items() if text is not None}
    if diff_dir.is_dir():
        for stale in diff_dir.glob("*.diff"):
            if stale.name not in wanted:
                stale.unlink()
    for name, text in wanted.items():
        write_text_atomic(diff_dir / name, text)


# -- formatting --------------------------------------------------------------------------------
def _ci(ci: Sequence[float] | None, signed: bool = True) -> str:
    if not ci:
        return DASH
    return f"[{format_number(ci[0], signed=signed)}, {format_number(ci[1], signed=signed)}]"


def _noise_label(within_noise: bool | None) -> str:
    if within_noise is None:
        return ""
    return "within noise" if within_noise else "beyond noise"


def _incomparable(eval_hash: str | None, baseline_hash: str | None, subject: str) -> str:
    """Why ``subject``'s score is not compared with the baseline: the cases of
    :func:`agent2rl.grading.comparison.comparable`."""
    if not baseline_hash:
        return "not comparable: the baseline's evaluation settings were not recorded"
    if not eval_hash:
        return f"not comparable: {subject}'s evaluation settings were not recorded"
    return f"not comparable: {subject} was graded under other evaluation settings"


def _improvement_text(m: RunMetrics) -> str:
    if m.improvement is None:
        if not m.valid_submissions:
            return "no valid submission"
        if m.baseline is not None:
            best = next((tr for tr in m.trajectory if tr.id == m.best_submission_id), None)
            return _incomparable(best.eval_hash if best else None, m.eval_hash, "the best")
        return "no baseline"
    text = f"{m.improvement:+.2f} points"
    if m.improvement_ci95:
        text += f" (95% CI {_ci(m.improvement_ci95)}"
        label = _noise_label(m.within_noise)
        text += f", {label})" if label else ")"
    return text


def selected_text(m: RunMetrics) -> str:
    """``selected over 5 graded submissions``: the best is a maximum over every submission
    the agent saw scored on the private split, so its score and interval are optimistic.
    Under the validation feedback protocol the one submission graded on the private split
    was selected on validation scores: ``selected on validation (marked final)``."""
    if m.feedback == "validation":
        how = "marked final" if m.selected_by == "marked" else "best on validation"
        return f"selected on validation ({how}), graded once on the private split"
    n = m.valid_submissions
    return f"selected over {n} graded submission{'' if n == 1 else 's'}"


def feedback_text(m: RunMetrics) -> str:
    """The run's grading protocol, and under ``validation`` what the end-of-run grade was:
    ``validation (MLE-bench's): ... submission #3 (marked final): validation 40.00 (baseline
    38.00), private 41.00``, or why it is missing."""
    if m.feedback != "validation":
        return (
            "private (the paper's): the agent saw every submission's private-split score; "
            "the best is selected over them"
        )
    text = (
        "validation (MLE-bench's, not the paper's): the agent saw validation-split scores only "
        f"(baseline on validation {format_number(m.validation_baseline)}); "
    )
    if m.final_grade_status == "graded":
        how = "marked final" if m.selected_by == "marked" else "best on validation"
        return text + (
            f"submission #{m.best_submission_id} ({how}): validation "
            f"{format_number(m.selected_validation_score)}, private {format_number(m.best_score)}"
        )
    status = m.final_grade_status or "not recorded"
    note = f": {m.final_grade_note}" if m.final_grade_note else ""
    return text + f"end-of-run grade on the private split {status}{note}"


def final_text(m: RunMetrics) -> str:
    """The last valid submission's score and improvement, not selected: ``52.00
    (submission #4), +2.00 points (95% CI [...])``; a dash without a valid submission."""
    if m.final_submission_id is None:
        return DASH
    text = f"{format_number(m.final_score)} (submission #{m.final_submission_id})"
    if m.final_improvement is not None:
        text += f", {m.final_improvement:+.2f} points"
        if m.final_improvement_ci95:
            text += f" (95% CI {_ci(m.final_improvement_ci95)})"
    elif m.baseline is not None:
        final = next((tr for tr in m.trajectory if tr.id == m.final_submission_id), None)
        text += ", " + _incomparable(final.eval_hash if final else None, m.eval_hash, "it")
    return text


def _notes(tr: TrajectoryPoint, m: RunMetrics) -> list[str]:
    notes = []
    label = _noise_label(tr.within_noise)
    if label:
        notes.append(label)
    if tr.comparable is False and m.baseline is not None:  # no baseline: nothing to compare
        notes.append(_incomparable(tr.eval_hash, m.eval_hash, "this submission"))
    if tr.is_copy:
        notes.append("copy of a given model")
    if tr.duplicate_of is not None:
        notes.append(f"duplicate of #{tr.duplicate_of}")
    if tr.retry_of is not None:
        notes.append(f"retry of #{tr.retry_of} (failed by the harness)")
    if tr.error:
        kind = {"model": "the model's fault", "harness": "the harness's fault, retryable"}
        notes.append(
            f"error ({kind[tr.failure_kind]}): {tr.error}"
            if tr.failure_kind in kind
            else f"error: {tr.error}"
        )
    if tr.identity is not None and tr.identity.derived is False:
        notes.append("NOT DERIVED from the base model: " + "; ".join(tr.identity.reasons))
    if tr.identity is not None and tr.identity.chat_template_changed:
        notes.append("own chat template")
    return notes


def _ids(ids: Sequence[int]) -> str:
    return ", ".join(f"#{i}" for i in ids)


def integrity_text(m: RunMetrics) -> str:
    """One line on the run's integrity flags, for the report's header (and any summary)."""
    parts = []
    if m.not_derived_submissions:
        parts.append(f"model not derived from the base: {_ids(m.not_derived_submissions)}")
    if m.chat_template_submissions:
        parts.append(f"own chat template: {_ids(m.chat_template_submissions)}")
    if m.mode_flags:
        parts.append(f"mode violation ({len(m.mode_flags)} contradiction(s) with the mode)")
    c = m.contamination
    if c is None:
        parts.append("contamination check not run")
    elif c.flagged:
        parts.append(
            f"CONTAMINATED: {c.matched_items} of {c.items_total} private items found"
            " in the workspace"
            + (f", {len(c.flagged_urls)} dataset fetch(es)" if c.flagged_urls else "")
        )
    else:
        parts.append(f"no contamination found ({c.items_total} private items searched)")
    if c is not None and c.unchecked:
        parts.append("UNCHECKED: the contamination check could not read everything")
    elif "unchecked" in m.integrity_flags:
        parts.append("UNCHECKED: an identity check could not run on a graded submission")
    flagged = bool(run_flags(m))
    return (
        ("flagged: " if flagged else "")
        + "; ".join(parts)
        + (
            " (scores here as graded; cross-run aggregates count this run as its base model"
            " unless --raw)"
            if flagged
            else ""
        )
    )


def _integrity_details(m: RunMetrics) -> list[str]:
    """The integrity section's paragraphs, as plain text (escaped by the caller)."""
    out = []
    for tr in m.trajectory:
        if tr.identity is not None and tr.identity.derived is False:
            share = tr.identity.related_share
            out.append(
                f"Submission #{tr.id} does not derive from the base model: "
                + "; ".join(tr.identity.reasons)
                + (f" (related share {share:.2f})" if share is not None else "")
                + "."
            )
    if m.chat_template_submissions:
        out.append(
            f"Submissions {_ids(m.chat_template_submissions)} bring a chat template other than "
            "the base model's; it is part of the submitted model and was used to grade it."
        )
    c = m.contamination
    if c is None:
        out.append("The contamination check did not run for this run.")
        return out
    scan = (
        f"{c.files_scanned} files ({format_bytes(c.bytes_scanned)}) scanned for word "
        f"{c.n}-grams and distinctive strings of {c.items_total} private items"
    )
    if c.matched_items:
        out.append(
            f"{c.matched_items} private items were found in the workspace ({scan}): items "
            f"{', '.join(c.item_ids)}{' ...' if c.matched_items > len(c.item_ids) else ''} in "
            f"{', '.join(c.files)}."
        )
    else:
        out.append(f"No private item was found in the workspace ({scan}).")
    if c.flagged_urls:
        out.append(f"Fetched addresses naming the task's data: {', '.join(c.flagged_urls)}.")
    if c.unchecked:
        out.append(
            "The check is incomplete (unchecked), so the run counts as flagged: "
            + "; ".join(c.unchecked_reasons)
            + "."
        )
    out += c.notes
    out.append(
        "The scores in this report are as graded: integrity flags never change them. A"
        " flagged run counts in cross-run aggregates (leaderboard, heatmap, pass@k, compare)"
        " as its base model, improvement 0, unless raw figures are asked for (--raw)."
    )
    return out


def _lines_text(change: CodeChange | None) -> str:
    if change is None or change.added is None:
        return DASH
    return f"+{change.added} / -{change.removed}"


def _changes_by_id(m: RunMetrics) -> dict[int, CodeChange]:
    return {c.id: c for c in m.code_changes}


def _delta_text(tr: TrajectoryPoint, baseline: float | None) -> str:
    """``+1.33 [-0.33, +2.67]``: the change against the baseline with its paired 95% CI."""
    if tr.comparable is False:
        return DASH
    text = format_number(improvement(tr.score, baseline, comparable=True), signed=True)
    if tr.improvement_ci95:
        text += f" {_ci(tr.improvement_ci95)}"
    return text


# -- Markdown ----------------------------------------------------------------------------------
def task_options_text(m: RunMetrics) -> str:
    """The task's options as ``name=value`` pairs, the evaluation protocol first; a dash when
    the run recorded none."""
    if not m.task_options:
        return DASH
    opts = dict(m.task_options)
    first = {"protocol": opts.pop("protocol")} if "protocol" in opts else {}
    return ", ".join(f"{k}={v}" for k, v in {**first, **opts}.items())


def confinement_text(m: RunMetrics) -> str:
    """How the agent was confined: sandbox, user, network, caps and what enforced them."""
    if m.sandbox is None:
        return DASH
    user = DASH if m.agent_uid is None else ("root" if m.agent_uid == 0 else f"uid {m.agent_uid}")
    caps = m.caps or {}
    parts = [
        f"sandbox {m.sandbox}",
        f"agent user {user}",
        f"network {m.network or DASH}",
        f"memory cap {format_bytes(caps.get('memory_bytes'))}",
        f"process cap {caps.get('max_pids') or DASH}",
        f"workspace quota {format_bytes(caps.get('disk_bytes'))}",
        f"enforced by {m.cap_mechanism or DASH}",
    ]
    if m.egress is not None:
        e = m.egress
        hosts = ", ".join(h["host"] for h in e.get("hosts", [])[:5]) or "none"
        parts.append(
            f"egress {e.get('requests', 0)} requests ({e.get('denied', 0)} denied, "
            f"{format_bytes(e.get('bytes_down', 0))} down; hosts: {hosts})"
        )
    return ", ".join(parts)


def render_markdown(m: RunMetrics) -> str:
    """The Markdown report of a run's metrics."""
    res = m.resources
    best_id = m.best_submission_id
    lines = [
        f"# agent2rl run {md_cell(m.run_id)}",
        "",
        "| | |",
        "|---|---|",
        f"| Task | {md_cell(m.task)} (v{md_cell(m.task_version)}) |",
        f"| Task options | {md_cell(task_options_text(m))} |",
        f"| Decoding | {md_cell(m.decoding or DASH)} |",
        f"| Agent | {md_cell(m.agent)}"
        + (f" via {md_cell(m.driver)}" if m.driver else "")
        + (f", mode {md_cell(m.mode)}" if m.mode else "")
        + " |",
        f"| Model | {md_cell(m.model)} |",
        f"| Status | {md_cell(m.status)}" + (f": {md_cell(m.error)}" if m.error else "") + " |",
        f"| Confinement | {md_cell(confinement_text(m))} |",
        f"| Budget | {format_duration(m.budget_s)}, used {format_percent(m.time_used_ratio)} |",
        f"| Feedback protocol | {md_cell(feedback_text(m))} |",
        f"| Score | baseline {format_number(m.baseline)} → best {format_number(m.best_score)}"
        + (
            f" ({selected_text(m)}: submission #{best_id}, 95% CI "
            f"{_ci(m.best_score_ci95, signed=False)} computed as if it were the only one)"
            if best_id
            else ""
        )
        + " |",
        f"| Improvement | {md_cell(_improvement_text(m))} |",
        f"| Final submission | {md_cell(final_text(m))} |",
        f"| Submissions | {m.submissions} (valid {m.valid_submissions}, "
        f"copies {m.copy_model_count}, duplicates {m.duplicate_count}); "
        f"rejected attempts {m.rejected_attempts} |",
        f"| Time to first improvement | {format_duration(m.time_to_first_improvement)} |",
        f"| Time to best | {format_duration(m.time_to_best)} |",
        f"| Last submission before deadline | {format_duration(m.last_submit_to_deadline)} |",
        f"| Monotonic ratio (strict increases) | {format_number(m.monotonic_ratio)} |",
        f"| Code changed | {m.total_lines_changed} lines |",
        f"| Integrity | {md_cell(integrity_text(m))} |",
        "",
        "## Submissions",
        "",
    ]
    if m.trajectory:
        changes = _changes_by_id(m)
        lines += [
            "| # | t | status | score | Δ baseline [95% CI] | best so far | lines | path | notes |",
            "|---:|---:|---|---:|---:|---:|---:|---|---|",
        ]
        for tr in m.trajectory:
            lines.append(
                f"| {tr.id} | {format_duration(tr.t)} | {md_cell(tr.status)} "
                f"| {format_number(tr.score)} "
                f"| {_delta_text(tr, m.baseline)} "
                f"| {format_number(tr.best_so_far)} | {_lines_text(changes.get(tr.id))} "
                f"| {md_cell(tr.path)} | {md_cell('; '.join(_notes(tr, m)))} |"
            )
        lines.append("")
        lines.append("Code diffs per submission: `diffs/<id>.diff`.")
    else:
        lines.append("No submissions.")
    lines += _grading_md(m)
    lines += ["", "## Integrity", ""]
    lines += [f"{'**Flagged:** ' if run_flags(m) else ''}{md_cell(integrity_text(m), 2000)}", ""]
    lines += [f"- {md_cell(p, 2000)}" for p in _integrity_details(m)]
    lines += ["", "## Rejected attempts", ""]
    if m.rejections:
        lines += ["| t | HTTP | path | reason |", "|---:|---:|---|---|"]
        for r in m.rejections[:MAX_REJECTION_ROWS]:
            lines.append(
                f"| {format_duration(r.t)} | {r.http_status} | {md_cell(r.path)} "
                f"| {md_cell(r.reason)} |"
            )
        if len(m.rejections) > MAX_REJECTION_ROWS:
            lines.append(f"\n… and {len(m.rejections) - MAX_REJECTION_ROWS} more.")
    else:
        lines.append("None.")
    lines += ["", "## Resources", ""]
    if res:
        lines.append(
            f"Peak RSS {format_bytes(res.peak_rss_bytes)}, mean CPU "
            f"{format_number(res.mean_cpu_percent, 1)}%, at most {res.max_procs or DASH} "
            f"processes ({res.n_samples} samples)."
        )
    else:
        lines.append("No resource samples recorded.")
    if m.group_scores:
        lines += ["", "## Scores by task type", "", *_groups_md(m.group_scores)]
    if m.env_usage is not None:
        lines += ["", "## Environment rollouts", "", _env_text(m.env_usage)]
    if m.search is not None:
        lines += ["", "## Search", "", search_text(m.search)]
    if m.judge is not None:
        lines += ["", "## Judge", "", judge_text(m.judge)]
    lines += ["", "## LLM usage", "", _usage_text(m)]
    for flag in m.mode_flags or []:
        lines.append(f"\n**Mode check:** {md_cell(flag)}")
    return "\n".join(lines) + "\n"


#: The grading latency table's columns: (timings key, header).
_LATENCY_COLUMNS = (
    ("queue_wait_s", "queue"),
    ("staging_s", "staging"),
    ("process_start_s", "process start"),
    ("setup_s", "task setup"),
    ("lock_wait_s", "device wait"),
    ("load_s", "model load"),
    ("generate_s", "generation"),
    ("score_s", "scoring"),
)


def grading_share(m: RunMetrics) -> tuple[float, float | None]:
    """(seconds spent grading, their share of the budget): every submission's staging and
    evaluation time (evaluations of one run never overlap), waits behind other evaluations
    excluded; the share is None without a positive budget."""
    spent = 0.0
    for tr in m.trajectory:
        t = tr.timings or {}
        spent += float(tr.eval_seconds or 0.0) + float(t.get("staging_s") or 0.0)
    return spent, (spent / m.budget_s if m.budget_s and m.budget_s > 0 else None)


def _latency_cells(tr: TrajectoryPoint) -> list[str] | None:
    t = tr.timings
    if not t or not t.get("evaluated"):
        return None
    cells = [md_cell(t.get("grader")), md_cell(t.get("load"))]
    for key, _ in _LATENCY_COLUMNS:
        value = t.get(key)
        cells.append(format_number(value, 2) if isinstance(value, int | float) else DASH)
    cells.append(format_number(grading_overhead_s(t), 2))
    return cells


def _grading_md(m: RunMetrics) -> list[str]:
    """The report's grading latency section: the budget share and one row per evaluated
    submission (duplicates and copies of the base were not evaluated)."""
    spent, share = grading_share(m)
    lines = ["", "## Grading latency", ""]
    share_text = f" ({100 * share:.1f}% of the budget)" if share is not None else ""
    lines.append(f"Grading took {format_duration(spent)}{share_text}.")
    rows = [(tr.id, c) for tr in m.trajectory if (c := _latency_cells(tr)) is not None]
    if rows:
        heads = ["grader", "load", *(h for _, h in _LATENCY_COLUMNS), "overhead"]
        lines += [
            "",
            "Seconds per evaluated submission; overhead is everything but generation, scoring"
            " and waits behind other evaluations.",
            "",
            "| # | " + " | ".join(heads) + " |",
            "|---:|" + "---|" * 2 + "---:|" * (len(heads) - 2),
        ]
        lines += [f"| {i} | " + " | ".join(c) + " |" for i, c in rows]
    return lines


def _grading_html(m: RunMetrics) -> str:
    spent, share = grading_share(m)
    share_text = f" ({100 * share:.1f}% of the budget)" if share is not None else ""
    took = esc(f"Grading took {format_duration(spent)}{share_text}.")
    out = f"<h2>Grading latency</h2>\n<p>{took}</p>"
    rows = [(tr.id, c) for tr in m.trajectory if (c := _latency_cells(tr)) is not None]
    if rows:
        heads = ["#", "grader", "load", *(h for _, h in _LATENCY_COLUMNS), "overhead"]
        head = "".join(f"<th>{esc(h)}</th>" for h in heads)
        body = "".join(
            f"<tr><td>{i}</td>" + "".join(f"<td>{esc(x)}</td>" for x in c) + "</tr>"
            for i, c in rows
        )
        out += f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
    return out + "\n"


def _search_html(m: RunMetrics) -> str:
    if m.search is None:
        return ""
    return f"<h2>Search</h2>\n<p>{esc(search_text(m.search))}</p>\n"


def _judge_html(m: RunMetrics) -> str:
    if m.judge is None:
        return ""
    return f"<h2>Judge</h2>\n<p>{esc(judge_text(m.judge))}</p>\n"


def _usage_text(m: RunMetrics) -> str:
    """One paragraph on the tokens the agent's LLM used (through the metering proxy)."""
    u = m.llm_usage
    if not u:
        return "No LLM traffic recorded (not an LLM agent, or no metering proxy)."
    cost = f"${u.cost_usd:.4f}" + (
        f" (lower bound: {u.unpriced_requests} requests on unpriced models)"
        if u.unpriced_requests
        else ""
    )
    budget = f" of a budget of {m.token_budget:,}" if m.token_budget else ""
    return (
        f"{u.requests} requests ({u.refused} refused, {u.errors} errors), "
        f"{u.input_tokens:,} input tokens ({u.cached_tokens:,} cached) and "
        f"{u.output_tokens:,} output tokens{budget}; estimated cost {cost}. "
        f"Models: {', '.join(sorted(u.by_model)) or DASH}."
        + (
            " Provider-side tools (web search, URL fetches run by the provider) were allowed"
            " in this run; each use is in record/provider_tools.jsonl."
            if m.provider_tools
            else ""
        )
    )


def _group_rows(groups: GroupScores) -> list[tuple[str, str, str, str]]:
    """(group, items, baseline score, best score) rows of a ``group_scores`` metric."""
    base, best = groups.baseline or {}, groups.best or {}
    rows = []
    for g in sorted(set(base) | set(best)):
        either = best.get(g) or base.get(g)
        rows.append(
            (
                g,
                str(either.n) if either is not None else DASH,
                format_number(base[g].score if g in base else None),
                format_number(best[g].score if g in best else None),
            )
        )
    return rows


def _groups_md(groups: GroupScores) -> list[str]:
    out = ["| task type | items | baseline | best |", "|---|---:|---:|---:|"]
    out += [f"| {md_cell(g)} | {n} | {b} | {t} |" for g, n, b, t in _group_rows(groups)]
    return out


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _env_text(u: EnvUsage) -> str:
    """One paragraph on the episodes and steps the agent played through the rollout service."""
    if not u.episodes:
        return "The rollout service ran, but the agent played no episode through it."
    share = u.admissible_steps / u.steps if u.steps else None
    return (
        f"{_count(u.episodes, 'episode')} on {_count(u.games, 'game')} "
        f"({u.finished_episodes} finished, "
        f"{u.won_episodes} won), {u.steps:,} environment steps "
        f"({format_percent(share)} admissible actions), from {format_duration(u.first_step_t)} to "
        f"{format_duration(u.last_step_t)} into the budget.{_kinds_text(u)}"
    )


def _kinds_text(u: EnvUsage) -> str:
    """`` Steps by kind: 40 click, 8 purchase, 12 search.`` for a task whose steps have kinds
    (WebShop's searches, clicks and purchases); empty where every step is a plain ``step``."""
    kinds = (u.model_extra or {}).get("by_kind") or {}
    if not kinds or set(kinds) == {"step"}:
        return ""
    return " Steps by kind: " + ", ".join(f"{n:,} {k}" for k, n in sorted(kinds.items())) + "."


# -- HTML --------------------------------------------------------------------------------------
_CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;color:#1d2430;
 margin:0;background:#f6f7f9}
main{max-width:1100px;margin:0 auto;padding:24px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 10px}
.sub{color:#5b6573;margin-bottom:16px}
.cards{display:flex;flex-wrap:wrap;gap:10px}
.card{background:#fff;border:1px solid #dde2e8;border-radius:8px;padding:10px 14px;min-width:150px}
.card b{display:block;font-size:19px}.card span{color:#5b6573;font-size:12px}
.tag{display:inline-block;border-radius:10px;padding:0 8px;font-size:12px;background:#e8edf3}
.tag.noise{background:#fff1c2}.tag.real{background:#d5f5dc}
table{border-collapse:collapse;width:100%;background:#fff;border:1px solid #dde2e8}
th,td{padding:5px 8px;border-bottom:1px solid #eef1f4;text-align:left;vertical-align:top}
th{background:#f0f3f6;font-weight:600}td.n{text-align:right;font-variant-numeric:tabular-nums}
td.path{font-family:ui-monospace,Menlo,monospace;font-size:12px;word-break:break-all}
tr.failed td{color:#9b1c1c}tr.best td{background:#eefbf1}
details{background:#fff;border:1px solid #dde2e8;border-radius:6px;margin:6px 0}
summary{cursor:pointer;padding:6px 10px;font-weight:600}
details:target{outline:2px solid #2563eb}
pre.diff{margin:0;padding:8px 10px;overflow:auto;max-height:600px;font-size:12px;
 border-top:1px solid #eef1f4;background:#fbfcfd}
pre.diff .a{color:#116329;background:#e6ffec}pre.diff .d{color:#82071e;background:#ffebe9}
pre.diff .h{color:#6f42c1}pre.diff .f{font-weight:700}
.muted{color:#5b6573}
.flag{background:#ffe4e1;border:1px solid #e8a39c;border-radius:8px;padding:8px 12px;margin:10px 0}
"""

# Following a #diff-<id> link should show the diff, so open the targeted <details>.
_JS = """
function openTarget(){var h=location.hash.slice(1);if(!h)return;
var el=document.getElementById(h);if(el&&el.tagName==='DETAILS')el.open=true;}
window.addEventListener('hashchange',openTarget);window.addEventListener('load',openTarget);
"""


def _card(value: str, label: str) -> str:
    return f'<div class="card"><b>{value}</b><span>{esc(label)}</span></div>'


def _headline_html(m: RunMetrics) -> str:
    imp = m.improvement
    label = _noise_label(m.within_noise)
    tag = ""
    if label:
        cls = "noise" if m.within_noise else "real"
        tag = f' <span class="tag {cls}">{esc(label)}</span>'
    imp_value = (
        esc(format_number(imp, signed=True)) + tag if imp is not None else esc(_improvement_text(m))
    )
    ci = m.improvement_ci95
    final = (
        format_number(m.final_improvement, signed=True) if m.final_improvement is not None else DASH
    )
    cards = [
        _card(
            f"{esc(format_number(m.baseline))} → {esc(format_number(m.best_score))}",
            f"baseline → best ({selected_text(m)})",
        ),
        _card(
            imp_value,
            f"improvement of the best, 95% CI {_ci(ci)}" if ci else "improvement of the best",
        ),
        _card(
            f"{esc(format_number(m.final_score))} ({esc(final)})",
            "final submission (not selected): score (improvement)",
        ),
        _card(f"{m.valid_submissions} / {m.submissions}", "valid / submissions"),
        *(
            [_card(esc(m.feedback), f"feedback protocol: {feedback_text(m)}")]
            if m.feedback == "validation"
            else []
        ),
        _card(esc(format_duration(m.time_to_first_improvement)), "time to first improvement"),
        _card(esc(format_duration(m.time_to_best)), "time to best"),
        _card(
            esc(format_percent(m.time_used_ratio)), f"of {format_duration(m.budget_s)} budget used"
        ),
        _card(str(m.total_lines_changed), "lines of code changed"),
        _card(str(m.rejected_attempts), "rejected attempts"),
    ]
    return '<div class="cards">' + "".join(cards) + "</div>"


def _submissions_html(m: RunMetrics) -> str:
    if not m.trajectory:
        return '<p class="muted">No submissions.</p>'
    changes = _changes_by_id(m)
    rows = [
        "<table><thead><tr><th>#</th><th>t</th><th>status</th><th>score</th>"
        "<th>Δ baseline [95% CI]</th><th>best so far</th><th>lines +/−</th><th>path</th>"
        "<th>notes</th>"
        "</tr></thead><tbody>"
    ]
    for tr in m.trajectory:
        sid = tr.id
        cls = "best" if sid == m.best_submission_id else ""
        cls = "failed" if tr.status == "failed" else cls
        rows.append(
            f'<tr class="{cls}"><td><a href="#diff-{sid}">#{sid}</a></td>'
            f'<td class="n">{esc(format_duration(tr.t))}</td><td>{esc(tr.status)}</td>'
            f'<td class="n">{esc(format_number(tr.score))}</td>'
            f'<td class="n">{esc(_delta_text(tr, m.baseline))}</td>'
            f'<td class="n">{esc(format_number(tr.best_so_far))}</td>'
            f'<td class="n">{esc(_lines_text(changes.get(sid)))}</td>'
            f'<td class="path">{esc(tr.path)}</td>'
            f"<td>{'<br>'.join(esc(n) for n in _notes(tr, m))}</td></tr>"
        )
    rows.append("</tbody></table>")
    return "".join(rows)


def _rejections_html(m: RunMetrics) -> str:
    rejections = m.rejections
    if not rejections:
        return '<p class="muted">None.</p>'
    rows = [
        "<table><thead><tr><th>t</th><th>HTTP</th><th>path</th><th>reason</th></tr></thead><tbody>"
    ]
    for r in rejections[:MAX_REJECTION_ROWS]:
        rows.append(
            f'<tr><td class="n">{esc(format_duration(r.t))}</td><td class="n">{r.http_status}</td>'
            f'<td class="path">{esc(r.path)}</td><td>{esc(r.reason)}</td></tr>'
        )
    rows.append("</tbody></table>")
    if len(rejections) > MAX_REJECTION_ROWS:
        rows.append(f'<p class="muted">… and {len(rejections) - MAX_REJECTION_ROWS} more.</p>')
    return "".join(rows)


def _resources_html(m: RunMetrics) -> str:
    res = m.resources
    if not res:
        return '<p class="muted">No resource samples recorded.</p>'
    return (
        '<div class="cards">'
        + "".join(
            [
                _card(esc(format_bytes(res.peak_rss_bytes)), "peak RSS"),
                _card(esc(format_number(res.mean_cpu_percent, 1)) + "%", "mean CPU"),
                _card(esc(res.max_procs if res.max_procs is not None else DASH), "max processes"),
                _card(str(res.n_samples), "samples"),
            ]
        )
        + "</div>"
    )


def _groups_html(m: RunMetrics) -> str:
    if not m.group_scores:
        return ""
    rows = "".join(
        f'<tr><td>{esc(g)}</td><td class="n">{esc(n)}</td><td class="n">{esc(b)}</td>'
        f'<td class="n">{esc(t)}</td></tr>'
        for g, n, b, t in _group_rows(m.group_scores)
    )
    return (
        "<h2>Scores by task type</h2><table><thead><tr><th>task type</th><th>items</th>"
        f"<th>baseline</th><th>best</th></tr></thead><tbody>{rows}</tbody></table>\n"
    )


def _env_html(m: RunMetrics) -> str:
    u = m.env_usage
    if u is None:
        return ""
    cards = "".join(
        [
            _card(str(u.episodes), "episodes"),
            _card(f"{u.steps:,}", "environment steps"),
            _card(str(u.won_episodes), "episodes won"),
            _card(str(u.games), "games played"),
        ]
    )
    return (
        f'<h2>Environment rollouts</h2><div class="cards">{cards}</div>'
        f"<p>{esc(_env_text(u))}</p>{_env_chart(u)}\n"
    )


def _env_chart(u: EnvUsage) -> str:
    chart = env_steps_chart(u)
    return chart_html(chart) if chart is not None else ""


def _diff_body(text: str) -> str:
    """Escaped diff text with added/removed/hunk lines wrapped in spans for colour."""
    out = []
    for line in text.splitlines():
        text_line = esc(line)
        if line.startswith("diff --git"):
            out.append(f'<span class="f">{text_line}</span>')
        elif line.startswith("@@"):
            out.append(f'<span class="h">{text_line}</span>')
        elif line.startswith("+") and not line.startswith("+++"):
            out.append(f'<span class="a">{text_line}</span>')
        elif line.startswith("-") and not line.startswith("---"):
            out.append(f'<span class="d">{text_line}</span>')
        else:
            out.append(text_line)
    return "\n".join(out)


def _diffs_html(m: RunMetrics, diffs: Mapping[int, str | None]) -> str:
    changes = _changes_by_id(m)
    out = []
    for tr in m.trajectory:
        sid = tr.id
        change = changes.get(sid)
        text = diffs.get(sid)
        base = change.base if change is not None else None
        vs = "the empty tree" if base == EMPTY_TREE else f"{str(base)[:10]}"
        if text is None:
            summary = f"#{sid} · no code snapshot"
            body = '<p class="muted" style="padding:0 10px">No readable code snapshot.</p>'
        else:
            summary = f"#{sid} · {_lines_text(change)} lines vs {vs}"
            if not text:
                body = '<p class="muted" style="padding:0 10px">No code change.</p>'
            else:
                note = ""
                if len(text) > DIFF_EMBED_LIMIT:
                    text = text[:DIFF_EMBED_LIMIT]
                    note = (
                        f'<p class="muted" style="padding:0 10px">Truncated; the full diff '
                        f'is in <a href="diffs/{sid}.diff">diffs/{sid}.diff</a>.</p>'
                    )
                body = f'<pre class="diff">{_diff_body(text)}</pre>{note}'
        out.append(f'<details id="diff-{sid}"><summary>{esc(summary)}</summary>{body}</details>')
    return "".join(out) or '<p class="muted">No submissions.</p>'


def _integrity_banner(m: RunMetrics) -> str:
    if not run_flags(m):
        return ""
    return f'<div class="flag"><b>Integrity:</b> {esc(integrity_text(m))}</div>\n'


def _integrity_html(m: RunMetrics) -> str:
    items = "".join(f"<li>{esc(p)}</li>" for p in _integrity_details(m))
    head = f'<p class="{"flag" if run_flags(m) else "muted"}">{esc(integrity_text(m))}</p>'
    return f"<h2>Integrity</h2>{head}<ul>{items}</ul>"


def render_html(m: RunMetrics, diffs: Mapping[int, str | None] | None = None) -> str:
    """The self-contained HTML report of a run's metrics and its submissions' diffs.

    ``diffs`` maps submission id to diff text (None: no snapshot); omitted, every submission
    is shown without code. Every anchor ``#diff-<id>`` in the table and the plot has a matching
    ``<details id="diff-<id>">``.
    """
    diffs = diffs or {}
    title = f"agent2rl · {m.task} · {m.agent} · {m.run_id}"
    status = esc(m.status) + (f": {esc(m.error)}" if m.error else "")
    driver = f" via {esc(m.driver)}" if m.driver else ""
    driver += f", mode {esc(m.mode)}" if m.mode else ""
    flags = "".join(f'<p class="tag noise">Mode check: {esc(f)}</p>' for f in m.mode_flags or [])
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{esc(title)}</title>
<style>{_CSS}</style>
{chart_style()}
</head><body><main>
<h1>{esc(m.task)} · {esc(m.agent)}</h1>
<div class="sub">run <b>{esc(m.run_id)}</b> · task version {esc(m.task_version)}
 · agent {esc(m.agent)}{driver} · model <b>{esc(m.model)}</b> · status <b>{status}</b></div>
<div class="sub">{esc(confinement_text(m))}</div>
<div class="sub">task options: {esc(task_options_text(m))}</div>
{_integrity_banner(m)}{_headline_html(m)}
<h2>Score over time</h2>
{chart_html(score_chart(m), empty_note="no scores to plot")}
<h2>Submissions</h2>
{_submissions_html(m)}
{_integrity_html(m)}
{_grading_html(m)}<h2>Rejected attempts</h2>
{_rejections_html(m)}
<h2>Resources</h2>
{_resources_html(m)}
{_groups_html(m)}{_env_html(m)}{_search_html(m)}{_judge_html(m)}<h2>LLM usage</h2>
<p>{esc(_usage_text(m))}</p>{flags}
<h2>Code changes</h2>
{_diffs_html(m, diffs)}
</main>
<script>{_JS}</script>
{chart_runtime()}
</body></html>
"""
