"""Errors a user can cause; the CLI prints them as one line, never a traceback."""


class UserError(Exception):
    """A problem the user can fix (bad flag, missing model, unknown task).

    The message names the problem and the fix in one line.
    """
