"""Integrity checks: what a run's records cannot prevent, detected after the fact.

Neither check ever changes a score; each writes a report that the grading ledger, the run
report and the results ledger show next to the score.

Modules: ``identity`` (:func:`check_identity`, run by the grading service on every
submission: does the model derive from the run's base model, does it bring its own chat
template?), ``ngrams`` (:class:`PrivateIndex`: a private split's fingerprints, and a fast scan
of any text or file for them) and ``contamination`` (:func:`check_run`, the end-of-run check
that writes ``record/contamination.json``).

This package reads model directories, task data and run directories; it imports neither the
orchestration nor the analysis (the analysis reads its reports).
"""

from agent2rl.integrity.contamination import (
    CONTAMINATION_FILE,
    ContaminationReport,
    check_run,
    read_contamination,
    scan_workspace,
)
from agent2rl.integrity.identity import IdentityReport, check_identity, identity_flags
from agent2rl.integrity.ngrams import PrivateIndex, normalize, scan_file

__all__ = [
    "CONTAMINATION_FILE",
    "ContaminationReport",
    "IdentityReport",
    "PrivateIndex",
    "check_identity",
    "check_run",
    "identity_flags",
    "normalize",
    "read_contamination",
    "scan_file",
    "scan_workspace",
]
