"""The SDK's exceptions: one base class, EarmarkClientError, for everything it raises.

A failed call is a ClientError: one class per status code a caller can act on, and below
those one class per stable reason the sidecar sends as a google.rpc.ErrorInfo (the reasons
are listed in earmark.errors.Reason and in docs/contract.md). A refusal is a normal answer
(Refusal); hold() raises it as RefusedError only when the caller did not ask for it back.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import cast

import google.rpc.error_details_pb2 as error_details_pb2
import google.rpc.status_pb2 as status_pb2
import grpc
from google.protobuf.message import DecodeError

# Refusal is imported from here by workers since before types.py held it.
from earmark.client.types import Refusal as Refusal
from earmark.errors import DOMAIN, Reason


class EarmarkClientError(Exception):
    """The base of everything the SDK raises. reason is the sidecar's stable reason (a
    Reason's value, or "" when the call failed before reaching it); about names the fields
    it concerns."""

    reason: str = ""
    about: dict[str, str]

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.about = {}


class ClientError(EarmarkClientError):
    """A call failed; code and details are the server's (or the channel's)."""

    def __init__(
        self,
        code: grpc.StatusCode,
        details: str,
        reason: str = "",
        about: dict[str, str] | None = None,
    ) -> None:
        super().__init__(f"{code.name}: {details}")
        self.code = code
        self.details = details
        self.reason = reason
        self.about = dict(about or {})


class InvalidArgumentError(ClientError):
    """The request had a malformed field; about["field"] names it."""


class NotFoundError(ClientError):
    """The budget or reservation does not exist."""


class BudgetNotFoundError(NotFoundError):
    """BUDGET_NOT_FOUND: no budget of that id (about["budget_id"])."""


class ReservationNotFoundError(NotFoundError):
    """RESERVATION_NOT_FOUND: no reservation of that id (about["reservation_id"])."""


class AlreadyExistsError(ClientError):
    """An idempotency key was reused with other arguments."""


class KeyReusedError(AlreadyExistsError):
    """KEY_REUSED: the idempotency key was used for another request; use a new key."""


class FailedPreconditionError(ClientError):
    """The hold is no longer held (settled or expired), or the budget forbids the change."""


class HoldClosedError(FailedPreconditionError):
    """The hold is not HELD any more: the worker must stop spending on it."""


class HoldExpiredError(HoldClosedError):
    """HOLD_EXPIRED: its lease passed (or an operator released it) and its rest returned."""


class HoldSettledError(HoldClosedError):
    """HOLD_SETTLED: it was settled already."""


class HoldInDoubtError(HoldClosedError):
    """HOLD_IN_DOUBT: its lease passed after a Charge; a Settle still records the truth."""


class SettleMismatchError(FailedPreconditionError):
    """SETTLE_MISMATCH: it was settled with another `used` (about["settled_used"])."""


class UnitLockedError(FailedPreconditionError):
    """UNIT_LOCKED: the budget is in use, so its unit cannot change."""


class BudgetArchivedError(FailedPreconditionError):
    """BUDGET_ARCHIVED: the budget was deleted; a new budget needs a new id."""


class PriceNotFoundError(FailedPreconditionError):
    """PRICE_NOT_FOUND: no price for the provider and model is in effect."""


class UnauthenticatedError(ClientError):
    """The sidecar needs a token and this call carried none, or an unknown one."""


class PermissionDeniedError(ClientError):
    """The token may not use this budget, or the hold belongs to another token."""


class UnavailableError(ClientError):
    """The sidecar or its database stayed unreachable through every retry, or no sidecar
    answered at the target within the call's deadline (the message names both)."""


class DeadlineExceededError(ClientError):
    """The call's deadline passed; it may or may not have taken effect."""


class HoldLostError(EarmarkClientError):
    """The hold expired or was closed while the block ran: the worker must stop spending.
    reason and about are those of the failure that found it gone (HOLD_EXPIRED, say)."""

    def __init__(self, message: str, cause: BaseException | None = None) -> None:
        super().__init__(message)
        if isinstance(cause, EarmarkClientError):
            self.reason = cause.reason
            self.about = dict(cause.about)


