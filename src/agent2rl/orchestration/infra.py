"""Infrastructure failures: a run that ended as ``agent_error`` because of what surrounds the
agent (its LLM provider, its install), not because of the agent.

An agent CLI whose provider answers 401 (a revoked key), 403 or 5xx (an outage), or whose
binary is missing or broken, exits at once with an error. The run then ends as
``agent_error`` with nothing submitted: as a study result that is "the agent improved the
model by 0", which is false; nothing was measured. A study treats such an attempt as a
failure of the infrastructure (:data:`INFRASTRUCTURE`): the slot is not finished and is
retried like a harness failure (bounded by ``--retries``), and ``study status`` shows why.

:func:`infrastructure_failure` decides from the run directory alone (``run.json``, the
metering proxy's usage file, the agent's log, the report), so the driver can decide for a
run that finished on another node or before a driver was killed. A run counts as an
infrastructure failure when all of these hold:

- it ended ``agent_error`` within :data:`QUICK_EXIT_S` of the agent's start;
- it made no submission, and its LLM (if any) never answered a request successfully (an
  agent that got answers worked: its failure is its own);
- and one of: the command could not be executed (exit status 126 or 127, or bubblewrap's
  ``execvp`` failure in the agent log); the provider answered a request with 401, 403 or a
  5xx (the proxy's own refusals, a wrong proxy key or an exhausted token budget, are the
  agent's); an LLM agent exited before making any LLM request (a broken install).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agent2rl.files import read_json
from agent2rl.metering.usage import read_usage
from agent2rl.run_record import RunRecord
from agent2rl.rundir import RunPaths, RunStatus

#: the failure kind a study records for such an attempt (the run keeps its ``agent_error``)
INFRASTRUCTURE = "infrastructure"
#: an agent that ran longer than this before failing did work: its error is its own
QUICK_EXIT_S = 300.0
#: exit statuses of a command that could not be executed (POSIX shells, ``env``)
EXEC_FAILURE_CODES = frozenset({126, 127})
#: the agent log's tail that is read for an exec failure
_LOG_TAIL_BYTES = 64 * 1024


def _upstream_failure(status: Any) -> bool:
    return isinstance(status, int) and (status in (401, 403) or 500 <= status <= 599)


def infrastructure_failure(run_dir: Path | None) -> str | None:
    """One line saying why the run in ``run_dir`` failed because of its infrastructure (see
    the module docstring), or None: a run of another status, a missing or unreadable
    ``run.json``, an agent that ran long, submitted or got an LLM answer."""
    if run_dir is None or (info := RunRecord(run_dir).info()) is None:
        return None
    if info.status != RunStatus.AGENT_ERROR or info.start is None or info.ended_at is None:
        return None
    paths, ran = RunPaths(run_dir), info.ended_at - info.start
    if ran > QUICK_EXIT_S or _submissions(paths) > 0:
        return None
    usage = read_usage(paths.llm_usage)
    if any(not u.get("refused") and 0 < int(u.get("status") or 0) < 400 for u in usage):
        return None
    code = info.agent_exit_code
    if code in EXEC_FAILURE_CODES or _exec_failed(paths.agent_log):
        return f"the agent's command could not be executed (exit status {code}; see agent.log)"
    upstream = [u for u in usage if not u.get("refused") and _upstream_failure(u.get("status"))]
    if upstream:
        statuses = sorted({int(u["status"]) for u in upstream})
        last = upstream[-1].get("error") or ""
        return (
            f"the LLM provider answered HTTP {', '.join(map(str, statuses))} to "
            f"{len(upstream)} request(s) and the agent exited after {ran:.0f}s"
            + (f": {last[:200]}" if last else "")
        )
    if info.driver and not usage:
        return (
            f"the agent exited after {ran:.0f}s with status {code} before any LLM request "
            "(a broken install or configuration? see agent.log)"
        )
    return None


def _submissions(paths: RunPaths) -> int:
    """Submissions the report counted (0 when there is no report)."""
    try:
        n = read_json(paths.metrics_json).get("submissions")
    except (OSError, ValueError):
        return 0
    return n if isinstance(n, int) else 0


def _exec_failed(log: Path) -> bool:
    """Whether the agent log says bubblewrap could not execute the command."""
    try:
        with open(log, "rb") as fh:
            fh.seek(0, 2)
            fh.seek(max(0, fh.tell() - _LOG_TAIL_BYTES))
            tail = fh.read().decode(errors="replace")
    except OSError:
        return False
    return any(line.startswith("bwrap: execvp ") for line in tail.splitlines())
