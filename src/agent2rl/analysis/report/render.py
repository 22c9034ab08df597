"""The per-run report: ``report/metrics.json``, ``report.md``, ``report.html`` and ``diffs/``.

Both files render one model, :func:`report_sections`, built here once from the metrics.
``report.html`` is one self-contained file (inline CSS, interactive charts of
:mod:`agent2rl.analysis.report.charts`, each with a ``<noscript>`` table of its values;
nothing fetched), so it can be mailed, archived or opened from a sweep's folder as is.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from agent2rl.analysis.rendering import chart_html, esc, md_cell
from agent2rl.analysis.report.charts import env_steps_chart, score_chart
from agent2rl.analysis.report.code_changes import snapshot_diff
from agent2rl.analysis.report.compute_metrics import compute_metrics
from agent2rl.analysis.report.document import (
    Column,
    Raw,
    Section,
    bullets,
    paragraph,
    table,
    to_html,
    to_markdown,
)
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
from agent2rl.grading.ledger import SubmissionStatus
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
    write_json_atomic(paths.metrics_json, metrics.to_json())
    # the agent's summary.md, when it wrote one, labelled as its own account (unchecked)
    summary = read_agent_summary(paths.workspace)
    write_text_atomic(out / "report.md", render_markdown(metrics) + summary_markdown(summary))
    head, _, tail = render_html(metrics, diffs).rpartition("</body>")
    write_text_atomic(out / "report.html", head + summary_html(summary) + "</body>" + tail)
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
    return {True: "within noise", False: "beyond noise"}.get(within_noise, "")


def _incomparable(eval_hash: str | None, baseline_hash: str | None, subject: str) -> str:
    """Why ``subject``'s score is not compared with the baseline: the cases of
    :func:`agent2rl.grading.comparison.comparable`."""
    if not baseline_hash:
        return "not comparable: the baseline's evaluation settings were not recorded"
    if not eval_hash:
        return f"not comparable: {subject}'s evaluation settings were not recorded"
    return f"not comparable: {subject} was graded under other evaluation settings"


def _eval_hash(m: RunMetrics, sid: int | None) -> str | None:
    return next((tr.eval_hash for tr in m.trajectory if tr.id == sid), None)


def _improvement_text(m: RunMetrics) -> str:
    if m.improvement is None:
        if not m.valid_submissions:
            return "no valid submission"
        if m.baseline is not None:
            return _incomparable(_eval_hash(m, m.best_submission_id), m.eval_hash, "the best")
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
        text += ", " + _incomparable(_eval_hash(m, m.final_submission_id), m.eval_hash, "it")
    return text


def _notes(tr: TrajectoryPoint, m: RunMetrics) -> list[str]:
    notes = [label] if (label := _noise_label(tr.within_noise)) else []
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
        why = f" ({kind[tr.failure_kind]})" if tr.failure_kind in kind else ""
        notes.append(f"error{why}: {tr.error}")
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
    if not run_flags(m):
        return "; ".join(parts)
    return (
        f"flagged: {'; '.join(parts)} (scores here as graded; cross-run aggregates count this"
        " run as its base model unless --raw)"
    )


def _integrity_details(m: RunMetrics) -> list[str]:
    """The integrity section's paragraphs, as plain text (escaped by the caller)."""
    out = []
    for tr in m.trajectory:
        if tr.identity is not None and tr.identity.derived is False:
            share = tr.identity.related_share
            related = f" (related share {share:.2f})" if share is not None else ""
            reasons = "; ".join(tr.identity.reasons)
            out.append(
                f"Submission #{tr.id} does not derive from the base model: {reasons}{related}."
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
        reasons = "; ".join(c.unchecked_reasons)
        out.append(f"The check is incomplete (unchecked), so the run counts as flagged: {reasons}.")
    out += c.notes
    out.append(
        "The scores in this report are as graded: integrity flags never change them. A"
        " flagged run counts in cross-run aggregates (leaderboard, heatmap, pass@k, compare)"
        " as its base model, improvement 0, unless raw figures are asked for (--raw)."
    )
    return out


def _lines_text(change: CodeChange | None) -> str:
    return (
        DASH if change is None or change.added is None else f"+{change.added} / -{change.removed}"
    )


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


def task_options_text(m: RunMetrics) -> str:
    """The task's options as ``name=value`` pairs, the evaluation protocol first; a dash when
    the run recorded none."""
    if not m.task_options:
        return DASH
    opts = sorted(m.task_options.items(), key=lambda kv: kv[0] != "protocol")  # stable
    return ", ".join(f"{k}={v}" for k, v in opts)


def confinement_text(m: RunMetrics) -> str:
    """How the agent was confined: sandbox, user, network, caps and what enforced them."""
    if m.sandbox is None:
        return DASH
    user = DASH if m.agent_uid is None else ("root" if m.agent_uid == 0 else f"uid {m.agent_uid}")
    caps, e = m.caps or {}, m.egress
    text = (
        f"sandbox {m.sandbox}, agent user {user}, network {m.network or DASH}, memory cap "
        f"{format_bytes(caps.get('memory_bytes'))}, process cap {caps.get('max_pids') or DASH}, "
        f"workspace quota {format_bytes(caps.get('disk_bytes'))}, enforced by "
        f"{m.cap_mechanism or DASH}"
    )
    if e is None:
        return text
    hosts = ", ".join(h["host"] for h in e.get("hosts", [])[:5]) or "none"
    return text + (
        f", egress {e.get('requests', 0)} requests ({e.get('denied', 0)} denied, "
        f"{format_bytes(e.get('bytes_down', 0))} down; hosts: {hosts})"
    )


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
    staged = ((tr.eval_seconds, (tr.timings or {}).get("staging_s")) for tr in m.trajectory)
    spent = sum((float(secs or 0.0) + float(staging or 0.0) for secs, staging in staged), 0.0)
    return spent, (spent / m.budget_s if m.budget_s and m.budget_s > 0 else None)


# -- the report's sections ---------------------------------------------------------------------
def _agent_text(m: RunMetrics, e: Callable[[object], str]) -> str:
    """``agent via driver, mode m``, each name escaped by ``e`` (``md_cell`` or ``esc``)."""
    via = f" via {e(m.driver)}" if m.driver else ""
    return e(m.agent) + via + (f", mode {e(m.mode)}" if m.mode else "")


def _status_text(m: RunMetrics, e: Callable[[object], str]) -> str:
    return e(m.status) + (f": {e(m.error)}" if m.error else "")


def _text(text: str) -> Raw:
    """Harness text that Markdown takes as is, so that its ``#`` and ``[lo, hi]`` read as
    written; HTML escapes it. Never for text the agent could influence."""
    return Raw(text, esc(text))


def _cards(*cards: tuple[str, str]) -> str:
    """HTML cards of (value, label): the value is markup its caller escaped, the label text."""
    card = '<div class="card"><b>{}</b><span>{}</span></div>'
    return '<div class="cards">' + "".join(card.format(v, esc(k)) for v, k in cards) + "</div>"


def _head(m: RunMetrics) -> Raw:
    """The report's head, different by design: in Markdown its heading and a table of every
    headline fact; in HTML the run's identity in three lines, the integrity banner when the
    run is flagged, and the headline figures as cards."""
    score = f"baseline {format_number(m.baseline)} → best {format_number(m.best_score)}"
    if m.best_submission_id:
        ci = _ci(m.best_score_ci95, signed=False)
        score += f" ({selected_text(m)}: submission #{m.best_submission_id}, 95% CI {ci}"
        score += " computed as if it were the only one)"
    facts = {
        "Task": f"{md_cell(m.task)} (v{md_cell(m.task_version)})",
        "Task options": md_cell(task_options_text(m)),
        "Decoding": md_cell(m.decoding or DASH),
        "Agent": _agent_text(m, md_cell),
        "Model": md_cell(m.model),
        "Status": _status_text(m, md_cell),
        "Confinement": md_cell(confinement_text(m)),
        "Budget": f"{format_duration(m.budget_s)}, used {format_percent(m.time_used_ratio)}",
        "Feedback protocol": md_cell(feedback_text(m)),
        "Score": score,
        "Improvement": md_cell(_improvement_text(m)),
        "Final submission": md_cell(final_text(m)),
        "Submissions": f"{m.submissions} (valid {m.valid_submissions}, copies "
        f"{m.copy_model_count}, duplicates {m.duplicate_count}); rejected attempts "
        f"{m.rejected_attempts}",
        "Time to first improvement": format_duration(m.time_to_first_improvement),
        "Time to best": format_duration(m.time_to_best),
        "Last submission before deadline": format_duration(m.last_submit_to_deadline),
        "Monotonic ratio (strict increases)": format_number(m.monotonic_ratio),
        "Code changed": f"{m.total_lines_changed} lines",
        "Integrity": md_cell(integrity_text(m)),
    }
    rows = "\n".join(f"| {k} | {v} |" for k, v in facts.items())
    flag = esc(integrity_text(m))
    banner = f'<div class="flag"><b>Integrity:</b> {flag}</div>\n' if run_flags(m) else ""
    status = _status_text(m, esc)
    html = f"""<h1>{esc(m.task)} · {esc(m.agent)}</h1>
<div class="sub">run <b>{esc(m.run_id)}</b> · task version {esc(m.task_version)}
 · agent {_agent_text(m, esc)} · model <b>{esc(m.model)}</b> · status <b>{status}</b></div>
<div class="sub">{esc(confinement_text(m))}</div>
<div class="sub">task options: {esc(task_options_text(m))}</div>
{banner}{_headline_cards(m)}"""
    return Raw(f"# agent2rl run {md_cell(m.run_id)}\n\n| | |\n|---|---|\n{rows}", html)


def _headline_cards(m: RunMetrics) -> str:
    label = _noise_label(m.within_noise)
    tag = f' <span class="tag {"noise" if m.within_noise else "real"}">{label}</span>'
    imp_value = esc(_improvement_text(m))
    if m.improvement is not None:
        imp_value = esc(format_number(m.improvement, signed=True)) + (tag if label else "")
    ci = m.improvement_ci95
    about = f"improvement of the best, 95% CI {_ci(ci)}" if ci else "improvement of the best"
    best = f"{esc(format_number(m.baseline))} → {esc(format_number(m.best_score))}"
    final = DASH if m.final_improvement is None else format_number(m.final_improvement, signed=True)
    final = f"{esc(format_number(m.final_score))} ({esc(final)})"
    feedback = (esc(m.feedback), f"feedback protocol: {feedback_text(m)}")
    return _cards(
        (best, f"baseline → best ({selected_text(m)})"),
        (imp_value, about),
        (final, "final submission (not selected): score (improvement)"),
        (f"{m.valid_submissions} / {m.submissions}", "valid / submissions"),
        *([feedback] if m.feedback == "validation" else []),
        (esc(format_duration(m.time_to_first_improvement)), "time to first improvement"),
        (esc(format_duration(m.time_to_best)), "time to best"),
        (esc(format_percent(m.time_used_ratio)), f"of {format_duration(m.budget_s)} budget used"),
        (str(m.total_lines_changed), "lines of code changed"),
        (str(m.rejected_attempts), "rejected attempts"),
    )


_SUBMISSION_COLUMNS = (
    Column("#", right=True),
    Column("t", True, "n"),
    Column("status"),
    *(Column(t, True, "n") for t in ("score", "Δ baseline [95% CI]", "best so far")),
    Column(Raw("lines", "lines +/−"), True, "n"),
    Column("path", style="path"),
    Column("notes"),
)


def _submissions_section(m: RunMetrics) -> Section:
    if not m.trajectory:
        return Section("Submissions", (paragraph("No submissions.", "muted"),))
    changes, rows, styles = _changes_by_id(m), [], []
    for tr in m.trajectory:
        notes = _notes(tr, m)
        rows.append(
            (
                Raw(str(tr.id), f'<a href="#diff-{tr.id}">#{tr.id}</a>'),
                format_duration(tr.t),
                tr.status,
                format_number(tr.score),
                _text(_delta_text(tr, m.baseline)),
                format_number(tr.best_so_far),
                _lines_text(changes.get(tr.id)),
                tr.path,
                Raw(md_cell("; ".join(notes)), "<br>".join(esc(n) for n in notes)),
            )
        )
        best = "best" if tr.id == m.best_submission_id else ""
        styles.append("failed" if tr.status == SubmissionStatus.FAILED else best)
    # Markdown has no room for the diffs themselves: it points at their files
    pointer = Raw("Code diffs per submission: `diffs/<id>.diff`.", "")
    return Section("Submissions", (table(_SUBMISSION_COLUMNS, rows, styles), pointer))


def _integrity_section(m: RunMetrics) -> Section:
    flagged = bool(run_flags(m))
    style, lead = ("flag", "Flagged:") if flagged else ("muted", "")
    head = paragraph(integrity_text(m), style, lead, md_limit=2000)
    return Section("Integrity", (head, bullets(_integrity_details(m))), newline=False)


def _grading_section(m: RunMetrics) -> Section:
    """The budget share of grading and one row per evaluated submission (duplicates and
    copies of the base were not evaluated)."""
    spent, share = grading_share(m)
    share_text = f" ({100 * share:.1f}% of the budget)" if share is not None else ""
    blocks: list[Raw] = [paragraph(f"Grading took {format_duration(spent)}{share_text}.")]
    rows = []
    for tr in m.trajectory:
        t = tr.timings
        if t and t.get("evaluated"):  # duplicates and copies of the base were not evaluated
            names = (str(t.get("grader") or ""), str(t.get("load") or ""))
            seconds = [t.get(key) for key, _ in _LATENCY_COLUMNS] + [grading_overhead_s(t)]
            rows.append(
                (
                    str(tr.id),
                    *names,
                    *(format_number(x, 2) if isinstance(x, int | float) else DASH for x in seconds),
                )
            )
    if rows:
        heads = [h for _, h in _LATENCY_COLUMNS] + ["overhead"]
        columns = [Column("#", True), Column("grader"), Column("load")]
        columns += [Column(h, True) for h in heads]
        note = (
            "Seconds per evaluated submission; overhead is everything but generation, scoring"
            " and waits behind other evaluations."
        )
        blocks += [Raw(note, ""), table(columns, rows)]
    return Section("Grading latency", tuple(blocks))


def _rejections_section(m: RunMetrics) -> Section:
    if not m.rejections:
        return Section("Rejected attempts", (paragraph("None.", "muted"),))
    columns = (Column("t", True, "n"), Column("HTTP", True, "n"), Column("path", style="path"))
    rows = [
        (format_duration(r.t), str(r.http_status), r.path or "", r.reason)
        for r in m.rejections[:MAX_REJECTION_ROWS]
    ]
    more = len(m.rejections) - MAX_REJECTION_ROWS
    tail = (paragraph(f"… and {more} more.", "muted"),) if more > 0 else ()
    return Section("Rejected attempts", (table((*columns, Column("reason")), rows), *tail))


def _resources_section(m: RunMetrics) -> Section:
    res = m.resources
    if not res:
        return Section("Resources", (paragraph("No resource samples recorded.", "muted"),))
    cpu = format_number(res.mean_cpu_percent, 1)
    text = (
        f"Peak RSS {format_bytes(res.peak_rss_bytes)}, mean CPU {cpu}%, at most "
        f"{res.max_procs or DASH} processes ({res.n_samples} samples)."
    )
    cards = _cards(
        (esc(format_bytes(res.peak_rss_bytes)), "peak RSS"),
        (esc(cpu) + "%", "mean CPU"),
        (esc(res.max_procs if res.max_procs is not None else DASH), "max processes"),
        (str(res.n_samples), "samples"),
    )
    return Section("Resources", (Raw(text, cards),))


def _groups_section(groups: GroupScores) -> Section:
    """Per item group: items, baseline and best score (a dash where one side lacks it)."""
    base, best = groups.baseline or {}, groups.best or {}
    rows = [
        (
            g,
            str((best.get(g) or base[g]).n),
            *(format_number(s[g].score) if g in s else DASH for s in (base, best)),
        )
        for g in sorted(set(base) | set(best))
    ]
    columns = (Column("task type"), *(Column(t, True, "n") for t in ("items", "baseline", "best")))
    return Section("Scores by task type", (table(columns, rows),), newline=False)


def _env_section(u: EnvUsage) -> Section:
    cards = _cards(
        (str(u.episodes), "episodes"),
        (f"{u.steps:,}", "environment steps"),
        (str(u.won_episodes), "episodes won"),
        (str(u.games), "games played"),
    )
    chart = env_steps_chart(u)
    figure = Raw("", chart_html(chart) if chart is not None else "")
    text = "The rollout service ran, but the agent played no episode through it."
    if u.episodes:
        share = u.admissible_steps / u.steps if u.steps else None
        # steps of kinds (WebShop's searches, clicks and purchases), not all a plain "step"
        kinds = (u.model_extra or {}).get("by_kind") or {}
        by_kind = ", ".join(f"{n:,} {k}" for k, n in sorted(kinds.items()))
        text = (
            f"{u.episodes} episode{'s' * (u.episodes != 1)} on {u.games} "
            f"game{'s' * (u.games != 1)} ({u.finished_episodes} finished, {u.won_episodes} won), "
            f"{u.steps:,} environment steps ({format_percent(share)} admissible actions), from "
            f"{format_duration(u.first_step_t)} to {format_duration(u.last_step_t)} into the "
            "budget." + (f" Steps by kind: {by_kind}." if kinds and set(kinds) != {"step"} else "")
        )
    return Section("Environment rollouts", (Raw("", cards), paragraph(text), figure), newline=False)


def _usage_section(m: RunMetrics) -> Section:
    """The tokens the agent's LLM used (through the metering proxy), and the mode check's
    findings."""
    flags = (
        Raw(f"**Mode check:** {md_cell(f)}", f'<p class="tag noise">Mode check: {esc(f)}</p>')
        for f in m.mode_flags or []
    )
    u = m.llm_usage
    if not u:
        text = "No LLM traffic recorded (not an LLM agent, or no metering proxy)."
        return Section("LLM usage", (paragraph(text), *flags))
    unpriced = f" (lower bound: {u.unpriced_requests} requests on unpriced models)"
    cost = f"${u.cost_usd:.4f}" + (unpriced if u.unpriced_requests else "")
    budget = f" of a budget of {m.token_budget:,}" if m.token_budget else ""
    tools = (
        " Provider-side tools (web search, URL fetches run by the provider) were allowed"
        " in this run; each use is in record/provider_tools.jsonl."
    )
    text = (
        f"{u.requests} requests ({u.refused} refused, {u.errors} errors), "
        f"{u.input_tokens:,} input tokens ({u.cached_tokens:,} cached) and "
        f"{u.output_tokens:,} output tokens{budget}; estimated cost {cost}. "
        f"Models: {', '.join(sorted(u.by_model)) or DASH}." + (tools if m.provider_tools else "")
    )
    return Section("LLM usage", (paragraph(text), *flags))


def _diff_line(line: str) -> str:
    """A diff line, escaped, in a span that colours it as added, removed, hunk or file line."""
    cls = next((c for start, c in _DIFF_CLASSES if line.startswith(start)), "")
    return f'<span class="{cls}">{esc(line)}</span>' if cls else esc(line)


#: A diff line's class by its start, first match wins (``+++``/``---`` are file names).
_DIFF_CLASSES = (("diff --git", "f"), ("@@", "h"), ("+++", ""), ("---", ""), ("+", "a"), ("-", "d"))


def _diffs_html(m: RunMetrics, diffs: Mapping[int, str | None]) -> str:
    """Each submission's diff, collapsed, with the id ``diff-<id>`` that the submissions
    table and the score chart link to; cut at :data:`DIFF_EMBED_LIMIT`."""
    changes = _changes_by_id(m)
    out = []
    for tr in m.trajectory:
        sid, change, text = tr.id, changes.get(tr.id), diffs.get(tr.id)
        base = change.base if change is not None else None
        vs = "the empty tree" if base == EMPTY_TREE else str(base)[:10]
        summary = f"#{sid} · {_lines_text(change)} lines vs {vs}"
        note = ""
        if text is None:
            summary, body = f"#{sid} · no code snapshot", _padded("No readable code snapshot.")
        elif not text:
            body = _padded("No code change.")
        else:
            if len(text) > DIFF_EMBED_LIMIT:
                text = text[:DIFF_EMBED_LIMIT]
                link = f'<a href="diffs/{sid}.diff">diffs/{sid}.diff</a>'
                note = _padded(f"Truncated; the full diff is in {link}.")
            body = '<pre class="diff">' + "\n".join(map(_diff_line, text.splitlines())) + "</pre>"
        out.append(
            f'<details id="diff-{sid}"><summary>{esc(summary)}</summary>{body}{note}</details>'
        )
    return "".join(out) or '<p class="muted">No submissions.</p>'


def _padded(markup: str) -> str:
    return f'<p class="muted" style="padding:0 10px">{markup}</p>'


def report_sections(
    m: RunMetrics, diffs: Mapping[int, str | None] | None = None
) -> tuple[Section, ...]:
    """The report of a run's metrics as :class:`~agent2rl.analysis.report.document.Section` s,
    which :func:`render_markdown` and :func:`render_html` render.

    ``diffs`` maps submission id to diff text (None: no snapshot); omitted, every submission
    is shown without code. Sections without data (task types, rollouts, search, judge) are
    left out; every anchor ``#diff-<id>`` has its ``<details>``.
    """
    grading = _grading_section(m)
    optional = [
        _groups_section(m.group_scores) if m.group_scores else None,
        _env_section(m.env_usage) if m.env_usage is not None else None,
        Section("Search", (paragraph(search_text(m.search)),)) if m.search is not None else None,
        Section("Judge", (paragraph(judge_text(m.judge)),)) if m.judge is not None else None,
    ]
    chart = chart_html(score_chart(m), empty_note="no scores to plot")
    return (
        Section(None, (_head(m),)),
        Section("Score over time", (Raw("", chart),)),
        _submissions_section(m),
        # Markdown has always listed grading before integrity, the page after it
        replace(grading, only="md"),
        _integrity_section(m),
        replace(grading, only="html"),
        _rejections_section(m),
        _resources_section(m),
        *(s for s in optional if s is not None),
        _usage_section(m),
        Section("Code changes", (Raw("", _diffs_html(m, diffs or {})),)),
    )


def render_markdown(m: RunMetrics) -> str:
    """The Markdown report of a run's metrics (no diffs: they are files in ``diffs/``)."""
    return to_markdown(report_sections(m))


def render_html(m: RunMetrics, diffs: Mapping[int, str | None] | None = None) -> str:
    """The self-contained HTML report of a run's metrics and its submissions' diffs
    (:func:`report_sections` says what ``diffs`` holds)."""
    return to_html(report_sections(m, diffs), f"agent2rl · {m.task} · {m.agent} · {m.run_id}")
