"""What a running study shows: a live rich display on a terminal, one line per event on a pipe.

Both take the same events from the executor (:class:`Reporter`): the study begins, an
attempt is queued, starts (its run process is up), ends (with its run's status and
headline numbers, and whether the slot will be retried), free-form notes, and the end.
The ETA comes from the budgets: every run takes its budget plus an overhead (baseline,
grading the last submission, the report), estimated from the runs finished so far (30 s
until one has), divided over the runs that can go at once.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Protocol

from rich.console import Console, Group
from rich.live import Live
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
from rich.table import Table

from agent2rl.formatting import format_duration
from agent2rl.study.state import AttemptStatus

#: assumed per-run overhead beyond the budget until a run of this study has finished
DEFAULT_OVERHEAD_S = 30.0


@dataclass
class AttemptView:
    """One attempt as the display knows it."""

    slot_id: int
    n: int
    label: str
    queued_at: float
    started_at: float | None = None
    node: str | None = None


@dataclass
class Tally:
    """The study's counts and what the ETA needs; updated by the executor's events."""

    total: int
    budget_s: float
    parallel: int
    finished: int = 0
    failed: int = 0
    """Slots whose last attempt failed and that will not be retried in this call."""
    running: dict[tuple[int, int], AttemptView] = field(default_factory=dict)
    durations: list[float] = field(default_factory=list)
    """Wall seconds of the attempts ended in this call (start to result)."""

    @property
    def queued(self) -> int:
        return sum(1 for a in self.running.values() if a.started_at is None)

    @property
    def pending(self) -> int:
        return max(0, self.total - self.finished - self.failed - len(self.running))

    def eta_s(self, now: float | None = None) -> float:
        """Seconds until every slot is done, from the budgets (see the module docstring)."""
        now = time.time() if now is None else now
        overhead = (
            max(0.0, sum(self.durations) / len(self.durations) - self.budget_s)
            if self.durations
            else DEFAULT_OVERHEAD_S
        )
        per_run = self.budget_s + overhead
        left = [
            max(0.0, per_run - (now - a.started_at)) if a.started_at is not None else per_run
            for a in self.running.values()
        ]
        work = sum(left) + self.pending * per_run
        return work / max(1, self.parallel)


class Reporter(Protocol):
    """The executor's events (see the module docstring)."""

    tally: Tally

    def begin(self, headline: str) -> None: ...
    def queued(self, a: AttemptView) -> None: ...
    def started(self, a: AttemptView) -> None: ...
    def ended(self, a: AttemptView, result: dict[str, Any], outcome: str, retry: bool) -> None: ...
    def note(self, text: str) -> None: ...
    def end(self, headline: str) -> None: ...


def _result_text(result: dict[str, Any], outcome: str) -> str:
    parts = [f"{outcome} ({result.get('run_status') or 'no run'})"]
    if result.get("improvement") is not None:
        parts.append(f"best {result['best']:.2f} improvement {result['improvement']:+.2f}")
    elif result.get("best") is not None:
        parts.append(f"best {result['best']:.2f}")
    if result.get("run_id"):
        parts.append(str(result["run_id"]))
    if result.get("error") and outcome != AttemptStatus.FINISHED:
        parts.append(str(result["error"]))
    return "  ".join(parts)


class LineReporter:
    """One plain line per event (for a pipe or a log file): ``study: <event> ...``."""

    def __init__(self, tally: Tally, console: Console | None = None) -> None:
        self.tally = tally
        self.console = console or Console(highlight=False, soft_wrap=True)

    def note(self, text: str) -> None:
        self.console.print(f"study: {text}", markup=False, highlight=False, soft_wrap=True)

    begin = end = note

    def _line(self, text: str) -> None:
        t = self.tally
        self.note(
            f"{text} [{t.finished} done, {len(t.running)} running, {t.failed} failed / {t.total}]"
        )

    def queued(self, a: AttemptView) -> None:
        self._line(f"queued {a.label} (attempt {a.n})")

    def started(self, a: AttemptView) -> None:
        where = f" on {a.node}" if a.node else ""
        self._line(f"started {a.label}{where}")

    def ended(self, a: AttemptView, result: dict[str, Any], outcome: str, retry: bool) -> None:
        again = ", will retry" if retry else ""
        self._line(f"ended {a.label}: {_result_text(result, outcome)}{again}")


class LiveReporter:
    """A live display on a terminal: a bar of done slots with the counts and the ETA, a
    table of the runs in progress, and the last few events above it."""

    def __init__(self, tally: Tally, console: Console | None = None) -> None:
        self.tally = tally
        self.console = console or Console()
        self._bar = Progress(
            TextColumn("[bold]study[/]"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[counts]}"),
            console=self.console,
        )
        self._task = self._bar.add_task("runs", total=tally.total, counts="")
        self._live = Live(self._render(), console=self.console, refresh_per_second=2)

    def _render(self) -> Group:
        t = self.tally
        counts = (
            f"running {len(t.running) - t.queued}, queued {t.queued}, failed {t.failed}, "
            f"pending {t.pending}  ETA {format_duration(t.eta_s())}"
        )
        self._bar.update(self._task, completed=t.finished, counts=counts)
        table = Table("run", "attempt", "state", "elapsed", box=None, pad_edge=False)
        now = time.time()
        for a in sorted(t.running.values(), key=lambda a: a.queued_at):
            if a.started_at is None:
                table.add_row(a.label, str(a.n), AttemptStatus.QUEUED, "-")
            else:
                where = f" ({a.node})" if a.node else ""
                table.add_row(
                    a.label, str(a.n), f"running{where}", format_duration(now - a.started_at)
                )
        return Group(self._bar, table) if t.running else Group(self._bar)

    def refresh(self) -> None:
        self._live.update(self._render())

    def begin(self, headline: str) -> None:
        self.console.print(f"[bold]study[/] {headline}", highlight=False)
        self._live.start()

    def started(self, a: AttemptView) -> None:
        self.refresh()

    queued = started

    def ended(self, a: AttemptView, result: dict[str, Any], outcome: str, retry: bool) -> None:
        style = {AttemptStatus.FINISHED: "green", AttemptStatus.INTERRUPTED: "yellow"}.get(
            outcome, "red"
        )
        again = " (will retry)" if retry else ""
        self._live.console.print(
            f"[{style}]{a.label}[/]: {_result_text(result, outcome)}{again}", highlight=False
        )
        self.refresh()

    def note(self, text: str) -> None:
        self._live.console.print(text, highlight=False)

    def end(self, headline: str) -> None:
        self.refresh()
        self._live.stop()
        self.console.print(f"[bold]study[/] {headline}", highlight=False)


def make_reporter(tally: Tally, console: Console | None = None) -> Reporter:
    """The live display on a terminal, else one line per event."""
    console = console or Console()
    return LiveReporter(tally, console) if console.is_terminal else LineReporter(tally, console)