ERROR_OF: dict[grpc.StatusCode, type[ClientError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgumentError,
    grpc.StatusCode.NOT_FOUND: NotFoundError,
    grpc.StatusCode.ALREADY_EXISTS: AlreadyExistsError,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPreconditionError,
    grpc.StatusCode.UNAUTHENTICATED: UnauthenticatedError,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDeniedError,
    grpc.StatusCode.UNAVAILABLE: UnavailableError,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceededError,
}

# Reasons with a class of their own; each class is below its status code's class.
ERROR_OF_REASON: dict[Reason, type[ClientError]] = {
    Reason.BUDGET_NOT_FOUND: BudgetNotFoundError,
    Reason.RESERVATION_NOT_FOUND: ReservationNotFoundError,
    Reason.KEY_REUSED: KeyReusedError,
    Reason.HOLD_EXPIRED: HoldExpiredError,
    Reason.HOLD_SETTLED: HoldSettledError,
    Reason.HOLD_IN_DOUBT: HoldInDoubtError,
    Reason.SETTLE_MISMATCH: SettleMismatchError,
    Reason.UNIT_LOCKED: UnitLockedError,
    Reason.BUDGET_ARCHIVED: BudgetArchivedError,
    Reason.PRICE_NOT_FOUND: PriceNotFoundError,
}


# Where gRPC carries a google.rpc.Status (grpcio-status writes it on the sidecar).
STATUS_DETAILS_KEY = "grpc-status-details-bin"


def error_info(error: grpc.aio.AioRpcError) -> error_details_pb2.ErrorInfo | None:
    """The ErrorInfo of Earmark's domain in a failed call's status details, if any."""
    # grpc.aio's Metadata iterates (key, value) pairs, whatever the stubs say.
    trailers = cast("Iterable[tuple[str, str | bytes]]", error.trailing_metadata() or ())
    status = None
    for key, value in trailers:
        if key == STATUS_DETAILS_KEY and isinstance(value, bytes):
            try:
                status = status_pb2.Status.FromString(value)
            except DecodeError:
                return None
    # Details that disagree with the call's code are not a status to trust.
    if status is None or status.code != error.code().value[0]:
        return None
    for detail in status.details:
        info = error_details_pb2.ErrorInfo()
        if detail.Unpack(info) and info.domain == DOMAIN:
            return info
    return None


def from_rpc_error(error: grpc.aio.AioRpcError, target: str = "") -> ClientError:
    """The most specific ClientError for a failed call: its reason's class if it has one,
    else its code's. A failure the sidecar did not describe (the channel's own UNAVAILABLE
    or DEADLINE_EXCEEDED) names the target, so that a log line says where it went."""
    code = error.code()
    info = error_info(error)
    cls = ERROR_OF.get(code, ClientError)
    if info is None:
        details = error.details() or ""
        if target and code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
            details = f"{details} (target {target})"
        return cls(code, details)
    known = Reason.__members__.get(info.reason)
    specific = ERROR_OF_REASON.get(known) if known is not None else None
    if specific is not None and issubclass(specific, cls):
        cls = specific
    return cls(code, error.details() or "", info.reason, dict(info.metadata))


def unreachable(target: str, timeout_seconds: float) -> UnavailableError:
    """The error of a call whose channel never connected within its deadline: the sidecar
    is not listening at target (or not yet), which DEADLINE_EXCEEDED alone would hide."""
    return UnavailableError(
        grpc.StatusCode.UNAVAILABLE,
        f"no Earmark sidecar answered at {target} within the call's deadline of "
        f"{timeout_seconds:g} s (is it running, and are the target and the TLS settings "
        "right?)",
    )


class RefusedError(EarmarkClientError):
    """Raised by hold() on a refusal, unless the caller asked for the refusal back.
    reason is the refusal's: INSUFFICIENT_BUDGET, RATE_LIMITED, LIMIT_UNAVAILABLE, or one
    of a budget's run limits (issue 47): TOO_MANY_OPEN (as many holds open as it allows at
    once: again once one closes), ADMISSIONS_SPENT (as many Reserves admitted this period as
    it allows) or CLOSED (past its closes_at); from a region's sidecar (issue 48),
    SHARE_LEASE_ENDED or HOLD_OUTLIVES_SHARE (its share of the budget has no lease left, or
    too little for the hold's lease)."""

    def __init__(self, refusal: Refusal) -> None:
        super().__init__(f"{refusal.budget_id}: {refusal.message}")
        self.refusal = refusal
        self.reason = refusal.reason.name
        self.about = {"budget_id": refusal.refused_budget_id or refusal.budget_id}
