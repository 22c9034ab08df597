"""Studies: many runs of a matrix (tasks x agents x drivers x modes x models x repeats) on Ray.

Modules:

``spec``
    the study file (TOML) as :class:`StudySpec`, its expansion into :class:`RunSlot`\\ s and
    the checks made before any run starts.
``state``
    ``study.db``: slots and attempts, what makes a study resumable.
``attempt``
    one attempt as a process of its own (``python -m agent2rl.study.attempt``), and the Ray
    task that runs it.
``executor``
    :func:`run_study`: the driver (Ray, scheduling, retries, Ctrl-C, the directory's lock,
    each run's share of its node). An ``agent_error`` run that failed because of its
    infrastructure (:mod:`agent2rl.orchestration.infra`) is a failed attempt, retried, never
    counted as a result.
``progress``
    the live display on a terminal, one line per event on a pipe.
``export``
    the study's runs and submissions as CSV and Parquet.

A study directory is a runs directory (run directories and ``results.db``) plus
``study.db``, ``study.toml``, ``study.lock`` and ``attempts/``; the cross-run analysis and
the dashboard live in :mod:`agent2rl.analysis`. On a network filesystem, read its SQLite
databases as :mod:`~agent2rl.study.executor` says (WAL is unsafe across hosts).
"""

from agent2rl.study.executor import StudyOptions, StudyResult, run_study
from agent2rl.study.spec import RunSlot, StudySpec, expand, load_study, validate
from agent2rl.study.state import StudyState, is_study_dir, read_state

__all__ = [
    "RunSlot",
    "StudyOptions",
    "StudyResult",
    "StudySpec",
    "StudyState",
    "expand",
    "is_study_dir",
    "load_study",
    "read_state",
    "run_study",
    "validate",
]
