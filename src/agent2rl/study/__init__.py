"""Studies: many runs of a matrix (tasks x agents x drivers x modes x models x repeats) on Ray.

``spec`` is the study file, ``state`` its ``study.db`` (what makes a study resumable),
``attempt`` one attempt as a process of its own, ``executor`` the driver (:func:`run_study`),
``progress`` its display, ``export`` its runs and submissions as CSV and Parquet.

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
