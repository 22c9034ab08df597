"""The live status line: elapsed/remaining, submissions, best score."""

from __future__ import annotations

import time

from rich.console import Console
from rich.live import Live
from rich.text import Text

from agent2rl.formatting import format_duration
from agent2rl.grading.ledger import Ledger, SubmissionStatus
from agent2rl.rundir import RunInfo


class StatusLine:
    """A one-line live display on a terminal; on a pipe, one plain line per new submission."""

    def __init__(self, console: Console, info: RunInfo, ledger: Ledger) -> None:
        self.console, self.info, self.ledger = console, info, ledger
        self._live: Live | None = None
        self._seen = 0

    def __enter__(self) -> StatusLine:
        if self.console.is_terminal:
            self._live = Live(self._render(), console=self.console, refresh_per_second=2)
            self._live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.update(self._render())
            self._live.__exit__(None, None, None)

    def update(self, note: str = "") -> None:
        subs = self.ledger.submissions()
        for s in subs[self._seen :]:
            if s.status != SubmissionStatus.EVALUATING:
                self._seen += 1
                if self._live is None:
                    self.console.print(self._submission_line(s))
        if self._live is not None:
            self._live.update(self._render(note))

    def _submission_line(self, s) -> str:
        score = f"{s.score:.2f}" if s.score is not None else "-"
        flag = " (copy)" if s.is_copy else (f" (= #{s.duplicate_of})" if s.duplicate_of else "")
        err = f" error: {s.error}" if s.error else ""
        return f"submission #{s.id} {s.path}: {s.status} score={score}{flag}{err}"

    def _render(self, note: str = "") -> Text:
        now = time.time()
        elapsed = now - (self.info.start or now)
        remaining = max(0.0, (self.info.deadline or now) - now)
        subs = self.ledger.submissions()
        best = self.ledger.best()
        base = (self.ledger.get_meta("baseline") or {}).get("score")
        graded = sum(1 for s in subs if s.status == SubmissionStatus.GRADED)
        evaluating = any(s.status == SubmissionStatus.EVALUATING for s in subs)
        text = Text()
        text.append(f"{self.info.task} / {self.info.agent}  ", style="bold")
        text.append(
            f"elapsed {format_duration(elapsed)}  remaining {format_duration(remaining)}"
            f"  submissions {len(subs)} ({graded} graded)"
        )
        text.append(f"  baseline {base:.2f}" if base is not None else "")
        text.append(f"  best {best.score:.2f}" if best else "  best -", style="green")
        if evaluating:
            text.append("  [grading]", style="yellow")
        if note:
            text.append(f"  {note}", style="dim")
        return text
