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


# One-line checks the config sections share (each section's `validate()` calls them with its own key prefix).
def require_positive(section: str, obj: object, *keys: str, allow_none: bool = False) -> None:
    """Every `obj.<key>` is an integer >= 1 (or None where `allow_none`)."""
    for key in keys:
        value = getattr(obj, key)
        if value is None and allow_none:
            continue
        if value is None or value < 1:
            raise UserError(f"{section}.{key}={value}: must be a positive integer" + (", or null" if allow_none else ""))


def require_choice(section: str, key: str, value: object, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise UserError(f"{section}.{key}={value!r}: allowed {', '.join(allowed)}")


def require_device(section: str, value: str) -> None:
    if value not in ("auto", "cpu", "cuda") and not value.startswith("cuda:"):
        raise UserError(f"{section}.device={value!r}: allowed auto, cpu, cuda, cuda:N")
