"""Errors a user can cause; the CLI prints them as one line, never a traceback."""


class UserError(Exception):
    """A problem the user can fix (bad flag, missing model, unknown task); its message names
    the problem and the fix in one line."""


class ModelFault(Exception):
    """An evaluation failed because of the submitted model itself, deterministically: a scorer
    or judge refused its output, or its own files make it unusable in a way only evaluation
    reveals. The grading service records such a failure as the model's and caches it, like a
    score (:mod:`agent2rl.grading.evaluator`); any other exception during an evaluation counts
    as the harness's and is retried when the same weights come again.
    """
