"""Earmark's own error types.

Everything below service/ raises these; service/ maps each type to one gRPC status
code in a single table. A refusal is not an error: it is a normal answer.
"""

from __future__ import annotations


class EarmarkError(Exception):
    """The base of every error a caller can be told about."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidArgument(EarmarkError):
    """The caller sent a value that can never be valid; the message names the field."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field


class NotFound(EarmarkError):
    """A budget or reservation that does not exist."""


class AlreadyExists(EarmarkError):
    """An idempotency key reused with different arguments."""


class PermissionDenied(EarmarkError):
    """The caller is known but may not do this: another caller's hold, a budget outside
    its token's prefixes."""


class FailedPrecondition(EarmarkError):
    """The request is well-formed but the state forbids it (a closed hold, say)."""


class Unavailable(EarmarkError):
    """The database is unreachable, overloaded or kept conflicting: safe to retry."""
