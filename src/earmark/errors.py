"""Earmark's own error types, and the stable reasons a caller can act on.

Everything below service/ raises these; service/ maps each type to one gRPC status
code in a single table and sends the reason, with the fields it concerns, as a
google.rpc.ErrorInfo. A refusal is not an error: it is a normal answer.

Reasons are part of the wire contract: a reason is added, never renamed or removed.
The SDK imports this module (it has no dependencies) to map reasons to exceptions.
"""

from __future__ import annotations

from enum import StrEnum

# ErrorInfo.domain: who defines the reasons.
DOMAIN = "earmark"


class Reason(StrEnum):
    """Why a call failed, in the words a program can switch on (ErrorInfo.reason)."""

    # INVALID_ARGUMENT: metadata `field` names the field.
    INVALID_FIELD = "INVALID_FIELD"
    # NOT_FOUND.
    BUDGET_NOT_FOUND = "BUDGET_NOT_FOUND"
    RESERVATION_NOT_FOUND = "RESERVATION_NOT_FOUND"
    TEMPLATE_NOT_FOUND = "TEMPLATE_NOT_FOUND"
    # ALREADY_EXISTS: an idempotency key came back with other arguments.
    KEY_REUSED = "KEY_REUSED"
    # FAILED_PRECONDITION: the hold is no longer HELD.
    HOLD_EXPIRED = "HOLD_EXPIRED"
    HOLD_SETTLED = "HOLD_SETTLED"
    HOLD_IN_DOUBT = "HOLD_IN_DOUBT"
    # ResolveHold on a hold that is not IN_DOUBT.
    HOLD_NOT_IN_DOUBT = "HOLD_NOT_IN_DOUBT"
    # A settled hold settled again with another `used`.
    SETTLE_MISMATCH = "SETTLE_MISMATCH"
    # PutBudget would change the unit of a budget in use.
    UNIT_LOCKED = "UNIT_LOCKED"
    # A nested Reserve names budgets in different units.
    UNIT_MISMATCH = "UNIT_MISMATCH"
    # The store holds as many distinct units as it may.
    UNITS_FULL = "UNITS_FULL"
    # The budget counts a unit that is not priced from tokens (a shape on a `tokens` budget).
    UNIT_NOT_PRICED = "UNIT_NOT_PRICED"
    PRICE_NOT_FOUND = "PRICE_NOT_FOUND"
    PRICE_BOOK_FULL = "PRICE_BOOK_FULL"
    BUDGET_ARCHIVED = "BUDGET_ARCHIVED"
    BUDGET_HAS_OPEN_HOLDS = "BUDGET_HAS_OPEN_HOLDS"
    # PutBudgetTemplate: the pattern matches ids another template's matches; or there are as
    # many templates as there may be (limits.templates_max).
    TEMPLATES_OVERLAP = "TEMPLATES_OVERLAP"
    TEMPLATES_FULL = "TEMPLATES_FULL"
    # The change would carry a counter past 2^63-1.
    COUNTER_OVERFLOW = "COUNTER_OVERFLOW"
    # In a region (issue 48): an operator's change to the region's share of a budget homed
    # elsewhere (change it at its home); or a share of a budget of an id the region has as
    # its own.
    BUDGET_IS_SHARE = "BUDGET_IS_SHARE"
    BUDGET_NOT_SHARED = "BUDGET_NOT_SHARED"
    # FAILED_PRECONDITION: the database refused a value or a constraint of this request
    # alone (metadata `sqlstate`); retrying it unchanged cannot help.
    DATABASE_REFUSED = "DATABASE_REFUSED"
    # A plan's call on a sidecar started without --limits-provider.
    NO_LIMITS_PROVIDER = "NO_LIMITS_PROVIDER"
    FEATURE_NOT_IN_PLAN = "FEATURE_NOT_IN_PLAN"
    # A Reserve named an account's billing-cycle budget by its id (as budget_id or in
    # also_budget_ids): only a Reserve by account may hold on one, through the plan gate.
    CYCLE_BUDGET_NEEDS_ACCOUNT = "CYCLE_BUDGET_NEEDS_ACCOUNT"
    # UNAUTHENTICATED and PERMISSION_DENIED.
    TOKEN_UNKNOWN = "TOKEN_UNKNOWN"
    BUDGET_NOT_PERMITTED = "BUDGET_NOT_PERMITTED"
    HOLD_OF_ANOTHER_CALLER = "HOLD_OF_ANOTHER_CALLER"
    # A region's Share named a region other than its token's.
    REGION_NOT_PERMITTED = "REGION_NOT_PERMITTED"
    # UNIMPLEMENTED: an Admin method called on the workers' listener (Admin has its own).
    ADMIN_ON_ITS_OWN_LISTENER = "ADMIN_ON_ITS_OWN_LISTENER"
    # RESOURCE_EXHAUSTED: too many long-lived streams.
    STREAMS_FULL = "STREAMS_FULL"
    # UNAVAILABLE: each is safe to retry with the same idempotency key.
    SHUTTING_DOWN = "SHUTTING_DOWN"
    OVERLOADED = "OVERLOADED"
    DATABASE_UNAVAILABLE = "DATABASE_UNAVAILABLE"
    # In a region (issue 48): a Reserve on a budget the region has no share of yet, while
    # the budget's home does not answer.
    HOME_UNREACHABLE = "HOME_UNREACHABLE"
    # The database cannot write: its disk is full, it is out of memory, it is read-only (a
    # standby, a demoted primary), or its files failed to read or write. Health turns
    # NOT_SERVING until a write goes through again.
    DATABASE_DISK_FULL = "DATABASE_DISK_FULL"
    DATABASE_OUT_OF_MEMORY = "DATABASE_OUT_OF_MEMORY"
    DATABASE_READ_ONLY = "DATABASE_READ_ONLY"
    DATABASE_IO_ERROR = "DATABASE_IO_ERROR"
    # The database takes no more connections (max_connections, a role's connection limit).
    DATABASE_CONNECTIONS_FULL = "DATABASE_CONNECTIONS_FULL"
    # A lock was not had within the database's lock_timeout, or an object was in use.
    DATABASE_BUSY = "DATABASE_BUSY"
    # The sidecar is still waiting for its database at start (--database-wait-seconds).
    DATABASE_STARTING = "DATABASE_STARTING"
    CONFLICT_RETRIES_EXHAUSTED = "CONFLICT_RETRIES_EXHAUSTED"
    LIMITS_UNAVAILABLE = "LIMITS_UNAVAILABLE"
    # The sidecar could not start listening (never sent to a caller: `earmark serve` prints it).
    LISTEN_FAILED = "LISTEN_FAILED"
    # Another sidecar holds the data dir's lock (never sent to a caller: `earmark serve`
    # prints it, naming that sidecar's pid).
    DATA_DIR_IN_USE = "DATA_DIR_IN_USE"
    # Anything else is a bug in the sidecar: INTERNAL, logged.
    INTERNAL = "INTERNAL"


class EarmarkError(Exception):
    """The base of every error a caller can be told about: a message for people, a
    reason and the fields it concerns (`about`, ErrorInfo.metadata) for programs."""

    def __init__(self, message: str, reason: Reason, **about: str) -> None:
        super().__init__(message)
        self.message = message
        self.reason = reason
        self.about = about


class InvalidArgument(EarmarkError):
    """The caller sent a value that can never be valid; the message names the field."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}", Reason.INVALID_FIELD, field=field)
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


def budget_not_found(budget_id: str, field: str = "budget_id") -> NotFound:
    """The one NotFound for a budget, so that every path names it alike."""
    prefix = "" if field == "budget_id" else f"{field}: "
    return NotFound(
        f"{prefix}budget {budget_id!r} not found",
        Reason.BUDGET_NOT_FOUND,
        budget_id=budget_id,
        field=field,
    )


def reservation_not_found(reservation_id: str) -> NotFound:
    """The one NotFound for a reservation."""
    return NotFound(
        f"reservation {reservation_id} not found",
        Reason.RESERVATION_NOT_FOUND,
        reservation_id=reservation_id,
    )
