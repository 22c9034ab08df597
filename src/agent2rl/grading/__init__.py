"""Grading: the per-run service that scores submissions on the private split.

::

    app.py         the HTTP API (FastAPI): submit, submissions, time, health; bearer token
    service.py     the service process (``python -m agent2rl.grading.service RUN_DIR``)
    submission.py  checks on a submitted directory and the private copy that is graded
    evaluator.py   one evaluation in a child process with a timeout; whose failure it was
    worker.py      that child process: load the model, run the task's evaluate()
    ledger.py      ledger.db (SQLite): the only source of scores
    comparison.py  the one rule for comparing a score with the baseline; the best submission

Its bootstrap intervals (a score's, a paired improvement's) are :mod:`agent2rl.statistics`.
"""
