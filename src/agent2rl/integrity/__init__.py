"""Integrity checks: what a run's records cannot prevent, detected after the fact.

Neither check ever changes a score; each writes a report that the grading ledger, the run
report and the results ledger show next to the score.

Modules:

``identity``
    :func:`check_identity`: does a submitted model derive from the run's base model (same
    architecture and tokenizer, weights related to the base's as fine-tuning leaves them), and
    does it bring its own chat template? The grading service runs it on every submission.
``ngrams``
    text normalisation, word n-gram hashing and :class:`PrivateIndex`: the fingerprints of a
    private split (minus what the public split shares with it) and a fast scan of any text or
    file (compressed members included) for them.
``contamination``
    :func:`scan_workspace` (a workspace and the egress log against a :class:`PrivateIndex`)
    and :func:`check_run`, the one call at the end of a run that writes
    ``record/contamination.json``.

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
