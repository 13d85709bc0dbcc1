"""Errors a user can fix.

A `UserError` is bad input (a config value, a missing file, a malformed line). The CLI prints its message
as one line on stderr and exits with status 2, with no traceback; anything else is a bug and keeps its
traceback.
"""

from __future__ import annotations


class UserError(Exception):
    """Bad input: the message names the key or file, the bad value, and what is allowed."""

    exit_code = 2

    def __init__(self, message: str) -> None:
        # One line, always: a multi-line message would read as a traceback in logs.
        super().__init__(" ".join(str(message).split()))
